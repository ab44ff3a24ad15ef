//! Layer normalization and RMS normalization over the last axis.
//!
//! A kernel parameter is a traced `Tensor` or a static value, never an
//! `Option<Tensor>`, so each combination of learned parameters is its own
//! kernel; all of them share one implementation:
//!
//! | kernel | computes (over the last axis, `D` features) |
//! |---|---|
//! | [`layer_norm`](fn@layer_norm)`(x, scale, bias, eps)` | `(x - mean) / sqrt(var + eps) * scale + bias` |
//! | [`layer_norm_no_bias`](fn@layer_norm_no_bias)`(x, scale, eps)` | `(x - mean) / sqrt(var + eps) * scale` |
//! | [`layer_norm_plain`](fn@layer_norm_plain)`(x, eps)` | `(x - mean) / sqrt(var + eps)` |
//! | [`rms_norm`](fn@rms_norm)`(x, scale, eps)` | `x / sqrt(mean(x²) + eps) * scale` |
//! | [`rms_norm_plain`](fn@rms_norm_plain)`(x, eps)` | `x / sqrt(mean(x²) + eps)` |
//!
//! `scale` and `bias` have shape `[D]` (any float dtype; they are cast to
//! the compute dtype). `var` is the biased (population) variance, as in
//! PyTorch, JAX and Flax.
//!
//! Numerics: statistics and the normalization run in f32 for bf16, f16 and
//! fp8 inputs (cast up, compute, one cast back to the input dtype at the
//! end), in the input's own dtype for f32 and f64. The variance is the mean
//! of the *centered* squares, `mean((x - mean(x))²)`, not the two-moment
//! form `E[x²] − E[x]²`, which cancels catastrophically when `|mean| ≫ std`
//! (the tests show it on rows of `1000 ± 1`). The squares need the mean
//! first, so each row is reduced twice: one reduction for the mean, one for
//! the centered squares, then an elementwise pass for the output, with
//! `x - mean` recomputed inside its consumers rather than stored by the
//! program. How often memory is touched is up to the backend's fusion. On
//! CPU, tessel compiles the reduction of the squares as a reduce over lanes
//! of 8 that XLA fuses with the squaring, then a reduce of the partial sums
//! ([`split_row_reductions`](tessel::lower::split_row_reductions)), so the
//! squares are never written out (inspected with
//! `XLA_FLAGS=--xla_dump_to=..`); XLA's GPU and TPU backends fuse
//! elementwise producers into reductions themselves (not measured in this
//! repository).
//!
//! Bad arguments are trace errors ([`Error::Kernel`]), never panics: an
//! integer input, a rank-0 input, a `scale`/`bias` that is not `[D]`, or an
//! `eps` that is negative or not finite.

use tessel::autodiff::custom_vjp;
use tessel::prelude::*;
use tessel::tensor::trace_error;

/// The dtype statistics and elementwise math run in for inputs of `dtype`:
/// f32 for the narrow floats (bf16, f16, fp8), the dtype itself for f32 and
/// f64, `None` for integers and `pred`. Shared by the library's kernels.
pub(crate) fn compute_dtype(dtype: DType) -> Option<DType> {
    match dtype {
        DType::F64 => Some(F64),
        d if d.is_float() => Some(F32),
        _ => None,
    }
}

/// The input checks every kernel here shares; `Err` carries the poisoned
/// result of a failed check.
#[track_caller]
fn check(op: &str, x: Tensor, params: &[(&str, Tensor)], eps: f64) -> Result<DType, Tensor> {
    let spec = x.spec();
    if spec.rank() == 0 {
        return Err(trace_error(
            op,
            &[x],
            "needs an input of rank 1 or more (the last axis is normalized)",
        ));
    }
    let Some(cd) = compute_dtype(spec.dtype) else {
        return Err(trace_error(
            op,
            &[x],
            format!(
                "needs a float input, got {}; cast it first (x.cast(F32))",
                spec.dtype
            ),
        ));
    };
    let d = spec.shape[spec.rank() - 1];
    for &(name, p) in params {
        let ps = p.spec();
        if ps.shape != [d] || !ps.dtype.is_float() {
            return Err(trace_error(
                op,
                &[x, p],
                format!("`{name}` must be a float vector [{d}] (the last axis of x), got {ps}"),
            ));
        }
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(trace_error(
            op,
            &[x],
            format!("eps must be finite and non-negative, got {eps}"),
        ));
    }
    Ok(cd)
}

