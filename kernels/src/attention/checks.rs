//! The argument checks of the attention kernels: the extents of a call
//! ([`Dims`]), the shapes, dtypes and options it must have, and the limits
//! on the blocks a static-layout kernel traces.

use tessel::prelude::*;
use tessel::report;

use super::optional_inputs::AttentionExtras;
use super::options::FlashOptions;

/// The extents of one call, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub(crate) b: usize,
    pub(crate) hq: usize,
    pub(crate) hkv: usize,
    pub(crate) g: usize,
    pub(crate) sq: usize,
    pub(crate) skv: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
    /// The inputs' dtype (and the output's).
    pub(crate) io: DType,
    /// The dtype of logits and statistics: f32, or f64 for f64 inputs.
    pub(crate) stat: DType,
}

fn shape_str(s: &[usize]) -> String {
    format!("{s:?}")
}

/// Checks the arguments of an attention call; records a kernel error under
/// `op` and returns `None` if they are wrong.
#[track_caller]
pub(crate) fn check(
    op: &str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    x: &AttentionExtras,
    o: &FlashOptions,
) -> Option<Dims> {
    // A function, not a closure: `#[track_caller]` carries the caller's
    // line only through functions.
    #[track_caller]
    fn fail_qkv(op: &str, qkv: [Tensor; 3], m: String) -> Option<Dims> {
        report::fail(op, &qkv, m);
        None
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return fail_qkv(
            op,
            [q, k, v],
            format!(
                "q, k and v must be rank-4 [batch, heads, seq, head_dim], got shapes {}, {} and {}",
                shape_str(&qs),
                shape_str(&ks),
                shape_str(&vs)
            ),
        );
    }
    let io = q.dtype();
    if !io.is_float() || k.dtype() != io || v.dtype() != io {
        return fail_qkv(
            op,
            [q, k, v],
            format!(
                "q, k and v must have one float dtype, got {}, {} and {}",
                io,
                k.dtype(),
                v.dtype()
            ),
        );
    }
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, skv) = (ks[1], ks[2]);
    if ks[0] != b || vs[0] != b {
        return fail_qkv(
            op,
            [q, k, v],
            format!("batch sizes differ: q has {b}, k {}, v {}", ks[0], vs[0]),
        );
    }
    if ks[3] != d {
        return fail_qkv(
            op,
            [q, k, v],
            format!("the head dimension of q ({d}) and k ({}) must match", ks[3]),
        );
    }
    if vs[1] != hkv || vs[2] != skv {
        return fail_qkv(
            op,
            [q, k, v],
            format!(
                "k and v must have the same heads and length, got {} and {}",
                shape_str(&ks),
                shape_str(&vs)
            ),
        );
    }
    if hkv == 0 || hq == 0 || hq % hkv != 0 {
        return fail_qkv(
            op,
            [q, k, v],
            format!(
                "the query heads ({hq}) must be a multiple of the key/value heads ({hkv}) \
             (grouped-query attention), and neither may be 0"
            ),
        );
    }
    let tile = |b: usize| b > 0 && b.is_multiple_of(8);
    if !tile(o.block_q) || !tile(o.block_kv) {
        return fail_qkv(
            op,
            [q, k, v],
            format!(
                "block sizes must be positive multiples of 8 (the sublane tile), got {} x {}",
                o.block_q, o.block_kv
            ),
        );
    }
    if !(0.0..1.0).contains(&o.dropout_rate) {
        return fail_qkv(
            op,
            [q, k, v],
            format!("the dropout rate must be in [0, 1), got {}", o.dropout_rate),
        );
    }
    if let Some(cap) = o.soft_cap {
        if !(cap.is_finite() && cap > 0.0) {
            return fail_qkv(
                op,
                [q, k, v],
                format!("the soft-cap must be positive, got {cap}"),
            );
        }
    }
    if let Some(s) = o.sm_scale {
        if !s.is_finite() {
            return fail_qkv(
                op,
                [q, k, v],
                format!("the logit scale must be finite, got {s}"),
            );
        }
    }
    let dims = Dims {
        b,
        hq,
        hkv,
        g: hq / hkv,
        sq,
        skv,
        d,
        dv: vs[3],
        io,
        stat: if io == F64 { F64 } else { F32 },
    };
    let per_score = |name: &str, t: Tensor, pred: bool| -> Result<(), String> {
        let s = t.shape();
        let dt_ok = if pred {
            t.dtype() == PRED
        } else {
            t.dtype().is_float()
        };
        if !dt_ok {
            return Err(format!(
                "the {name} must be {}, got {}",
                if pred { "pred" } else { "a float tensor" },
                t.dtype()
            ));
        }
        let ok = s.len() == 4
            && (s[0] == b || s[0] == 1)
            && (s[1] == hq || s[1] == 1)
            && s[2] == sq
            && s[3] == skv;
        if !ok {
            return Err(format!(
                "the {name} must have shape [{b} or 1, {hq} or 1, {sq}, {skv}], got {}",
                shape_str(&s)
            ));
        }
        Ok(())
    };
    if let Some(t) = x.bias {
        if let Err(m) = per_score("bias", t, false) {
            report::fail(op, &[q, k, t], m);
            return None;
        }
    }
    if let Some(t) = x.mask {
        if let Err(m) = per_score("mask", t, true) {
            report::fail(op, &[q, k, t], m);
            return None;
        }
    }
    if let Some((qs_, ks_)) = x.segment_ids {
        let (a, c) = (qs_.shape(), ks_.shape());
        if !qs_.dtype().is_integer() || ks_.dtype() != qs_.dtype() || a != [b, sq] || c != [b, skv]
        {
            report::fail(
                op,
                &[q, k, qs_, ks_],
                format!(
                    "segment ids must be integers of shapes [{b}, {sq}] and [{b}, {skv}] (one dtype), \
                     got {} and {}",
                    qs_.spec(),
                    ks_.spec()
                ),
            );
            return None;
        }
    }
    match x.dropout_seed {
        Some(seed) if seed.rank() != 0 || !seed.dtype().is_integer() => {
            report::fail(
                op,
                &[seed],
                format!(
                    "the dropout seed must be an integer scalar, got {}",
                    seed.spec()
                ),
            );
            return None;
        }
        None if o.dropout_rate > 0.0 => {
            return fail_qkv(
                op,
                [q, k, v],
                format!(
                    "dropout (rate {}) needs a seed: pass one with AttentionInputs::dropout_seed \
                 (or AttentionExtras::dropout_seed inside a kernel)",
                    o.dropout_rate
                ),
            );
        }
        _ => {}
    }
    if let Some(off) = x.q_offset {
        let s = off.shape();
        if !off.dtype().is_integer() || !(s.is_empty() || s == [b]) {
            report::fail(
                op,
                &[q, off],
                format!(
                    "q_offset must be an integer scalar or [{b}], got {}",
                    off.spec()
                ),
            );
            return None;
        }
    }
    Some(dims)
}

