//! Splash-style block-sparse attention: the blocks a [`Mask`] (or one mask
//! per head) leaves empty are not computed, full blocks are not masked, and
//! partial blocks get the mask's element mask.
//!
//! Two forms:
//!
//! * a *static* layout ([`block_sparse_attention_with`]): the mask is a
//!   static argument, classified while tracing; the engine of
//!   [`flash_attention_with`](super::flash_attention_with) walks each query
//!   block's non-empty key blocks (runs of whole blocks as traced loops,
//!   single and ragged blocks with static positions), and partial blocks
//!   get [`Mask::block_mask`] at their static or traced block index;
//! * a *dynamic* layout ([`block_sparse_attention_dynamic_with`]): the
//!   [`MaskInfo`] tables and the mask's bits are inputs. A traced loop over
//!   the query blocks runs a traced loop over the row's listed key blocks
//!   (its bound, `num_nonempty[i]`, is traced); a partial block reads its
//!   bits in an XLA conditional, a full block does not.
//!
//! With one mask per head the layout is the union of the heads' layouts (a
//! block is skipped only if every head leaves it empty) and partial blocks
//! stack the heads' element masks.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};

use tessel::prelude::*;
use tessel::report;
use tessel::tile::{BlockIndex, BlockKind, BlockLayout, MaskInfo, MultiHeadMask};

use super::backward::differentiable;
use super::checks::{check, check_static, poisoned, Dims, QueryBlocks};
use super::flash::Layout;
use super::online_softmax::{Ctx, Elem, State};
use super::optional_inputs::AttentionExtras;
use super::options::{Cover, FlashOptions};
use super::tiles::{tile, Idx, Pos};
use crate::serving::metadata::MetadataChecks;

/// The mask of a block-sparse attention call: one [`Mask`] shared by every
/// head, or a [`MultiHeadMask`] with one mask per query head. A
/// [`StaticArg`]: it is part of the compile key (dense masks through a hash
/// of their bits, so two different dense masks never share a program).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::AttentionMask;
/// use tessel::prelude::*;
/// use tessel::tile::MultiHeadMask;
/// let shared = AttentionMask::from(Mask::causal(128, 128));
/// let per_head = AttentionMask::from(MultiHeadMask::new(vec![
///     Mask::causal(128, 128),
///     Mask::local(128, 128, Some(31), Some(0)),
/// ])?);
/// assert_eq!(per_head.num_heads(), Some(2));
/// assert_eq!(shared.shape(), (128, 128));
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Clone)]
pub struct AttentionMask {
    heads: Heads,
    key: String,
}

#[derive(Clone, Debug)]
enum Heads {
    Shared(Mask),
    PerHead(MultiHeadMask),
}

/// Keyed by its description: the structured masks' parameters and a 64-bit
/// hash of the bits of any dense part.
impl StaticArg for AttentionMask {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.key);
    }
}

impl fmt::Debug for AttentionMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// A hash of the bits of every part of `m` stored as bits.
fn fingerprint(m: &Mask) -> Option<u64> {
    m.has_dense_part().then(|| {
        let mut h = DefaultHasher::new();
        m.to_dense().hash(&mut h);
        h.finish()
    })
}

impl From<Mask> for AttentionMask {
    fn from(mask: Mask) -> Self {
        AttentionMask::shared(mask)
    }
}

impl From<MultiHeadMask> for AttentionMask {
    fn from(mask: MultiHeadMask) -> Self {
        AttentionMask::per_head(mask)
    }
}

impl AttentionMask {
    /// One mask for every head.
    pub fn shared(mask: Mask) -> Self {
        let key = format!("shared({mask:?}, bits {:?})", fingerprint(&mask));
        AttentionMask {
            heads: Heads::Shared(mask),
            key,
        }
    }

