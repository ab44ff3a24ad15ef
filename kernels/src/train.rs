//! Training pieces: the softmax cross-entropy loss with its fused gradient,
//! the AdamW update and global-norm gradient clipping.
//!
//! All three are plain traced functions (call them inside a training-step
//! kernel, next to [`tessel::autodiff::value_and_grad`]) and kernels of
//! their own for standalone use:
//!
//! | function | kernel | computes |
//! |---|---|---|
//! | [`cross_entropy`] | [`softmax_cross_entropy`](fn@softmax_cross_entropy) | mean over rows of `logsumexp(logits) - logits[label]`; its gradient is `(softmax(logits) - onehot(label)) / rows`, computed in one pass from the saved logsumexp |
//! | [`adamw`] | [`adamw_update`](fn@adamw_update) | one AdamW step (decoupled weight decay, bias-corrected moments); the kernel donates the parameter and both moments, so XLA updates them in place |
//! | [`clip_by_global_norm`] | — | scales every gradient by `min(1, max_norm / ‖g‖₂)` over all of them |
//!
//! Numerics: the loss and its gradient run in f32 for bf16/f16/fp8 logits
//! (f64 stays f64); AdamW's moments and update run in the moments' dtype
//! (keep them f32 for bf16 parameters: f32 master weights).

use tessel::autodiff::custom_vjp;
use tessel::prelude::*;
use tessel::tensor::trace_error;

use crate::norm::compute_dtype;

/// Mean softmax cross-entropy of `logits` `[.., V]` against integer
/// `labels` `[..]` (the same leading axes: `[N, V]` and `[N]`, or a
/// batch of sequences `[B, S, V]` and `[B, S]`; `N` below is the number of
/// rows), as a traced function with a fused backward: the
/// gradient with respect to `logits` is `(softmax(logits) − onehot) · g / N`,
/// computed from the saved logsumexp (no second softmax pass over saved
/// probabilities). Labels outside `[0, V)` contribute nothing (their row
/// has zero loss and zero gradient; the mean still divides by `N`) — mask
/// padding with a label of `-1`.
/// The result is an f32 scalar (f64 for f64 logits).
#[track_caller]
pub fn cross_entropy(logits: Tensor, labels: Tensor) -> Tensor {
    let op = "cross_entropy";
    let (ls, ys) = (logits.spec(), labels.spec());
    let Some(cd) = compute_dtype(ls.dtype) else {
        return trace_error(
            op,
            &[logits, labels],
            format!("needs float logits, got {ls}"),
        );
    };
    let r = ls.rank();
    if r == 0 || ys.shape[..] != ls.shape[..r - 1] || !ys.dtype.is_integer() {
        return trace_error(
            op,
            &[logits, labels],
            format!("needs logits [.., V] and integer labels [..] with the same leading axes, got {ls} and {ys}"),
        );
    }
    let v = ls.shape[r - 1];
    let n = ys.num_elements();
    let (logits, labels) = if r == 2 {
        (logits, labels)
    } else {
        (
            logits.reshape(&[n as isize, v as isize]),
            labels.reshape(&[n as isize]),
        )
    };
    let rows = n.max(1) as f64;
    custom_vjp(
        logits,
        move |logits: Tensor| {
            let x = logits.cast(cd);
            let lse = x.logsumexp(-1);
            let hit = onehot(labels, n, v);
            let picked = (x * hit.cast(cd)).sum(&[1]);
            let valid = hit.any(&[1]).cast(cd);
            let loss = ((lse - picked) * valid).sum(&[0]) / rows;
            (loss, (x, lse, hit, valid))
        },
        move |&(x, lse, hit, valid): &(Tensor, Tensor, Tensor, Tensor), g: Tensor| {
            let p = (x - lse.expand_dims(1)).exp();
            let d = (p - hit.cast(cd)) * valid.expand_dims(1) * (g / rows);
            d.cast(logits.dtype())
        },
    )
}

/// `[N, V]` pred: row `i` is true at `labels[i]` (nowhere for a label out of range).
fn onehot(labels: Tensor, n: usize, v: usize) -> Tensor {
    let cols = Tensor::iota([n, v], 1, labels.dtype());
    cols.eq(labels.expand_dims(1).broadcast_to([n, v]))
}

/// [`cross_entropy`] as a kernel: the mean loss of `logits` `[N, V]`
/// against `labels` `[N]`.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::train::softmax_cross_entropy;
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let logits = HostTensor::from_vec(vec![0.0f32; 2 * 4], [2, 4])?;
/// let labels = HostTensor::from_vec(vec![1i32, 3], [2])?;
/// let loss = softmax_cross_entropy::run(&dev, &logits, &labels)?;
/// assert!((loss.to_vec::<f32>()?[0] - 4f32.ln()).abs() < 1e-6);
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn softmax_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor {
    cross_entropy(logits, labels)
}

