//! Activations: GELU (erf and tanh forms), SiLU, SwiGLU, and GELU fused
//! with inverted dropout.
//!
//! All of them compute in f32 for bf16, f16 and fp8 inputs and cast the
//! result back once; f32 and f64 inputs compute in their own dtype. A
//! non-float input is a trace error ([`Error::Kernel`]).

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_PI};

use tessel::autodiff::{custom_vjp, vjp};
use tessel::prelude::*;
use tessel::tensor::trace_error;

use crate::norm::compute_dtype;

/// The compute dtype of `x`, or the poisoned result of a failed check.
#[track_caller]
fn float_input(op: &str, x: Tensor) -> Result<DType, Tensor> {
    let d = x.dtype();
    compute_dtype(d).ok_or_else(|| {
        trace_error(
            op,
            &[x],
            format!("needs a float input, got {d}; cast it first (x.cast(F32))"),
        )
    })
}

/// GELU of `x` (already in its compute dtype).
/// Beyond this magnitude the GELU and SiLU derivatives have reached their
/// limits (0 or 1) in f64: `sigmoid(-40)` is 4e-18, `Φ(-40)` far less.
const SATURATED: f64 = 40.0;

/// `f(x)` with its gradient taken at `x` clamped to `±SATURATED`: the
/// derivative's limits at `±inf` (the plain rules give `inf · 0 = NaN`
/// there), unchanged elsewhere; NaN stays NaN.
#[track_caller]
fn saturating(x: Tensor, f: fn(Tensor) -> Tensor) -> Tensor {
    custom_vjp(
        x,
        |x| (f(x), x.clamp(-SATURATED, SATURATED)),
        move |&xc: &Tensor, g: Tensor| {
            let (_, pb) = vjp(f, xc);
            pb.call(g)
        },
    )
}

fn gelu_erf(x: Tensor) -> Tensor {
    gelu_plain(x, false)
}

fn gelu_tanh(x: Tensor) -> Tensor {
    gelu_plain(x, true)
}

/// `x · sigmoid(x)`, with its gradient's limits at `±inf`.
#[track_caller]
fn silu_of(x: Tensor) -> Tensor {
    saturating(x, |x| x * x.sigmoid())
}

#[track_caller]
fn gelu_of(x: Tensor, approximate: bool) -> Tensor {
    saturating(x, if approximate { gelu_tanh } else { gelu_erf })
}

#[track_caller]
fn gelu_plain(x: Tensor, approximate: bool) -> Tensor {
    if approximate {
        let inner = (x + x * x.square() * 0.044715) * FRAC_2_PI.sqrt();
        x * 0.5 * (inner.tanh() + 1.0)
    } else {
        x * 0.5 * ((x * FRAC_1_SQRT_2).erf() + 1.0)
    }
}

/// The Gaussian error linear unit, `x · Φ(x)`.
///
/// `approximate = false` is the exact form `0.5 · x · (1 + erf(x / √2))`
/// (PyTorch's default, BERT); `approximate = true` is the tanh form
/// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))` (GPT-2, JAX's
/// default), which differs from the exact form by less than 5e-4.
///
/// ```
/// use tessel_kernels::activation::gelu;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![-1.0f32, 0.0, 1.0], [3])?;
/// let exact = gelu::run(&dev, &x, false)?.to_vec::<f32>()?;
/// let tanh = gelu::run(&dev, &x, true)?.to_vec::<f32>()?;
/// assert!((exact[2] - 0.841_345).abs() < 1e-5);
/// assert!((tanh[2] - 0.841_192).abs() < 1e-5);
/// assert_eq!(exact[1], 0.0);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn gelu(x: Tensor, approximate: bool) -> Tensor {
    match float_input("gelu", x) {
        Ok(cd) => gelu_of(x.cast(cd), approximate).cast(x.dtype()),
        Err(poisoned) => poisoned,
    }
}

/// The sigmoid linear unit (swish), `x · sigmoid(x)`.
///
/// ```
/// use tessel_kernels::activation::silu;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![0.0f32, 2.0], [2])?;
/// let y = silu::run(&dev, &x)?.to_vec::<f32>()?;
/// assert_eq!(y[0], 0.0);
/// assert!((y[1] - 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn silu(x: Tensor) -> Tensor {
    match float_input("silu", x) {
        Ok(cd) => {
            let xf = x.cast(cd);
            silu_of(xf).cast(x.dtype())
        }
        Err(poisoned) => poisoned,
    }
}