    /// One mask per query head (a shared [`MultiHeadMask`] counts as one
    /// per head, and must have as many heads as the queries).
    pub fn per_head(mask: MultiHeadMask) -> Self {
        let prints: Vec<Option<u64>> = (0..mask.num_heads())
            .map(|h| mask.head(h).and_then(fingerprint))
            .collect();
        let key = format!("per_head({mask:?}, bits {prints:?})");
        AttentionMask {
            heads: Heads::PerHead(mask),
            key,
        }
    }

    /// `(q_len, kv_len)` of the mask.
    pub fn shape(&self) -> (usize, usize) {
        match &self.heads {
            Heads::Shared(m) => m.shape(),
            Heads::PerHead(m) => (m.q_len(), m.kv_len()),
        }
    }

    /// The number of heads of a per-head mask (`None` when shared).
    pub fn num_heads(&self) -> Option<usize> {
        match &self.heads {
            Heads::Shared(_) => None,
            Heads::PerHead(m) => Some(m.num_heads()),
        }
    }

    /// The mask of query head `head`.
    pub fn head(&self, head: usize) -> Option<&Mask> {
        match &self.heads {
            Heads::Shared(m) => Some(m),
            Heads::PerHead(m) => m.head(head),
        }
    }

    /// The bits as a `pred` host tensor `[1, q_len, kv_len]` (shared) or
    /// `[heads, q_len, kv_len]` (per head), and-ed with the band of
    /// `options`: the `mask` input of the reference.
    pub fn to_host_tensor(&self, options: FlashOptions) -> Result<HostTensor> {
        let options = &options;
        let (sq, skv) = self.shape();
        let heads = self.with_band(options)?;
        let bits: Vec<bool> = heads.iter().flat_map(Mask::to_dense).collect();
        HostTensor::from_vec(bits, [heads.len(), sq, skv])
    }

    /// The masks (one, or one per head) and-ed with the band of `options`.
    fn with_band(&self, options: &FlashOptions) -> Result<Vec<Mask>> {
        let (sq, skv) = self.shape();
        let band = options.band_mask(sq, skv);
        let heads: Vec<Mask> = match &self.heads {
            Heads::Shared(m) => vec![m.clone()],
            Heads::PerHead(m) => (0..m.num_heads())
                .filter_map(|h| m.head(h).cloned())
                .collect(),
        };
        heads
            .into_iter()
            .map(|m| match &band {
                Some(b) => m.and(b),
                None => Ok(m),
            })
            .collect()
    }
}

fn cover_of(kind: BlockKind) -> Cover {
    match kind {
        BlockKind::Empty => Cover::Empty,
        BlockKind::Full => Cover::Full,
        BlockKind::Partial => Cover::Partial,
    }
}

/// The masks for `d`'s heads and their (union) layout, or the error message.
fn layout_for(
    mask: &AttentionMask,
    d: &Dims,
    o: &FlashOptions,
) -> std::result::Result<(Vec<Mask>, BlockLayout), String> {
    let (mq, mk) = mask.shape();
    if (mq, mk) != (d.sq, d.skv) {
        return Err(format!(
            "the mask is {mq} x {mk} but the queries and keys are {} x {}",
            d.sq, d.skv
        ));
    }
    if let Some(h) = mask.num_heads() {
        if h != d.hq {
            return Err(format!(
                "the mask has {h} heads but the queries have {}",
                d.hq
            ));
        }
    }
    let heads = mask.with_band(o).map_err(|e| e.to_string())?;
    let layout = if heads.len() == 1 {
        heads[0].classify(o.block_q, o.block_kv)
    } else {
        MultiHeadMask::new(heads.clone())
            .and_then(|m| m.classify(o.block_q, o.block_kv))
            .map(|l| l.union().clone())
    }
    .map_err(|e| e.to_string())?;
    Ok((heads, layout))
}