/// AdamW's hyperparameters (a static argument: each distinct value is its
/// own program; pass a changing learning rate as the `lr` tensor instead).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Added to the root of the second moment (default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay, applied as `p -= lr * wd * p` (default 0.01).
    pub weight_decay: f64,
}

impl Default for AdamW {
    fn default() -> Self {
        AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl std::hash::Hash for AdamW {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for f in [self.beta1, self.beta2, self.eps, self.weight_decay] {
            f.to_bits().hash(state);
        }
    }
}

impl StaticArg for AdamW {
    fn write_key(&self, key: &mut StaticKey) {
        for f in [self.beta1, self.beta2, self.eps, self.weight_decay] {
            f.write_key(key);
        }
    }
}

/// One AdamW step for one parameter: returns `(param', m', v')`.
///
/// `step` is the 1-based step number (an integer or float scalar tensor,
/// for the bias corrections) and `lr` the learning rate (a float scalar
/// tensor, so a schedule does not recompile). The moments' dtype is the
/// compute dtype; the new parameter is cast back to the parameter's dtype.
#[track_caller]
pub fn adamw(
    param: Tensor,
    grad: Tensor,
    m: Tensor,
    v: Tensor,
    step: Tensor,
    lr: Tensor,
    hp: AdamW,
) -> (Tensor, Tensor, Tensor) {
    let op = "adamw";
    let (ps, gs, ms, vs) = (param.spec(), grad.spec(), m.spec(), v.spec());
    if ps.shape != gs.shape || ps.shape != ms.shape || ps.shape != vs.shape {
        let t = trace_error(
            op,
            &[param, grad, m, v],
            "param, grad and both moments must have one shape",
        );
        return (t, t, t);
    }
    if !ms.dtype.is_float() || ms.dtype != vs.dtype || !ps.dtype.is_float() {
        let t = trace_error(
            op,
            &[param, m, v],
            "param and moments must be float, the moments of one dtype",
        );
        return (t, t, t);
    }
    if !(0.0..1.0).contains(&hp.beta1)
        || !(0.0..1.0).contains(&hp.beta2)
        || hp.eps.is_nan()
        || hp.eps <= 0.0
    {
        let t = trace_error(
            op,
            &[param],
            format!("betas must be in [0, 1) and eps > 0, got {hp:?}"),
        );
        return (t, t, t);
    }
    let cd = ms.dtype;
    let g = grad.cast(cd);
    let p = param.cast(cd);
    let t = step.cast(cd);
    let lr = lr.cast(cd);
    let m2 = m * hp.beta1 + g * (1.0 - hp.beta1);
    let v2 = v * hp.beta2 + g.square() * (1.0 - hp.beta2);
    let bc1 = 1.0 - Tensor::scalar(hp.beta1, cd).pow(t);
    let bc2 = 1.0 - Tensor::scalar(hp.beta2, cd).pow(t);
    let update = (m2 / bc1) / ((v2 / bc2).sqrt() + hp.eps) + p * hp.weight_decay;
    let p2 = p - update * lr;
    (p2.cast(ps.dtype), m2, v2)
}

/// [`adamw`] as a kernel that updates the parameter and its moments in
/// place (all three are donated: their buffers become the results).
#[tpu_kernel(precision = "highest", donate(param, m, v))]
#[track_caller]
pub fn adamw_update(
    param: Tensor,
    grad: Tensor,
    m: Tensor,
    v: Tensor,
    step: Tensor,
    lr: Tensor,
    hp: AdamW,
) -> (Tensor, Tensor, Tensor) {
    adamw(param, grad, m, v, step, lr, hp)
}

/// Scales `grads` by `min(1, max_norm / norm)` where `norm` is the L2 norm
/// of all of them together (computed in f32, or f64 for f64 gradients);
/// returns the clipped gradients and the norm before clipping.
#[track_caller]
pub fn clip_by_global_norm(grads: &[Tensor], max_norm: f64) -> (Vec<Tensor>, Tensor) {
    let cd = if grads.iter().any(|g| g.dtype() == F64) {
        F64
    } else {
        F32
    };
    let mut total = Tensor::scalar(0.0, cd);
    for g in grads {
        let axes: Vec<isize> = (0..g.rank() as isize).collect();
        total = total + g.cast(cd).square().sum(&axes);
    }
    let norm = total.sqrt();
    let scale = (Tensor::scalar(max_norm, cd) / norm.maximum(1e-30)).minimum(1.0);
    let clipped = grads
        .iter()
        .map(|&g| (g.cast(cd) * scale).cast(g.dtype()))
        .collect();
    (clipped, norm)
}