/// Layer norm with optional scale and bias, after the checks.
#[track_caller]
fn layer_norm_impl(
    op: &str,
    x: Tensor,
    scale: Option<Tensor>,
    bias: Option<Tensor>,
    eps: f64,
) -> Tensor {
    let params: Vec<(&str, Tensor)> = [("scale", scale), ("bias", bias)]
        .into_iter()
        .filter_map(|(n, p)| p.map(|p| (n, p)))
        .collect();
    let cd = match check(op, x, &params, eps) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let n_params = params.len();
    let with_bias = bias.is_some();
    let mut primals = vec![x];
    primals.extend(params.iter().map(|&(_, p)| p));
    let out = custom_vjp(
        primals,
        move |p: Vec<Tensor>| {
            let xf = p[0].cast(cd);
            let mean = xf.mean_keepdims(&[-1]);
            let centered = xf - mean;
            let var = centered.square().mean_keepdims(&[-1]);
            let rstd = (var + eps).rsqrt();
            let mut y = centered * rstd;
            if n_params >= 1 {
                y = y * p[1].cast(cd);
            }
            if with_bias {
                y = y + p[2].cast(cd);
            }
            (vec![y.cast(p[0].dtype())], (p, mean, rstd))
        },
        move |(p, mean, rstd): &(Vec<Tensor>, Tensor, Tensor), dy: Vec<Tensor>| {
            let xhat = (p[0].cast(cd) - *mean) * *rstd;
            norm_backward(p, xhat, *rstd, dy[0], cd, true, with_bias)
        },
    );
    out[0]
}

/// The cotangents of a normalization's inputs: `x`, then `scale` and
/// `bias` when present, given the normalized `xhat`, the per-row `rstd` and
/// the output cotangent `dy` (f32 statistics for low-precision inputs).
fn norm_backward(
    p: &[Tensor],
    xhat: Tensor,
    rstd: Tensor,
    dy: Tensor,
    cd: DType,
    centered: bool,
    with_bias: bool,
) -> Vec<Tensor> {
    let dyf = dy.cast(cd);
    let dxhat = if p.len() >= 2 {
        dyf * p[1].cast(cd)
    } else {
        dyf
    };
    let proj = (dxhat * xhat).mean_keepdims(&[-1]);
    let mut dx = dxhat - xhat * proj;
    if centered {
        dx = dx - dxhat.mean_keepdims(&[-1]);
    }
    let mut out = vec![(dx * rstd).cast(p[0].dtype())];
    let rows: Vec<isize> = (0..xhat.rank() as isize - 1).collect();
    if p.len() >= 2 {
        out.push((dyf * xhat).sum(&rows).cast(p[1].dtype()));
    }
    if with_bias {
        out.push(dyf.sum(&rows).cast(p[2].dtype()));
    }
    out
}

#[track_caller]
fn rms_norm_impl(op: &str, x: Tensor, scale: Option<Tensor>, eps: f64) -> Tensor {
    let params: Vec<(&str, Tensor)> = scale.map(|s| ("scale", s)).into_iter().collect();
    let cd = match check(op, x, &params, eps) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let mut primals = vec![x];
    primals.extend(scale);
    let out = custom_vjp(
        primals,
        move |p: Vec<Tensor>| {
            let xf = p[0].cast(cd);
            let rstd = (xf.square().mean_keepdims(&[-1]) + eps).rsqrt();
            let mut y = xf * rstd;
            if p.len() >= 2 {
                y = y * p[1].cast(cd);
            }
            (vec![y.cast(p[0].dtype())], (p, rstd))
        },
        move |(p, rstd): &(Vec<Tensor>, Tensor), dy: Vec<Tensor>| {
            let xhat = p[0].cast(cd) * *rstd;
            norm_backward(p, xhat, *rstd, dy[0], cd, false, false)
        },
    );
    out[0]
}