/// Records a kernel error under `op` if `extras` has a traced query
/// offset, which the static block layouts cannot take.
#[track_caller]
fn refuses_offset(op: &str, q: Tensor, extras: &AttentionExtras) -> bool {
    let Some(off) = extras.q_offset else {
        return false;
    };
    report::fail(
        op,
        &[q, off],
        "block-sparse layouts are static: a traced q_offset is taken by flash_attention and \
         attention_reference (or give the offset in FlashOptions::q_offset)",
    );
    true
}

/// Block-sparse attention inside a kernel with a static block layout, with
/// the optional inputs: the output `[B, Hq, Sq, Dv]` and logsumexp
/// `[B, Hq, Sq]`. The mask must be `Sq × Skv` (and have `Hq` heads if per
/// head); it is and-ed with the band of `options`. Conventions as
/// [`flash_attention_with`](super::flash_attention_with).
#[track_caller]
pub fn block_sparse_attention_with(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: &AttentionMask,
    extras: &AttentionExtras,
    options: FlashOptions,
) -> (Tensor, Tensor) {
    let options = &options;
    const OP: &str = "block_sparse_attention";
    if refuses_offset(OP, q, extras) {
        return poisoned(q);
    }
    let Some(d) = check_static(OP, q, k, v, extras, options, QueryBlocks::Unrolled) else {
        return poisoned(q);
    };
    let (heads, layout) = match layout_for(mask, &d, options) {
        Ok(x) => x,
        Err(m) => {
            report::fail(OP, &[q, k, v], m);
            return poisoned(q);
        }
    };
    let layout = SparseLayout {
        heads,
        layout,
        bq: options.block_q,
        bk: options.block_kv,
        hkv: d.hkv,
        g: d.g,
    };
    differentiable(q, k, v, extras, options, d, layout)
}

/// A static block-sparse mask as a [`Layout`]: its block kinds, and each
/// partial block's element mask (per head, `[1, Hkv, G, r, c]`, when the
/// mask has one per head).
struct SparseLayout {
    heads: Vec<Mask>,
    layout: BlockLayout,
    bq: usize,
    bk: usize,
    hkv: usize,
    g: usize,
}

impl Layout for SparseLayout {
    fn cover(&self, i: usize, j: usize) -> Cover {
        cover_of(self.layout.kind(i, j).unwrap_or(BlockKind::Empty))
    }

    fn mask(&self, _ctx: &Ctx<'_>, i: usize, j: Idx, r: usize, c: usize) -> Option<Tensor> {
        let (bq, bk) = (self.bq, self.bk);
        let at = |m: &Mask| {
            let jb = match j {
                Idx::Static(j) => BlockIndex::Static(j),
                Idx::Traced(t) => BlockIndex::Traced(t),
            };
            let mut e = m.block_mask(i, jb, bq, bk);
            if r < bq {
                e = e.slice_axis(0, 0, r);
            }
            if c < bk {
                e = e.slice_axis(1, 0, c);
            }
            e.reshape(&[1, r as isize, c as isize])
        };
        // [heads, r, c] -> [1, hk, g, r, c]
        let stacked = if self.heads.len() == 1 {
            at(&self.heads[0]).reshape(&[1, 1, 1, r as isize, c as isize])
        } else {
            let all: Vec<Tensor> = self.heads.iter().map(at).collect();
            concat(&all, 0).reshape(&[
                1,
                self.hkv as isize,
                self.g as isize,
                r as isize,
                c as isize,
            ])
        };
        Some(stacked)
    }
}

/// A block-sparse layout as inputs of
/// [`block_sparse_attention_dynamic`](fn@super::block_sparse_attention_dynamic):
/// the mask's bits and its
/// [`MaskInfo`] tables, for the block sizes of some [`FlashOptions`].
#[derive(Clone, Debug)]
pub struct DynamicMask {
    /// `pred[1 or Hq, Sq, Skv]`: the mask and-ed with the options' band.
    pub bits: HostTensor,
    /// `s32[nq]`: non-empty key blocks per query block.
    pub num_nonempty: HostTensor,
    /// `s32[nq, width]`: their block indices.
    pub kv_block_ids: HostTensor,
    /// `s32[nq, width]`: their kinds (1 partial, 2 full).
    pub block_kinds: HostTensor,
}

