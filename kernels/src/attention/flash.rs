//! Flash attention: an online softmax over blocks of keys, with the blocks a
//! query block cannot see skipped while tracing.
//!
//! The forward of a band (flash attention: causal, sliding window) runs its
//! whole query blocks as one traced loop ([`query_loop`](super::query_loop)), so the
//! program does not grow with the sequence. Everything else — the ragged
//! last query block, block-sparse layouts, bands at a traced offset and the
//! backward pass — unrolls the query blocks while tracing, so each one knows
//! its rows statically; for each, the kernel walks the key blocks its layout
//! reaches — the others are never computed — and groups them into runs:
//!
//! * a run of two or more whole blocks of one kind is one traced loop
//!   (`fori_loop`) over the block index, reading keys and values with a
//!   dynamic slice;
//! * a single block, and the ragged last block of the keys, is traced with
//!   its static position and its true size (a ragged block is simply
//!   smaller: nothing is padded and no padded key is ever scored);
//! * only the blocks the band covers partially (`Partial`) get the band's
//!   element mask; `Full` blocks get none.
//!
//! The last query block is likewise just smaller. No intermediate is larger
//! than one `[B, H, block_q, block_kv]` block of logits, and the unrolled
//! parts run one after the other: each reads its queries (or keys) at a
//! position that depends on the previous part's results, so XLA cannot
//! hoist their matmuls and keep many blocks of logits alive at once
//! (`tiles::after`; at S = 8192 this keeps the temporaries near 20 MiB).

use tessel::prelude::*;
use tessel::Carry;

use super::backward::differentiable;
use super::checks::{check_static, poisoned, Dims, QueryBlocks};
use super::online_softmax::{Ctx, Elem, State};
use super::optional_inputs::AttentionExtras;
use super::options::{Band, Cover, FlashOptions};
use super::tiles::{after, Idx, Pos};

/// Which blocks of the score matrix a static-layout kernel computes, and
/// the element mask of the partly visible ones. Owned data (`'static`), so
/// the backward pass can keep it.
pub(crate) trait Layout: 'static {
    /// The kind of key block `j` for query block `i`.
    fn cover(&self, i: usize, j: usize) -> Cover;
    /// The element mask of block `(i, j)` with `r` rows and `c` keys
    /// (broadcasting to `[B, Hkv, G, r, c]`), for a `Partial` block.
    fn mask(&self, ctx: &Ctx<'_>, i: usize, j: Idx, r: usize, c: usize) -> Option<Tensor>;
    /// The band whose element masks the partial blocks get, when the layout
    /// is one whose place is known while tracing: its masks are arithmetic
    /// on positions, so the query blocks can be a traced loop
    /// ([`run_looped`](super::query_loop::run_looped)).
    fn band(&self) -> Option<Band> {
        None
    }
}

/// One step over a block of keys: the state after keys `k0 .. k0 + c`,
/// with the block's element mask.
pub(crate) type StepFn<'a, S> = dyn Fn(S, Pos, usize, Option<Tensor>) -> S + 'a;

/// Walks the key blocks query block `i` sees, as runs (see the module
/// documentation), threading `st` through `step`. `dep` names the tensor of
/// the state a single block's keys are read after.
pub(crate) fn walk_row<S: Carry>(
    ctx: &Ctx<'_>,
    layout: &dyn Layout,
    i: usize,
    mut st: S,
    dep: &dyn Fn(&S) -> Tensor,
    step: &StepFn<'_, S>,
) -> S {
    let d = ctx.d;
    let bk = ctx.o.block_kv;
    let bq = ctx.o.block_q;
    let r = bq.min(d.sq - i * bq);
    let nk = d.skv.div_ceil(bk);
    let width = |j: usize| bk.min(d.skv - j * bk);
    let mut j = 0;
    while j < nk {
        let kind = layout.cover(i, j);
        if kind == Cover::Empty {
            j += 1;
            continue;
        }
        let c = width(j);
        let mut end = j + 1;
        if c == bk {
            while end < nk && width(end) == bk && layout.cover(i, end) == kind {
                end += 1;
            }
        }
        let partial = kind == Cover::Partial;
        if end - j == 1 {
            let mask = if partial {
                layout.mask(ctx, i, Idx::Static(j), r, c)
            } else {
                None
            };
            // Steps of a row one after the other too.
            let k0 = if j > 0 {
                after(j * bk, dep(&st))
            } else {
                Pos::Static(0)
            };
            st = step(st, k0, c, mask);
        } else {
            st = fori_loop(j as i32, end as i32, st, |jt, st| {
                let k0 = Pos::Traced {
                    start: jt * bk as i32,
                    in_range: true,
                };
                let mask = if partial {
                    layout.mask(ctx, i, Idx::Traced(jt), r, bk)
                } else {
                    None
                };
                step(st, k0, bk, mask)
            });
        }
        j = end;
    }
    st
}

