//! The backward pass of the static-layout attention kernels (flash and
//! block-sparse), FlashAttention-2 style, as the [`custom_vjp`] of their
//! forward: nothing of the forward's loops is saved but its output and
//! logsumexp; the probabilities are recomputed block by block.
//!
//! For each query block (unrolled, as in the forward) the key blocks it saw
//! are walked again with the same runs, skips and masks
//! ([`walk_row`]). Per block of keys, with `P = exp(S − lse)`:
//!
//! * `dV[keys] += Pᵀ·dO` (dropout applied to `P` as in the forward),
//! * `dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O) + dlse)`,
//! * the bias gradient is `dS` (summed over the axes the bias broadcasts);
//!   through the soft cap `dS ∘= 1 − tanh²`,
//! * `dQ[rows] += dS·K·scale`, `dK[keys] += dSᵀ·(Q·scale)`.
//!
//! `dK`/`dV` are carried whole (one `[B, Hkv, Skv, D]` accumulator each,
//! updated in place block by block), so a group of query heads (GQA/MQA)
//! sums into its key/value head; no intermediate is larger than a block of
//! logits.

use std::rc::Rc;

use tessel::autodiff::custom_vjp;
use tessel::ops::DotDims;
use tessel::prelude::*;

use super::checks::{check_static, poisoned, Dims, QueryBlocks};
use super::flash::{elem, run_static, walk_row, BandLayout, Layout, StepFn};
use super::online_softmax::{Ctx, Row};
use super::optional_inputs::AttentionExtras;
use super::options::FlashOptions;
use super::query_loop::{run_looped, RowPlan};
use super::tiles::{dropout_keep, tile, Pos};

/// The optional inputs that are not differentiated, as residuals.
#[derive(Clone, Copy)]
struct Present {
    mask: bool,
    segments: bool,
    seed: bool,
    offset: bool,
}

fn aux_tensors(x: &AttentionExtras) -> (Present, Vec<Tensor>) {
    let mut v = Vec::new();
    if let Some(m) = x.mask {
        v.push(m);
    }
    if let Some((a, b)) = x.segment_ids {
        v.push(a);
        v.push(b);
    }
    if let Some(s) = x.dropout_seed {
        v.push(s);
    }
    if let Some(o) = x.q_offset {
        v.push(o);
    }
    let p = Present {
        mask: x.mask.is_some(),
        segments: x.segment_ids.is_some(),
        seed: x.dropout_seed.is_some(),
        offset: x.q_offset.is_some(),
    };
    (p, v)
}

fn extras_from(bias: Option<Tensor>, present: Present, aux: &[Tensor]) -> AttentionExtras {
    let mut it = aux.iter().copied();
    let mask = if present.mask { it.next() } else { None };
    let segment_ids = if present.segments {
        match (it.next(), it.next()) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        }
    } else {
        None
    };
    let dropout_seed = if present.seed { it.next() } else { None };
    let q_offset = if present.offset { it.next() } else { None };
    AttentionExtras {
        bias,
        mask,
        segment_ids,
        dropout_seed,
        q_offset,
    }
}

/// The static-layout forward with its FlashAttention-2 backward: `(output,
/// logsumexp)`, differentiable in `q`, `k`, `v` and the bias.
pub(crate) fn differentiable<L: Layout>(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    extras: &AttentionExtras,
    options: &FlashOptions,
    d: Dims,
    layout: L,
) -> (Tensor, Tensor) {
    let layout = Rc::new(layout);
    let with_bias = extras.bias.is_some();
    let (present, aux) = aux_tensors(extras);
    let n = if with_bias { 4 } else { 3 };
    let mut primals = vec![q, k, v];
    primals.extend(extras.bias);
    let bwd_opts = *options;
    let fwd_layout = Rc::clone(&layout);
    let out = custom_vjp(
        primals,
        move |p: Vec<Tensor>| {
            let x = extras_from(p.get(3).copied(), present, &aux);
            let ctx = Ctx::new(p[0], p[1], p[2], &x, options, d);
            let (o, lse) =
                run_looped(&ctx, &*fwd_layout).unwrap_or_else(|| run_static(&ctx, &*fwd_layout));
            let mut res = p;
            res.extend(aux);
            res.push(o);
            res.push(lse);
            (vec![o, lse.cast(F32)], res)
        },
        move |res: &Vec<Tensor>, cot: Vec<Tensor>| {
            let m = res.len();
            let bias = if with_bias { Some(res[3]) } else { None };
            let x = extras_from(bias, present, &res[n..m - 2]);
            let ctx = Ctx::new(res[0], res[1], res[2], &x, &bwd_opts, d);
            let g = backward(&ctx, &*layout, res[m - 2], res[m - 1], cot[0], cot[1]);
            let mut grads = vec![g.dq, g.dk, g.dv];
            if let (Some(db), Some(b)) = (g.dbias, bias) {
                let shape: Vec<isize> = b.shape().iter().map(|&x| x as isize).collect();
                grads.push(db.reshape(&shape).cast(b.dtype()));
            }
            grads
        },
    );
    (out[0], out[1])
}