/// The SwiGLU gate on already projected inputs: `silu(gate) · up`.
///
/// This is the elementwise half of a SwiGLU feed-forward block
/// (`silu(x·W_gate) ⊙ (x·W_up)`, then `·W_down`); the projections are left
/// to the caller, who picks their precision and layout (for example one
/// fused `[D, 2F]` matmul split with `narrow`). `gate` and `up` must have
/// the same shape and dtype; the result has them too.
///
/// ```
/// use tessel_kernels::activation::swiglu;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let gate = HostTensor::from_vec(vec![0.0f32, 2.0], [2])?;
/// let up = HostTensor::from_vec(vec![5.0f32, 3.0], [2])?;
/// let y = swiglu::run(&dev, &gate, &up)?.to_vec::<f32>()?;
/// assert_eq!(y[0], 0.0);
/// assert!((y[1] - 3.0 * 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-5);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn swiglu(gate: Tensor, up: Tensor) -> Tensor {
    swiglu_impl(gate, up)
}

#[track_caller]
fn swiglu_impl(gate: Tensor, up: Tensor) -> Tensor {
    let cd = match float_input("swiglu", gate) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let (g, u) = (gate.spec(), up.spec());
    if g != u {
        return trace_error(
            "swiglu",
            &[gate, up],
            format!("gate and up must have the same shape and dtype, got {g} and {u}"),
        );
    }
    let gf = gate.cast(cd);
    (silu_of(gf) * up.cast(cd)).cast(gate.dtype())
}

/// GELU followed by inverted dropout, in one kernel: XLA fuses the two (on
/// the CPU backend the whole kernel is one loop fusion), so the activation
/// is never written to memory unmasked.
///
/// `approximate` picks the GELU form as in [`gelu`](fn@gelu). When
/// `training`, each element is zeroed with probability `rate` and the
/// rest are scaled by `1 / (1 - rate)`, so the expectation is unchanged;
/// otherwise the result is `gelu(x, approximate)` exactly and `seed` is
/// unused. `rate` must be in `[0, 1)` (a trace error otherwise).
///
/// `seed` is a traced integer scalar (u32 or s32), so a new seed every step
/// reuses the compiled program. The mask is a pure function of the seed and
/// each element's flat index (the counter-based generator of
/// [`random_bits`]: element `i` is kept when
/// `(random_bits_reference(seed, i) >> 8) · 2⁻²⁴ ≥ rate` in f32), so the
/// same seed and shape give the same mask on every backend.
///
/// ```
/// use tessel_kernels::activation::fused_gelu_dropout;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32; 1000], [1000])?;
/// let seed = HostTensor::scalar(42u32);
/// let y = fused_gelu_dropout::run(&dev, &x, true, 0.25, &seed, false)?.to_vec::<f32>()?;
/// let kept = y.iter().filter(|&&v| v != 0.0).count();
/// assert!((700..800).contains(&kept)); // about 75% survive
/// let again = fused_gelu_dropout::run(&dev, &x, true, 0.25, &seed, false)?.to_vec::<f32>()?;
/// assert_eq!(y, again); // deterministic in the seed
/// let eval = fused_gelu_dropout::run(&dev, &x, false, 0.25, &seed, false)?.to_vec::<f32>()?;
/// assert!(eval.iter().all(|&v| (v - 0.841_345).abs() < 1e-5)); // plain GELU
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn fused_gelu_dropout(
    x: Tensor,
    training: bool,
    rate: f64,
    seed: Tensor,
    approximate: bool,
) -> Tensor {
    gelu_dropout_impl(x, training, rate, seed, approximate)
}

#[track_caller]
fn gelu_dropout_impl(
    x: Tensor,
    training: bool,
    rate: f64,
    seed: Tensor,
    approximate: bool,
) -> Tensor {
    let op = "fused_gelu_dropout";
    let cd = match float_input(op, x) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    if !(0.0..1.0).contains(&rate) {
        return trace_error(op, &[x], format!("rate must be in [0, 1), got {rate}"));
    }
    let s = seed.spec();
    if s.rank() != 0 || !s.dtype.is_integer() {
        return trace_error(
            op,
            &[x, seed],
            format!("seed must be an integer scalar (u32 or s32), got {s}"),
        );
    }
    let y = gelu_of(x.cast(cd), approximate);
    let y = if training { y.dropout(rate, seed) } else { y };
    y.cast(x.dtype())
}
