//! Flash attention: an online softmax over blocks of keys, with the blocks a
//! query block cannot see skipped while tracing.
//!
//! The query blocks are unrolled while tracing, so each one knows its rows
//! statically; for each, the kernel walks the key blocks its band (causal,
//! sliding window) reaches — the others are never computed — and groups
//! them into runs:
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
//! (`core::after`; at S = 8192 this keeps the temporaries near 20 MiB).

use tessel::prelude::*;

use super::core::{after, check, poisoned, AttentionExtras, Ctx, Elem, Idx, Pos, State};
use super::options::{Band, Cover, FlashOptions};

/// The kind of key block `j` for query block `i`.
pub(crate) type CoverFn<'a> = dyn Fn(usize, usize) -> Cover + 'a;
/// The element mask of block `(i, j)` with `r` rows and `c` keys
/// (broadcasting to `[B, Hkv, G, r, c]`), for a `Partial` block.
pub(crate) type MaskFn<'a> = dyn Fn(usize, Idx, usize, usize) -> Option<Tensor> + 'a;

/// The static-layout engine: every query block unrolled, the key blocks of
/// each visited as runs (see the module documentation).
pub(crate) fn run_static(
    ctx: &Ctx<'_>,
    cover: &CoverFn<'_>,
    masker: &MaskFn<'_>,
) -> (Tensor, Tensor) {
    let d = ctx.d;
    let (bq, bk) = (ctx.o.block_q, ctx.o.block_kv);
    let nq = d.sq.div_ceil(bq);
    let nk = d.skv.div_ceil(bk);
    let width = |j: usize| bk.min(d.skv - j * bk);
    let (mut outs, mut lses): (Vec<Tensor>, Vec<Tensor>) = (Vec::new(), Vec::new());
    for i in 0..nq {
        let q0 = i * bq;
        let r = bq.min(d.sq - q0);
        // Rows one after the other (see `core::after`).
        let row = match outs.last() {
            Some(&prev) => ctx.row_after(q0, r, prev),
            None => ctx.row(Pos::Static(q0), r),
        };
        let mut st: State = ctx.init(r);
        let mut j = 0;
        while j < nk {
            let kind = cover(i, j);
            if kind == Cover::Empty {
                j += 1;
                continue;
            }
            let c = width(j);
            let mut end = j + 1;
            if c == bk {
                while end < nk && width(end) == bk && cover(i, end) == kind {
                    end += 1;
                }
            }
            let partial = kind == Cover::Partial;
            if end - j == 1 {
                let mask = if partial {
                    masker(i, Idx::Static(j), r, c)
                } else {
                    None
                };
                // Steps of a row one after the other too.
                let k0 = if j > 0 {
                    after(j * bk, st.0)
                } else {
                    Pos::Static(0)
                };
                st = ctx.step(&row, st, k0, c, elem(mask));
            } else {
                st = fori_loop(j as i32, end as i32, st, |jt, st| {
                    let k0 = Pos::Traced {
                        start: jt * bk as i32,
                        in_range: true,
                    };
                    let mask = if partial {
                        masker(i, Idx::Traced(jt), r, bk)
                    } else {
                        None
                    };
                    ctx.step(&row, st, k0, bk, elem(mask))
                });
            }
            j = end;
        }
        let (o, l) = ctx.finish(st);
        outs.push(o);
        lses.push(l);
    }
    ctx.assemble(outs, lses)
}

fn elem<'a>(mask: Option<Tensor>) -> Elem<'a> {
    match mask {
        Some(m) => Elem::Always(m),
        None => Elem::None,
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
    options: &FlashOptions,
) -> (Tensor, Tensor) {
    let Some(d) = check("flash_attention", q, k, v, extras, options) else {
        return poisoned(q);
    };
    let ctx = Ctx::new(q, k, v, extras, options, d);
    let band = Band::of(options);
    let (bq, bk) = (options.block_q, options.block_kv);
    let cover = |i: usize, j: usize| {
        let (q0, k0) = (i * bq, j * bk);
        band.cover(q0, (q0 + bq).min(d.sq), k0, (k0 + bk).min(d.skv))
    };
    let masker = |i: usize, j: Idx, r: usize, c: usize| {
        let k0 = match j {
            Idx::Static(j) => Pos::Static(j * bk),
            Idx::Traced(t) => Pos::Traced {
                start: t * bk as i32,
                in_range: true,
            },
        };
        ctx.band_mask(&band, Pos::Static(i * bq), r, k0, c)
    };
    run_static(&ctx, &cover, &masker)
}