/// The flash attention backward pass alone, inside a kernel: the
/// cotangents `(dq, dk, dv)` given the forward's output `out` and logsumexp
/// `lse` (as [`flash_attention_with`](super::flash_attention_with) returns
/// them) and their cotangents `dout` and `dlse` (zeros when only the output
/// is used). The probabilities are recomputed from `lse`, which is f32: for
/// f64 inputs the gradients are good to f32 precision (differentiate the
/// forward with `vjp` for full f64 precision). Argument errors as for the
/// forward.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn flash_attention_backward_with(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    dlse: Tensor,
    options: FlashOptions,
) -> (Tensor, Tensor, Tensor) {
    let options = &options;
    let x = AttentionExtras::default();
    let op = "flash_attention_backward";
    let Some(d) = check_static(op, q, k, v, &x, options, QueryBlocks::Looped) else {
        let p = poisoned(q).0;
        return (p, p, p);
    };
    let ctx = Ctx::new(q, k, v, &x, options, d);
    let g = backward(
        &ctx,
        &BandLayout::new(options, &d, false),
        out,
        lse,
        dout,
        dlse,
    );
    (g.dq, g.dk, g.dv)
}

/// The cotangents of one attention call's differentiable inputs.
pub(crate) struct Grads {
    pub(crate) dq: Tensor,
    pub(crate) dk: Tensor,
    pub(crate) dv: Tensor,
    /// `[b, Hkv or 1, G or 1, Sq, Skv]` in the bias' dtype, when there is one.
    pub(crate) dbias: Option<Tensor>,
}

/// `acc` with `blk` added to its tile at `reads` (see [`tile`]; the tile
/// must lie inside `acc`).
fn add_tile(acc: Tensor, reads: &[(usize, Pos, usize)], blk: Tensor) -> Tensor {
    let cur = tile(acc, reads, 0.0);
    let zero = Tensor::scalar(0.0, S32);
    let mut starts = vec![zero; acc.rank()];
    for &(axis, pos, _) in reads {
        starts[axis] = pos.tensor();
    }
    acc.dynamic_update_slice(cur + blk, &starts)
}

/// A batched matmul over `[B, Hkv, ..]` contracting `lhs` axis `lc` with
/// `rhs` axis `rc`, operands in the inputs' dtype, accumulated in the
/// statistics' dtype.
fn mm(d: &Dims, a: Tensor, b: Tensor, lc: usize, rc: usize) -> Tensor {
    let dims = DotDims {
        lhs_batch: vec![0, 1],
        rhs_batch: vec![0, 1],
        lhs_contract: vec![lc],
        rhs_contract: vec![rc],
    };
    a.cast(d.io)
        .dot_general(b.cast(d.io), dims, None, Some(d.stat))
}

/// The forward's results and their cotangents in the backward's layout,
/// and the bias' shape.
struct Saved {
    /// `[B, Hkv, G, Sq, Dv]`.
    o5: Tensor,
    do5: Tensor,
    /// `[B, Hkv, G, Sq, 1]`.
    lse5: Tensor,
    dlse5: Tensor,
    bias_shape: Option<Vec<usize>>,
}