impl DynamicMask {
    /// The bits and tables of `mask` and-ed with the band of `options`, at
    /// its block sizes (for a per-head mask, the tables of the union
    /// layout).
    pub fn new(mask: &AttentionMask, options: FlashOptions) -> Result<DynamicMask> {
        let options = &options;
        let heads = mask.with_band(options)?;
        let info: MaskInfo = if heads.len() == 1 {
            heads[0]
                .classify(options.block_q, options.block_kv)?
                .mask_info()?
        } else {
            MultiHeadMask::new(heads.clone())?
                .classify(options.block_q, options.block_kv)?
                .union()
                .mask_info()?
        };
        let (sq, skv) = mask.shape();
        let bits: Vec<bool> = heads.iter().flat_map(Mask::to_dense).collect();
        Ok(DynamicMask {
            bits: HostTensor::from_vec(bits, [heads.len(), sq, skv])?,
            num_nonempty: info.num_nonempty,
            kv_block_ids: info.kv_block_ids,
            block_kinds: info.block_kinds,
        })
    }
}

/// Checks the dynamic layout's inputs against `d`.
fn check_tables(t: &[Tensor; 4], d: &Dims, o: &FlashOptions) -> std::result::Result<(), String> {
    let [bits, counts, ids, kinds] = *t;
    let nq = d.sq.div_ceil(o.block_q);
    let bs = bits.shape();
    if bits.dtype() != PRED
        || bs.len() != 3
        || (bs[0] != 1 && bs[0] != d.hq)
        || bs[1] != d.sq
        || bs[2] != d.skv
    {
        return Err(format!(
            "the mask bits must be pred[1 or {}, {}, {}], got {}",
            d.hq,
            d.sq,
            d.skv,
            bits.spec()
        ));
    }
    if counts.dtype() != S32 || counts.shape() != [nq] {
        return Err(format!(
            "num_nonempty must be s32[{nq}] (one count per block of {} queries), got {}",
            o.block_q,
            counts.spec()
        ));
    }
    let is = ids.shape();
    if ids.dtype() != S32 || is.len() != 2 || is[0] != nq || is[1] == 0 {
        return Err(format!(
            "kv_block_ids must be s32[{nq}, width], got {}",
            ids.spec()
        ));
    }
    if kinds.dtype() != S32 || kinds.shape() != is {
        return Err(format!(
            "block_kinds must be s32 of the shape of kv_block_ids ({:?}), got {}",
            is,
            kinds.spec()
        ));
    }
    Ok(())
}

/// Checks a dynamic layout's tables inside the program: each count in
/// `0 ..= width`, and each listed entry (`t < count`) a key block in
/// `0 .. nk` listed once per query block, of kind partial or full, and
/// partial if it is the last and `ragged` (it has keys past the end).
#[track_caller]
fn check_layout(counts: Tensor, ids: Tensor, kinds: Tensor, nk: usize, ragged: bool) {
    let (nq, width) = (ids.dim(0), ids.dim(1));
    // One reduction finds the first of these that fails (each costs the
    // program a kernel).
    let mut c = MetadataChecks::new();
    let bad = counts.lt(0) | counts.gt(width as i32);
    c.table(
        bad.reshape(&[nq as isize, 1]),
        format!("num_nonempty must count 0..={width} blocks per query block, got {{}}"),
        move |_, _| vec![counts],
    );
    let listed = Tensor::iota([nq, width], 1, S32).lt(counts.reshape(&[nq as isize, 1]));
    c.ids(
        ids,
        listed,
        nk,
        "kv_block_ids",
        "not a key block",
        "query block {} lists key block {} twice",
    );
    let kind = listed & kinds.ne(BlockKind::Partial.code()) & kinds.ne(BlockKind::Full.code());
    c.table(
        kind,
        "block_kinds of listed blocks must be 1 (partial) or 2 (full), got {}",
        move |_, _| vec![kinds],
    );
    if ragged {
        let full = listed & ids.eq(nk as i32 - 1) & kinds.eq(BlockKind::Full.code());
        c.table(
            full,
            format!(
                "key block {} has keys past the end: it must be listed as partial (1), got block_kinds {{}}",
                nk - 1
            ),
            move |_, _| vec![kinds],
        );
    }
    c.raise();
}

