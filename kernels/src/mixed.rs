//! Mixed-precision training: f32 master weights with low-precision compute,
//! and dynamic loss scaling for f16.
//!
//! Master weights: keep the parameters in f32 and cast them to bf16/f16
//! inside the loss function; autodiff's rule for the cast brings the
//! gradients back in f32, and the optimizer updates the f32 copy.
//!
//! Loss scaling: f16 gradients of small losses underflow (the smallest f16
//! is 6·10⁻⁸). [`scaled_value_and_grad`] multiplies the loss by the current
//! scale before differentiating (so the f16 gradients are large enough),
//! unscales them in f32, and reports whether all are finite. The scale is
//! state carried between steps, as in the usual dynamic scheme: after
//! `growth_interval` finite steps in a row it grows by `factor`; a step with
//! an overflow (an `inf` or `NaN` gradient) is to be skipped
//! ([`apply_if_finite`]) and shrinks the scale by `factor`.
//!
//! ```
//! # extern crate tessel_dsl as tessel;
//! use tessel::prelude::*;
//! use tessel_kernels::mixed::{apply_if_finite, scaled_value_and_grad, DynamicLossScale};
//!
//! // One SGD step on f16 weights with a scaled loss.
//! #[cpu_kernel]
//! fn step(w: Tensor, x: Tensor, scale: Tensor, good: Tensor) -> (Tensor, Tensor, Tensor) {
//!     let cfg = DynamicLossScale::default();
//!     let s = scaled_value_and_grad(|p: Vec<Tensor>| (p[0] * x).sum(&[0]) * 1e-4, vec![w], scale, good, &cfg);
//!     let updated = (w.cast(F32) - s.grads[0] * 0.1).cast(F16);
//!     let w = apply_if_finite(s.finite, &[updated], &[w])[0];
//!     (w, s.scale, s.good_steps)
//! }
//! let dev = Device::cpu()?;
//! let w = HostTensor::from_fn(TensorSpec::new([4], F16), |_| 1.0);
//! let x = HostTensor::from_fn(TensorSpec::new([4], F16), |_| 1e-4);
//! let (w2, scale, _) = step::run(&dev, &w, &x, &HostTensor::scalar(32768.0f32), &HostTensor::scalar(0i32))?;
//! assert_eq!(scale.to_vec::<f32>()?, vec![32768.0]);
//! # Ok::<(), tessel::Error>(())
//! ```

use tessel::autodiff::value_and_grad;
use tessel::prelude::*;

/// The dynamic loss scale's policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DynamicLossScale {
    /// Finite steps in a row after which the scale grows (default 2000).
    pub growth_interval: u32,
    /// The growth and backoff factor (default 2).
    pub factor: f64,
    /// The smallest scale (default 1).
    pub min_scale: f64,
    /// The largest scale (default 2²⁴).
    pub max_scale: f64,
}

impl Default for DynamicLossScale {
    fn default() -> Self {
        DynamicLossScale {
            growth_interval: 2000,
            factor: 2.0,
            min_scale: 1.0,
            max_scale: 16_777_216.0,
        }
    }
}

/// What one scaled step computes.
#[derive(Clone, Debug)]
pub struct ScaledGrads {
    /// The loss, unscaled (f32).
    pub loss: Tensor,
    /// The gradients, unscaled, in f32, one per primal.
    pub grads: Vec<Tensor>,
    /// Whether every gradient is finite (a `pred` scalar); if not, skip the
    /// update.
    pub finite: Tensor,
    /// The next step's scale (f32 scalar).
    pub scale: Tensor,
    /// The next step's count of finite steps in a row (s32 scalar).
    pub good_steps: Tensor,
}

/// Whether every element of every tensor is finite: a `pred` scalar.
pub fn all_finite(ts: &[Tensor]) -> Tensor {
    let mut ok = Tensor::scalar(1.0, PRED);
    for t in ts {
        let axes: Vec<isize> = (0..t.rank() as isize).collect();
        ok = ok & t.is_finite().all(&axes);
    }
    ok
}

/// The value and gradients of `f` at `primals` with the loss multiplied by
/// `scale` (an f32 scalar) before differentiating, the gradients divided
/// by it afterwards (in f32), and the next `(scale, good_steps)` by
/// `policy`. `good_steps` is the s32 count of finite steps in a row.
#[track_caller]
pub fn scaled_value_and_grad(
    f: impl FnOnce(Vec<Tensor>) -> Tensor,
    primals: Vec<Tensor>,
    scale: Tensor,
    good_steps: Tensor,
    policy: &DynamicLossScale,
) -> ScaledGrads {
    let scale = scale.cast(F32);
    let (scaled, grads) = value_and_grad(
        |p: Vec<Tensor>| {
            let l = f(p);
            l * scale.cast(l.dtype())
        },
        primals,
    );
    let grads: Vec<Tensor> = grads.iter().map(|g| g.cast(F32) / scale).collect();
    let finite = all_finite(&grads);
    let good = good_steps.cast(S32);
    let next_good = good + 1;
    let grow = next_good.ge(policy.growth_interval as i32);
    let grown = (scale * policy.factor).minimum(policy.max_scale as f32);
    let shrunk = (scale * (1.0 / policy.factor)).maximum(policy.min_scale as f32);
    let next_scale = finite.select(grow.select(grown, scale), shrunk);
    let zero = Tensor::scalar(0.0, S32);
    let next_good = finite.select(grow.select(zero, next_good), zero);
    ScaledGrads {
        loss: scaled.cast(F32) / scale,
        grads,
        finite,
        scale: next_scale,
        good_steps: next_good,
    }
}

/// `new` where `finite` holds, else `old` (tensor by tensor): the update of
/// a step whose gradients overflowed is skipped.
pub fn apply_if_finite(finite: Tensor, new: &[Tensor], old: &[Tensor]) -> Vec<Tensor> {
    new.iter()
        .zip(old)
        .map(|(&n, &o)| finite.select(n, o))
        .collect()
}
