//! FP8 training for matrix products with delayed scaling.
//!
//! Each operand is multiplied by a scale, clamped to the format's range and
//! rounded to FP8 — `x` and `w` to e4m3 (max 448), the output's cotangent in
//! the backward pass to e5m2 (max 57344) — and the products are computed
//! from the FP8 values with f32 accumulation, then unscaled. The scales are
//! *delayed*: they come from an amax history (the absolute maxima of the
//! last `H` steps, a `[H]` f32 tensor per operand), `scale = max / (amax ·
//! 2^margin)` with `amax` the history's maximum (1 while the history is all
//! zeros), and the current step's amax is pushed into the history for the
//! next step. A step never waits for its own amax.
//!
//! [`fp8_matmul`] returns the product and the new histories of `x` and `w`.
//! The output cotangent's history follows the convention of JAX's FP8 ops:
//! pass it as an input, and its *gradient* is its new value (the backward
//! pass is where the cotangent's amax is known).

use tessel::autodiff::custom_vjp;
use tessel::prelude::*;

use crate::quantized::qmax;

/// The amax histories of one FP8 matrix product (`[H]` f32 each, newest
/// first).
#[derive(Clone, Copy, Debug)]
pub struct Fp8History {
    /// Of the left operand `x`.
    pub x: Tensor,
    /// Of the right operand `w`.
    pub w: Tensor,
    /// Of the output's cotangent (its new value is its gradient).
    pub grad: Tensor,
}

impl Fp8History {
    /// Zero histories of length `len` (the first step then uses scale 1).
    pub fn zeros(len: usize) -> Fp8History {
        let z = || Tensor::zeros([len], F32);
        Fp8History {
            x: z(),
            w: z(),
            grad: z(),
        }
    }
}

/// The delayed scale of a history: `max / (amax · 2^margin)`, 1 for an
/// all-zero history.
pub fn delayed_scale(history: Tensor, fp8_max: f64, margin: i32) -> Tensor {
    let amax = history.cast(F32).max(&[0]);
    let scale = (amax * 2f64.powi(margin)).recip() * fp8_max;
    amax.gt(0.0).select(scale, 1.0)
}

/// `history` with `amax(|x|)` pushed in front and its oldest entry dropped.
pub fn push_amax(history: Tensor, x: Tensor) -> Tensor {
    let axes: Vec<isize> = (0..x.rank() as isize).collect();
    let amax = x.cast(F32).abs().max(&axes).reshape(&[1]);
    let h = history.dim(0);
    if h <= 1 {
        return amax.reshape(&[h as isize]);
    }
    concat(&[amax, history.slice_axis(0, 0, h - 1)], 0)
}

/// `x · scale`, clamped to the largest finite value of the FP8 `dtype`
/// ([`qmax`]) and rounded to it.
pub fn to_fp8(x: Tensor, scale: Tensor, dtype: DType) -> Tensor {
    let max = qmax(dtype);
    (x.cast(F32) * scale).clamp(-max, max).cast(dtype)
}

/// `x · w` (`[.., M, K] × [K, N]`) from e4m3 operands with delayed scales,
/// in `x`'s dtype, and the new `x` and `w` histories. Differentiable in `x`,
/// `w` and `history.grad`: the backward pass rounds the output's cotangent
/// to e5m2 with the delayed scale of `history.grad`, computes `dx` and `dw`
/// from FP8 operands, and returns the new cotangent history as the gradient
/// of `history.grad`.
#[track_caller]
pub fn fp8_matmul(x: Tensor, w: Tensor, history: Fp8History, margin: i32) -> (Tensor, Fp8History) {
    let (xh, wh) = (history.x, history.w);
    let out = custom_vjp(
        vec![x, w, history.grad],
        move |p: Vec<Tensor>| {
            let (x, w) = (p[0], p[1]);
            let sx = delayed_scale(xh, qmax(F8E4M3FN), margin);
            let sw = delayed_scale(wh, qmax(F8E4M3FN), margin);
            let xq = to_fp8(x, sx, F8E4M3FN);
            let wq = to_fp8(w, sw, F8E4M3FN);
            let y = xq.cast(F32).matmul(wq.cast(F32)) / (sx * sw);
            let outs = vec![y.cast(x.dtype()), push_amax(xh, x), push_amax(wh, w)];
            let res = vec![xq, wq, sx, sw, p[2], x, w];
            (outs, res)
        },
        move |r: &Vec<Tensor>, cot: Vec<Tensor>| {
            let (xq, wq, sx, sw, gh, x, w) = (r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
            let dout = cot[0];
            let sg = delayed_scale(gh, qmax(F8E5M2), margin);
            let gq = to_fp8(dout, sg, F8E5M2).cast(F32);
            let dx = gq.matmul(wq.cast(F32).t()) / (sg * sw);
            // dw sums over every leading axis of x: flatten them into M.
            let k = xq.dim(-1);
            let n = gq.dim(-1);
            let m = (xq.shape().iter().product::<usize>() / k.max(1)) as isize;
            let x2 = xq.cast(F32).reshape(&[m, k as isize]);
            let g2 = gq.reshape(&[m, n as isize]);
            let dw = x2.t().matmul(g2) / (sx * sg);
            vec![dx.cast(x.dtype()), dw.cast(w.dtype()), push_amax(gh, dout)]
        },
    );
    let next = Fp8History {
        x: out[1],
        w: out[2],
        grad: history.grad,
    };
    (out[0], next)
}
