//! The traced query-block loop of the band kernels: one XLA loop over the
//! whole query blocks instead of one unrolled copy per block, so that the
//! program — and its trace and compile time — no longer grows with the
//! sequence.
//!
//! The block skipping stays exact. While tracing, the layout's cover of
//! every query block is summarized in a small `s32` table, one row per query
//! block: the visible whole key blocks `j0 .. j1`, of which `f0 .. f1` are
//! `Full` and the rest `Partial` (a band's visible blocks are contiguous,
//! with its partly covered blocks at the two edges), and the kind of the
//! ragged last key block. At run time the loop body reads its row of the
//! table and runs three key loops with traced bounds — the leading partial
//! blocks (masked), the full ones (no mask) and the trailing partial ones
//! (masked) — then the ragged key block under a conditional. No block the
//! band does not reach is computed.
//!
//! The ragged last query block (when the block size does not divide the
//! queries) is traced as before, with its static position and true size.

use tessel::prelude::*;

use tessel::Carry;

use super::flash::{elem, walk_row, Layout, StepFn};
use super::online_softmax::{Ctx, State};
use super::options::{Band, Cover};
use super::tiles::Pos;

/// The fewest whole query blocks for which the loop is used: below it the
/// unrolled rows are as small a program and keep their static positions.
pub(crate) const MIN_LOOPED_QUERY_BLOCKS: usize = 2;

/// Columns of the table: `j0, f0, f1, j1, tail`.
const COLUMNS: usize = 5;

/// `[j0, f0, f1, j1]` of query block `i` over the first `nk` key blocks:
/// `j0 .. f0` partial, `f0 .. f1` full, `f1 .. j1` partial; `None` when the
/// visible blocks do not have that shape (the rows are then unrolled).
fn runs(layout: &dyn Layout, i: usize, nk: usize) -> Option<[usize; 4]> {
    let kinds: Vec<Cover> = (0..nk).map(|j| layout.cover(i, j)).collect();
    let Some(j0) = kinds.iter().position(|&k| k != Cover::Empty) else {
        return Some([0; 4]);
    };
    let j1 = kinds.iter().rposition(|&k| k != Cover::Empty)? + 1;
    let (f0, f1) = match kinds.iter().position(|&k| k == Cover::Full) {
        Some(f0) => (f0, kinds.iter().rposition(|&k| k == Cover::Full)? + 1),
        None => (j1, j1),
    };
    let fits = (j0..j1).all(|j| {
        let want = if (f0..f1).contains(&j) {
            Cover::Full
        } else {
            Cover::Partial
        };
        kinds[j] == want
    });
    fits.then_some([j0, f0, f1, j1])
}

fn code(c: Cover) -> i32 {
    match c {
        Cover::Empty => 0,
        Cover::Full => 1,
        Cover::Partial => 2,
    }
}

/// The key-block runs of every whole query block of a band layout, as a
/// table read inside a traced loop over those query blocks.
pub(crate) struct RowPlan {
    band: Band,
    /// s32 `[nq, COLUMNS]`.
    table: Tensor,
    /// Whole query blocks (the loop's trip count).
    pub(crate) nq: usize,
    /// Whole key blocks.
    nk: usize,
    /// Keys in the ragged last key block (0: none).
    tail_c: usize,
}

impl RowPlan {
    /// The plan of `layout`, or `None` when it is not a band, has too few
    /// whole query blocks, or a query block's visible key blocks are not
    /// partial-full-partial runs (the caller then unrolls).
    pub(crate) fn new(ctx: &Ctx<'_>, layout: &dyn Layout) -> Option<RowPlan> {
        let band = layout.band()?;
        let d = ctx.d;
        let (bq, bk) = (ctx.o.block_q, ctx.o.block_kv);
        let (nq, nk) = (d.sq / bq, d.skv / bk);
        if nq < MIN_LOOPED_QUERY_BLOCKS {
            return None;
        }
        let tail_c = d.skv % bk;
        let mut table = Vec::with_capacity(nq * COLUMNS);
        for i in 0..nq {
            let [j0, f0, f1, j1] = runs(layout, i, nk)?;
            let tail = if tail_c > 0 {
                code(layout.cover(i, nk))
            } else {
                0
            };
            table.extend([j0 as i32, f0 as i32, f1 as i32, j1 as i32, tail]);
        }
        let table = Tensor::constant(&HostTensor::from_vec(table, [nq, COLUMNS]).ok()?);
        Some(RowPlan {
            band,
            table,
            nq,
            nk,
            tail_c,
        })
    }