/// The static-layout engine: every query block unrolled, the key blocks of
/// each visited as runs (see the module documentation). The logsumexp is
/// in the statistics' dtype.
pub(crate) fn run_static(ctx: &Ctx<'_>, layout: &dyn Layout) -> (Tensor, Tensor) {
    let d = ctx.d;
    let bq = ctx.o.block_q;
    let nq = d.sq.div_ceil(bq);
    let (mut outs, mut lses): (Vec<Tensor>, Vec<Tensor>) = (Vec::new(), Vec::new());
    for i in 0..nq {
        let q0 = i * bq;
        let r = bq.min(d.sq - q0);
        // Rows one after the other (see `tiles::after`).
        let row = match outs.last() {
            Some(&prev) => ctx.row_after(q0, r, prev),
            None => ctx.row(Pos::Static(q0), r),
        };
        let st: State = ctx.init(r);
        let st = walk_row(
            ctx,
            layout,
            i,
            st,
            &|st: &State| st.0,
            &|st, k0, c, mask| ctx.step(&row, st, k0, c, elem(mask)),
        );
        let (o, l) = ctx.finish(st);
        outs.push(o);
        lses.push(l);
    }
    ctx.assemble_exact(outs, lses)
}

pub(crate) fn elem<'a>(mask: Option<Tensor>) -> Elem<'a> {
    match mask {
        Some(m) => Elem::Always(m),
        None => Elem::None,
    }
}

/// The band of the flash kernels as a [`Layout`].
#[derive(Clone, Copy)]
pub(crate) struct BandLayout {
    band: Band,
    bq: usize,
    bk: usize,
    sq: usize,
    skv: usize,
    /// The queries' positions have a traced offset: the band's place is
    /// unknown while tracing, so every block is partial.
    traced: bool,
}

impl BandLayout {
    /// The band of `options` over the extents `d`.
    pub(crate) fn new(options: &FlashOptions, d: &Dims, traced: bool) -> BandLayout {
        BandLayout {
            traced: traced && options.has_band(),
            band: Band::of(options),
            bq: options.block_q,
            bk: options.block_kv,
            sq: d.sq,
            skv: d.skv,
        }
    }
}

impl Layout for BandLayout {
    fn cover(&self, i: usize, j: usize) -> Cover {
        if self.traced {
            return Cover::Partial;
        }
        let (q0, k0) = (i * self.bq, j * self.bk);
        self.band.cover(
            q0,
            (q0 + self.bq).min(self.sq),
            k0,
            (k0 + self.bk).min(self.skv),
        )
    }

    fn mask(&self, ctx: &Ctx<'_>, i: usize, j: Idx, r: usize, c: usize) -> Option<Tensor> {
        let k0 = match j {
            Idx::Static(j) => Pos::Static(j * self.bk),
            Idx::Traced(t) => Pos::Traced {
                start: t * self.bk as i32,
                in_range: true,
            },
        };
        ctx.band_mask(&self.band, Pos::Static(i * self.bq), r, k0, c)
    }

    fn band(&self) -> Option<Band> {
        (!self.traced).then_some(self.band)
    }
}

/// Flash attention inside a kernel, with the optional inputs: the output
/// `[B, Hq, Sq, Dv]` (inputs' dtype) and the logsumexp `[B, Hq, Sq]` (f32).
///
/// `q: [B, Hq, Sq, D]`, `k: [B, Hkv, Skv, D]`, `v: [B, Hkv, Skv, Dv]` of one
/// float dtype, `Hq` a multiple of `Hkv` (grouped-query attention; `Hkv = 1`
/// is multi-query attention). Logits are `q·kᵀ·scale`, soft-capped, plus
/// the bias; keys outside the band, the segment or the mask are hidden; the
/// softmax statistics and the accumulator are f32 (f64 for f64 inputs). A
/// row with no visible key gives 0 and a logsumexp of `-inf`. NaN
/// propagates as through a softmax (and as in JAX's
/// `dot_product_attention`): a row whose visible logits include a NaN (a
/// NaN in its query, in a key it sees, or in the bias) gives NaN output and
/// logsumexp, while hidden logits are replaced before the softmax and never
/// poison a row. A NaN in `v` reaches the rows whose weights multiply it:
/// those that see its key, and possibly rows where that key is masked inside
/// a computed block (`0 · NaN` is NaN); rows with no visible key still give
/// 0. Dropout drops
/// probabilities after normalization (the logsumexp is that of the
/// undropped logits).
///
/// Argument errors are recorded on the trace (the kernel then fails with
/// [`Error::Kernel`]): ranks, dtypes, head counts that do not divide,
/// mismatched head dimensions, wrong bias/mask/segment shapes, bad options.
#[track_caller]
pub fn flash_attention_with(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    extras: &AttentionExtras,
    options: FlashOptions,
) -> (Tensor, Tensor) {
    let options = &options;
    // A band at a static offset runs its query blocks in one loop (`query_loop.rs`).
    let rows = match extras.q_offset {
        None => QueryBlocks::Looped,
        Some(_) => QueryBlocks::Unrolled,
    };
    let Some(d) = check_static("flash_attention", q, k, v, extras, options, rows) else {
        return poisoned(q);
    };
    let layout = BandLayout::new(options, &d, extras.q_offset.is_some());
    differentiable(q, k, v, extras, options, d, layout)
}