/// How a query block's key blocks are walked: unrolled ([`walk_row`]) or
/// from a [`RowPlan`] inside the traced loop.
type Walk<'a> = dyn Fn(Vec<Tensor>, &StepFn<'_, Vec<Tensor>>) -> Vec<Tensor> + 'a;

/// One query block's part of the backward: its dq `[B, Hkv, G·r, D]` (in
/// the inputs' dtype, scaled) and the accumulators `st` (dk, dv and the
/// bias' cotangent) after its key blocks.
fn block_grads(
    ctx: &Ctx<'_>,
    saved: &Saved,
    row: &Row,
    st: Vec<Tensor>,
    walk: &Walk<'_>,
) -> (Tensor, Vec<Tensor>) {
    let d = ctx.d;
    let (b, hk, g) = (d.b as isize, d.hkv as isize, d.g as isize);
    let r = row.r;
    let rows = |t: Tensor, last: usize| {
        tile(t, &[(3, row.q0, r)], 0.0).reshape(&[b, hk, (d.g * r) as isize, last as isize])
    };
    let do_i = rows(saved.do5, d.dv);
    let delta = (do_i * rows(saved.o5, d.dv).cast(d.stat)).sum_keepdims(&[-1]);
    let lse_i = rows(saved.lse5, 1);
    // A row that saw no key has lse = -inf and P = 0 everywhere.
    let lse_i = lse_i.eq(f64::NEG_INFINITY).select(0.0, lse_i);
    let shift = rows(saved.dlse5, 1) - delta;
    let mut state = vec![Tensor::zeros([d.b, d.hkv, d.g * r, d.d], d.stat)];
    state.extend(st);
    let step = |st: Vec<Tensor>, k0: Pos, c: usize, mask: Option<Tensor>| {
        let sc = ctx.scores(row, k0, c);
        let s = ctx.bias_and_mask(sc, row, k0, c, elem(mask));
        let p = (s - lse_i).exp();
        let vb = tile(ctx.v, &[(2, k0, c)], 0.0);
        let mut dp = mm(&d, do_i, vb, 3, 3);
        let mut pd = p;
        if let Some(seed) = ctx.seed {
            let rate = ctx.o.dropout_rate;
            let keep = ctx.flat(dropout_keep(seed, &d, row.q0, k0, row.r, c, rate));
            let f = 1.0 / (1.0 - rate);
            pd = keep.select(p * f, 0.0);
            dp = keep.select(dp * f, 0.0);
        }
        let keys = [(2, k0, c)];
        let dv = add_tile(st[2], &keys, mm(&d, pd, do_i, 2, 2));
        let mut ds = p * (dp + shift);
        let mut next = Vec::with_capacity(st.len());
        let dbias = saved.bias_shape.as_ref().map(|bs| {
            let blk = ds.reshape(&[b, hk, g, r as isize, c as isize]);
            let axes: Vec<isize> = (0..3).filter(|&a| bs[a] == 1).map(|a| a as isize).collect();
            let blk = if axes.is_empty() {
                blk
            } else {
                blk.sum_keepdims(&axes)
            };
            add_tile(st[3], &[(3, row.q0, r), (4, k0, c)], blk)
        });
        if let Some(cap) = ctx.o.soft_cap {
            let t = sc * (1.0 / cap);
            ds = ds * (1.0 - t * t);
        }
        let kb = tile(ctx.k, &keys, 0.0);
        next.push(st[0] + mm(&d, ds, kb, 3, 2));
        next.push(add_tile(st[1], &keys, mm(&d, ds, row.qb, 2, 2)));
        next.push(dv);
        next.extend(dbias);
        next
    };
    let mut it = walk(state, &step).into_iter();
    // Scaled per block, so that the blocks concatenate into the result.
    let dq_i = it.next().unwrap_or(row.qb) * ctx.scale;
    (dq_i.cast(d.io), it.collect())
}