/// Layer normalization over the last axis with a learned `scale` and
/// `bias` (both `[D]`): `(x - mean) / sqrt(var + eps) * scale + bias`.
///
/// Statistics in f32 for bf16/f16/fp8 inputs; the result has `x`'s dtype
/// and shape. See the [module documentation](self) for the numerics.
///
/// ```
/// use tessel_kernels::norm::layer_norm;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 4.0, 4.0], [2, 3])?;
/// let scale = HostTensor::from_vec(vec![2.0f32; 3], [3])?;
/// let bias = HostTensor::from_vec(vec![0.5f32; 3], [3])?;
/// let y = layer_norm::run(&dev, &x, &scale, &bias, 1e-5)?.to_vec::<f32>()?;
/// assert!((y[0] - (0.5 - 2.0 * 1.2247)).abs() < 1e-3); // (1 - 2) / sqrt(2/3) · 2 + 0.5
/// assert!((y[4] - 0.5).abs() < 1e-6);                  // a constant row gives the bias
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn layer_norm(x: Tensor, scale: Tensor, bias: Tensor, eps: f64) -> Tensor {
    layer_norm_impl("layer_norm", x, Some(scale), Some(bias), eps)
}

/// Layer normalization over the last axis with a learned `scale` (`[D]`)
/// and no bias: `(x - mean) / sqrt(var + eps) * scale`.
///
/// ```
/// use tessel_kernels::norm::layer_norm_no_bias;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 3.0], [1, 2])?;
/// let scale = HostTensor::from_vec(vec![1.0f32, 10.0], [2])?;
/// let y = layer_norm_no_bias::run(&dev, &x, &scale, 0.0)?.to_vec::<f32>()?;
/// assert_eq!(y, vec![-1.0, 10.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn layer_norm_no_bias(x: Tensor, scale: Tensor, eps: f64) -> Tensor {
    layer_norm_impl("layer_norm_no_bias", x, Some(scale), None, eps)
}

/// Layer normalization over the last axis without learned parameters:
/// `(x - mean) / sqrt(var + eps)`.
///
/// ```
/// use tessel_kernels::norm::layer_norm_plain;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 3.0, -2.0, 2.0], [2, 2])?;
/// let y = layer_norm_plain::run(&dev, &x, 0.0)?.to_vec::<f32>()?;
/// assert_eq!(y, vec![-1.0, 1.0, -1.0, 1.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn layer_norm_plain(x: Tensor, eps: f64) -> Tensor {
    layer_norm_impl("layer_norm_plain", x, None, None, eps)
}

/// RMS normalization over the last axis with a learned `scale` (`[D]`):
/// `x / sqrt(mean(x²) + eps) * scale` (the Llama/T5 norm; the scale is
/// applied in the compute dtype, before the single cast back to `x`'s
/// dtype).
///
/// ```
/// use tessel_kernels::norm::rms_norm;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![3.0f32, 4.0], [1, 2])?; // rms = sqrt(12.5)
/// let scale = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
/// let y = rms_norm::run(&dev, &x, &scale, 0.0)?.to_vec::<f32>()?;
/// assert!((y[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-6);
/// assert!((y[1] - 8.0 / 12.5f32.sqrt()).abs() < 1e-6);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rms_norm(x: Tensor, scale: Tensor, eps: f64) -> Tensor {
    rms_norm_impl("rms_norm", x, Some(scale), eps)
}

/// RMS normalization over the last axis without a scale:
/// `x / sqrt(mean(x²) + eps)`.
///
/// ```
/// use tessel_kernels::norm::rms_norm_plain;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![2.0f32, -2.0], [2])?;
/// let y = rms_norm_plain::run(&dev, &x, 0.0)?.to_vec::<f32>()?;
/// assert_eq!(y, vec![1.0, -1.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rms_norm_plain(x: Tensor, eps: f64) -> Tensor {
    rms_norm_impl("rms_norm_plain", x, None, eps)
}