/// The most query blocks the static-layout kernels unroll (their program
/// grows with the count: at 4096 it is already large).
pub(crate) const MAX_QUERY_BLOCKS: usize = 4096;
/// The most key blocks they walk per query block.
pub(crate) const MAX_KEY_BLOCKS: usize = 1 << 20;
/// The most (query block, key block) pairs of an unrolled static layout:
/// its tables are constants of the program, about 24 bytes of StableHLO a
/// visited pair, so lowering time and memory grow with the count (2^23
/// pairs: about 200 MB of text and 3 s at most; the 2^28 blocks a layout
/// may classify would take minutes and gigabytes).
pub(crate) const MAX_UNROLLED_PAIRS: usize = 1 << 23;
/// The most (query block, key block) pairs a looped band's plan visits
/// while tracing (see `query_loop.rs`): its table is built from every pair's
/// cover, so tracing time, not the program, grows with the count.
pub(crate) const MAX_PLAN_PAIRS: usize = 1 << 28;

/// How a static-layout kernel runs its whole query blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueryBlocks {
    /// One traced copy per block: at most [`MAX_QUERY_BLOCKS`].
    Unrolled,
    /// One traced loop (a band at a static offset, `query_loop.rs`): the plan's
    /// pairs are bounded by [`MAX_PLAN_PAIRS`] instead.
    Looped,
}

/// [`check`] for a static-layout kernel, which also bounds its block counts
/// (unrolled query blocks, or the pairs a looped plan visits while
/// tracing); records a kernel error under `op` and returns `None` if either
/// check fails.
#[track_caller]
pub(crate) fn check_static(
    op: &str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    x: &AttentionExtras,
    o: &FlashOptions,
    rows: QueryBlocks,
) -> Option<Dims> {
    let d = check(op, q, k, v, x, o)?;
    let nq = d.sq.div_ceil(o.block_q);
    let nk = d.skv.div_ceil(o.block_kv);
    let limit = match rows {
        QueryBlocks::Unrolled if nq > MAX_QUERY_BLOCKS => Some(format!(
            "the query blocks are unrolled while tracing, at most {MAX_QUERY_BLOCKS} of them (and \
             {MAX_KEY_BLOCKS} key blocks); raise block_q/block_kv, or use block_sparse_attention_dynamic (one \
             loop over query blocks)"
        )),
        QueryBlocks::Unrolled if nq.saturating_mul(nk) > MAX_UNROLLED_PAIRS => Some(format!(
            "the layout's tables are constants of the program, one entry per (query block, key block) pair, \
             at most {MAX_UNROLLED_PAIRS} pairs ({} here); raise block_q/block_kv, or use \
             block_sparse_attention_dynamic (its tables are inputs)",
            nq.saturating_mul(nk)
        )),
        QueryBlocks::Looped if nq.saturating_mul(nk) > MAX_PLAN_PAIRS => Some(format!(
            "the query blocks run in one loop whose plan visits every (query block, key block) pair while \
             tracing, at most {MAX_PLAN_PAIRS} pairs ({} here); raise block_q/block_kv",
            nq.saturating_mul(nk)
        )),
        _ if nk > MAX_KEY_BLOCKS => Some(format!(
            "at most {MAX_KEY_BLOCKS} key blocks are walked per query block; raise block_kv"
        )),
        _ => None,
    };
    let Some(limit) = limit else {
        return Some(d);
    };
    report::fail(
        op,
        &[q, k, v],
        format!(
            "Sq = {} and Skv = {} make {nq} query blocks of {} and {nk} key blocks of {}: {limit}",
            d.sq, d.skv, o.block_q, o.block_kv
        ),
    );
    None
}

/// Placeholder results after a recorded error (the trace fails anyway).
pub(crate) fn poisoned(q: Tensor) -> (Tensor, Tensor) {
    (q, Tensor::zeros([1], F32))
}