/// Block-sparse attention inside a kernel with a dynamic layout (see
/// [`block_sparse_attention_dynamic`](fn@super::block_sparse_attention_dynamic)),
/// with the optional inputs. `tables` is `[bits, num_nonempty,
/// kv_block_ids, block_kinds]` as in [`DynamicMask`]; the band of
/// `options` is *not* applied here (it is part of the tables and bits
/// [`DynamicMask::new`] makes).
#[track_caller]
pub fn block_sparse_attention_dynamic_with(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    tables: [Tensor; 4],
    extras: &AttentionExtras,
    options: FlashOptions,
) -> (Tensor, Tensor) {
    let options = &options;
    const OP: &str = "block_sparse_attention_dynamic";
    if refuses_offset(OP, q, extras) {
        return poisoned(q);
    }
    let Some(d) = check(OP, q, k, v, extras, options) else {
        return poisoned(q);
    };
    if let Err(m) = check_tables(&tables, &d, options) {
        let mut operands = vec![q];
        operands.extend(tables);
        report::fail(OP, &operands, m);
        return poisoned(q);
    }
    let [bits, counts, ids, kinds] = tables;
    let ctx = Ctx::new(q, k, v, extras, options, d);
    let (bq, bk) = (options.block_q, options.block_kv);
    let nq = d.sq.div_ceil(bq);
    if !options.unchecked {
        check_layout(
            counts,
            ids,
            kinds,
            d.skv.div_ceil(bk),
            !d.skv.is_multiple_of(bk),
        );
    }
    let bits5 = {
        let (hk, g) = if bits.dim(0) == 1 {
            (1, 1)
        } else {
            (d.hkv, d.g)
        };
        bits.reshape(&[1, hk as isize, g as isize, d.sq as isize, d.skv as isize])
    };
    let zero = Tensor::scalar(0.0, S32);
    let out = Tensor::zeros([d.b, d.hkv, d.g, nq * bq, d.dv], d.stat);
    let lse = Tensor::zeros([d.b, d.hkv, d.g, nq * bq], d.stat);
    let (out, lse) = fori_loop(0, nq as i32, (out, lse), |i, (out, lse)| {
        let q0 = Pos::Traced {
            start: i * bq as i32,
            in_range: false,
        };
        let row = ctx.row(q0, bq);
        let n = counts.dynamic_slice(&[i], &[1]).reshape(&[]);
        let st: State = fori_loop(0, n, ctx.init(bq), |t, st| {
            let at = |table: Tensor| table.dynamic_slice(&[i, t], &[1, 1]).reshape(&[]);
            let (j, kind) = (at(ids), at(kinds));
            let k0 = Pos::Traced {
                start: j * bk as i32,
                in_range: false,
            };
            let element = || tile(bits5, &[(3, q0, bq), (4, k0, bk)], 0.0);
            let partial = kind.eq(BlockKind::Partial.code());
            ctx.step(&row, st, k0, bk, Elem::When(partial, &element))
        });
        let (o, l) = ctx.finish(st);
        let start = i * bq as i32;
        (
            out.dynamic_update_slice(o, &[zero, zero, zero, start, zero]),
            lse.dynamic_update_slice(l, &[zero, zero, zero, start]),
        )
    });
    ctx.assemble(
        vec![out.slice_axis(3, 0, d.sq)],
        vec![lse.slice_axis(3, 0, d.sq)],
    )
}