    /// Threads `st` through `step` over the key blocks query block `i`
    /// (traced, its rows starting at `q0`) sees: the leading partial
    /// blocks, the full ones (no mask), the trailing partial ones, then the
    /// ragged key block when the query block sees it (with the band's mask).
    pub(crate) fn walk<S: Carry + Clone>(
        &self,
        ctx: &Ctx<'_>,
        i: Tensor,
        q0: Pos,
        st: S,
        step: &StepFn<'_, S>,
    ) -> S {
        let (bq, bk) = (ctx.o.block_q, ctx.o.block_kv);
        let at = |c: i64| {
            self.table
                .dynamic_slice(&[i, Tensor::scalar(c as f64, S32)], &[1, 1])
                .reshape(&[])
        };
        let key = |jt: Tensor| Pos::Traced {
            start: jt * bk as i32,
            in_range: true,
        };
        let masked = |st: S, jt: Tensor| {
            let mask = ctx.band_mask(&self.band, q0, bq, key(jt), bk);
            step(st, key(jt), bk, mask)
        };
        // With no whole key block (`block_kv` above the keys) the loops
        // would never run, and their bodies' `bk`-wide tiles would not fit.
        let st = if self.nk == 0 {
            st
        } else {
            let st = fori_loop(at(0), at(1), st, |jt, st| masked(st, jt));
            let st = fori_loop(at(1), at(2), st, |jt, st| step(st, key(jt), bk, None));
            fori_loop(at(2), at(3), st, |jt, st| masked(st, jt))
        };
        if self.tail_c == 0 {
            return st;
        }
        let k0 = Pos::Static(self.nk * bk);
        let seen = st.clone();
        cond(
            at(4).ne(0),
            move || {
                let mask = ctx.band_mask(&self.band, q0, bq, k0, self.tail_c);
                step(seen, k0, self.tail_c, mask)
            },
            || st,
        )
    }
}

/// The forward of a band layout with the whole query blocks in one traced
/// loop: `(output, logsumexp)` as [`run_static`](super::flash::run_static)
/// gives them, or `None` when there is no [`RowPlan`] for the layout (the
/// caller then unrolls).
pub(crate) fn run_looped(ctx: &Ctx<'_>, layout: &dyn Layout) -> Option<(Tensor, Tensor)> {
    let plan = RowPlan::new(ctx, layout)?;
    let d = ctx.d;
    let (bq, nq) = (ctx.o.block_q, plan.nq);
    let zero = Tensor::scalar(0.0, S32);
    let out = Tensor::zeros([d.b, d.hkv, d.g, nq * bq, d.dv], d.stat);
    let lse = Tensor::zeros([d.b, d.hkv, d.g, nq * bq], d.stat);
    let (out, lse) = fori_loop(0, nq as i32, (out, lse), |i, (out, lse)| {
        let start = i * bq as i32;
        let q0 = Pos::Traced {
            start,
            in_range: true,
        };
        let row = ctx.row(q0, bq);
        let st: State = plan.walk(ctx, i, q0, ctx.init(bq), &|st, k0, c, mask| {
            ctx.step(&row, st, k0, c, elem(mask))
        });
        let (o, l) = ctx.finish(st);
        (
            out.dynamic_update_slice(o, &[zero, zero, zero, start, zero]),
            lse.dynamic_update_slice(l, &[zero, zero, zero, start]),
        )
    });
    let (mut outs, mut lses) = (vec![out], vec![lse]);
    let r = d.sq - nq * bq;
    if r > 0 {
        let row = ctx.row_after(nq * bq, r, out);
        let st = walk_row(
            ctx,
            layout,
            nq,
            ctx.init(r),
            &|st: &State| st.0,
            &|st, k0, c, mask| ctx.step(&row, st, k0, c, elem(mask)),
        );
        let (o, l) = ctx.finish(st);
        outs.push(o);
        lses.push(l);
    }
    Some(ctx.assemble_exact(outs, lses))
}