/// The backward pass: the cotangents of `q`, `k`, `v` (and the bias) given
/// the forward's output `o` and logsumexp `lse` and their cotangents.
pub(crate) fn backward(
    ctx: &Ctx<'_>,
    layout: &dyn Layout,
    o: Tensor,
    lse: Tensor,
    dout: Tensor,
    dlse: Tensor,
) -> Grads {
    let d = ctx.d;
    let (b, hk, g) = (d.b as isize, d.hkv as isize, d.g as isize);
    let five = |t: Tensor, last: usize| t.reshape(&[b, hk, g, d.sq as isize, last as isize]);
    let (o5, do5) = (five(o, d.dv), five(dout.cast(d.stat), d.dv));
    let lse5 = five(lse.cast(d.stat), 1);
    let dlse5 = five(dlse.cast(d.stat), 1);
    let bq = ctx.o.block_q;
    let nq = d.sq.div_ceil(bq);
    let mut st: Vec<Tensor> = vec![
        Tensor::zeros([d.b, d.hkv, d.skv, d.d], d.stat),
        Tensor::zeros([d.b, d.hkv, d.skv, d.dv], d.stat),
    ];
    let bias_shape = ctx.bias5.map(|t| t.shape());
    if let Some(s) = &bias_shape {
        st.push(Tensor::zeros(s.clone(), d.stat));
    }
    let saved = Saved {
        o5,
        do5,
        lse5,
        dlse5,
        bias_shape,
    };
    let mut dqs: Vec<Tensor> = Vec::new();
    // The whole query blocks of a band as one traced loop (see `query_loop`),
    // dq written into its rows; the rest unrolled.
    let mut unrolled_from = 0;
    if let Some(plan) = RowPlan::new(ctx, layout) {
        let zero = Tensor::scalar(0.0, S32);
        let mut carry = vec![Tensor::zeros([d.b, d.hkv, d.g, plan.nq * bq, d.d], d.io)];
        carry.extend(st);
        let done = fori_loop(0, plan.nq as i32, carry, |i, carry| {
            let start = i * bq as i32;
            let q0 = Pos::Traced {
                start,
                in_range: true,
            };
            let row = ctx.row(q0, bq);
            let (dq_acc, rest) = (carry[0], carry[1..].to_vec());
            let (dq_i, mut rest) = block_grads(ctx, &saved, &row, rest, &|state, step| {
                plan.walk(ctx, i, q0, state, step)
            });
            let dq_i = dq_i.reshape(&[b, hk, g, bq as isize, d.d as isize]);
            let mut next =
                vec![dq_acc.dynamic_update_slice(dq_i, &[zero, zero, zero, start, zero])];
            next.append(&mut rest);
            next
        });
        let mut it = done.into_iter();
        if let Some(dq) = it.next() {
            dqs.push(dq.reshape(&[b, hk, (d.g * plan.nq * bq) as isize, d.d as isize]));
        }
        st = it.collect();
        unrolled_from = plan.nq;
    }
    for i in unrolled_from..nq {
        let q0 = i * bq;
        let r = bq.min(d.sq - q0);
        let row = match dqs.last() {
            Some(&prev) => ctx.row_after(q0, r, prev),
            None => ctx.row(Pos::Static(q0), r),
        };
        let (dq_i, rest) = block_grads(ctx, &saved, &row, st, &|state, step| {
            walk_row(ctx, layout, i, state, &|st: &Vec<Tensor>| st[0], step)
        });
        dqs.push(dq_i);
        st = rest;
    }
    let dq = if dqs.is_empty() {
        Tensor::zeros([d.b, d.hq, 0, d.d], d.io)
    } else {
        let parts: Vec<Tensor> = dqs
            .iter()
            .map(|t| t.reshape(&[b, hk, g, (t.dim(2) / d.g) as isize, d.d as isize]))
            .collect();
        let all = if parts.len() == 1 {
            parts[0]
        } else {
            concat(&parts, 3)
        };
        all.reshape(&[b, d.hq as isize, d.sq as isize, d.d as isize])
    };
    let io = d.io;
    let mut it = st.into_iter();
    let (dk, dv) = match (it.next(), it.next()) {
        (Some(dk), Some(dv)) => (dk.cast(io), dv.cast(io)),
        _ => (ctx.k, ctx.v),
    };
    Grads {
        dq,
        dk,
        dv,
        dbias: it.next(),
    }
}
