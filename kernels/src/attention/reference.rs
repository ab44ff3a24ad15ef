//! The plain whole-tensor attention: `softmax(Q·Kᵀ·scale + bias, masked)·V`
//! with every `Sq × Skv` intermediate materialized. The tests' reference and
//! the benchmarks' baseline.

use tessel::prelude::*;

use super::checks::{check, poisoned};
use super::optional_inputs::AttentionExtras;
use super::options::FlashOptions;
use super::tiles::{dropout_keep, Pos};

/// `[B, Hkv, S, D]` with each head repeated `g` times: `[B, Hkv·g, S, D]`.
fn repeat_heads(t: Tensor, g: usize) -> Tensor {
    if g == 1 {
        return t;
    }
    let s = t.shape();
    let (b, h, n, d) = (s[0], s[1], s[2], s[3]);
    t.reshape(&[b as isize, h as isize, 1, n as isize, d as isize])
        .broadcast_to([b, h, g, n, d])
        .reshape(&[b as isize, (h * g) as isize, n as isize, d as isize])
}

/// Attention computed on whole tensors, inside a kernel: the output
/// `[B, Hq, Sq, Dv]` (inputs' dtype) and the logsumexp `[B, Hq, Sq]` (f32)
/// of `softmax(Q·Kᵀ·scale (soft-capped) + bias, masked)·V`, with the same
/// options, optional inputs, dropout bits and conventions as
/// [`flash_attention_with`](super::flash_attention_with): keys and values
/// are repeated to the query heads, the logits are computed in f32 (f64 for
/// f64 inputs), a row with no visible key gives 0 and a logsumexp of `-inf`,
/// and NaN propagates as in `flash_attention_with` (a row whose visible
/// logits include a NaN is NaN; a NaN in `v` reaches every row whose weights
/// multiply it, including rows where its key is masked, as `0 · NaN` is NaN).
///
/// Argument errors are recorded on the trace (the kernel then fails with
/// [`Error::Kernel`]).
#[track_caller]
pub fn attention_reference_with(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    extras: &AttentionExtras,
    options: FlashOptions,
) -> (Tensor, Tensor) {
    let options = &options;
    let Some(d) = check("attention_reference", q, k, v, extras, options) else {
        return poisoned(q);
    };
    let (b, hq, sq, skv) = (d.b, d.hq, d.sq, d.skv);
    // The whole logits matrix is one tensor here: past the size limits
    // it is an error naming the arguments, not one inside a dot.
    let logits = TensorSpec::new([b, hq, sq, skv], d.stat);
    if let Err(e) = logits.check_size() {
        tessel::report::fail(
            "attention_reference",
            &[q, k],
            format!(
                "the reference holds all {sq} x {skv} logits of each head at once ({e}); use \
                 flash_attention for long sequences"
            ),
        );
        return poisoned(q);
    }
    let kk = repeat_heads(k, d.g).cast(d.stat);
    let vv = repeat_heads(v, d.g).cast(d.stat);
    let mut s = q.cast(d.stat).matmul(kk.t()) * options.scale_for(d.d);
    if let Some(cap) = options.soft_cap {
        s = (s / cap).tanh() * cap;
    }
    if let Some(bias) = extras.bias {
        s = s + bias.cast(d.stat);
    }
    let mut allowed: Option<Tensor> = None;
    let mut and = |t: Tensor| allowed = Some(allowed.map_or(t, |a| a & t));
    let (lo, hi) = options.band();
    if lo.is_some() || hi.is_some() {
        let qi = Tensor::iota([sq, 1], 0, S32);
        let ki = Tensor::iota([1, skv], 1, S32);
        let mut diff = ki - qi;
        if let Some(off) = extras.q_offset {
            let off = off.cast(S32).reshape(&[-1, 1, 1, 1]);
            diff = diff - off;
        }
        let fit = |x: i64| x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        if let Some(lo) = lo {
            and(diff.ge(fit(lo)));
        }
        if let Some(hi) = hi {
            and(diff.le(fit(hi)));
        }
    }
    if let Some((qs, ks)) = extras.segment_ids {
        let qs = qs.reshape(&[b as isize, 1, sq as isize, 1]);
        let ks = ks.reshape(&[b as isize, 1, 1, skv as isize]);
        and(qs.eq(ks));
    }
    if let Some(m) = extras.mask {
        and(m);
    }
    if let Some(a) = allowed {
        s = a.select(s, f64::NEG_INFINITY);
    }
    // NaN propagates as through a softmax: only a row maximum of `-inf` (a
    // row that sees no key) is replaced, so a NaN logit makes `m`, `l` and
    // the row NaN; `seen` is `l != 0` (true for NaN, false only for rows
    // that see no key).
    let m = s.max_keepdims(&[-1]);
    let m = m.eq(f64::NEG_INFINITY).select(0.0, m);
    let p = (s - m).exp();
    let l = p.sum_keepdims(&[-1]);
    let seen = l.ne(0.0);
    let mut probs = p / l;
    let lse = seen
        .select(m + l.log(), f64::NEG_INFINITY)
        .squeeze(-1)
        .cast(F32);
    if let (Some(seed), true) = (extras.dropout_seed, options.dropout_rate > 0.0) {
        let rate = options.dropout_rate;
        let keep = dropout_keep(seed, &d, Pos::Static(0), Pos::Static(0), sq, skv, rate)
            .reshape(&[b as isize, hq as isize, sq as isize, skv as isize]);
        probs = keep.select(probs * (1.0 / (1.0 - rate)), 0.0);
    }
    // Rows that see no key are zero after the product (their `0/0`
    // probabilities, and a NaN value their zero weights would multiply,
    // never reach the output).
    let out = seen.select(probs.matmul(vv), 0.0);
    (out.cast(d.io), lse)
}
