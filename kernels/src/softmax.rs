//! Numerically stable softmax and log-softmax along one axis.
//!
//! Both subtract the axis maximum before exponentiating, so large logits
//! neither overflow nor lose precision. For bf16, f16 and fp8 inputs the
//! exponentials and their sum are computed in f32 and the result is cast
//! back once (summing hundreds of bf16 exponentials in bf16 would lose most
//! of the significand); f32 and f64 inputs compute in their own dtype.
//!
//! As in JAX and PyTorch, a slice whose every element is `-inf` gives NaN
//! (there is no distribution to normalize); mask with a large negative
//! finite value instead of `-inf` if such rows can occur.
//!
//! A non-float input or an axis out of range is a trace error
//! ([`Error::Kernel`]) naming the kernel's op.

use tessel::prelude::*;
use tessel::tensor::trace_error;

use crate::norm::compute_dtype;

/// The compute dtype of `x`, or the poisoned result of a failed check.
#[track_caller]
fn check(op: &str, x: Tensor, axis: isize) -> Result<DType, Tensor> {
    let spec = x.spec();
    let rank = spec.rank() as isize;
    if !(-rank..rank).contains(&axis) {
        return Err(trace_error(
            op,
            &[x],
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    compute_dtype(spec.dtype)
        .ok_or_else(|| trace_error(op, &[x], format!("needs a float input, got {}", spec.dtype)))
}

/// `exp(x) / sum(exp(x))` along `axis` (negative counts from the end),
/// stable: the axis maximum is subtracted first. The result has `x`'s shape
/// and dtype; narrow floats compute in f32.
///
/// ```
/// use tessel_kernels::softmax::softmax;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// // Logits this large overflow a naive exp.
/// let x = HostTensor::from_vec(vec![1000.0f32, 1000.0, 0.0, 0.0], [2, 2])?;
/// let y = softmax::run(&dev, &x, 0)?.to_vec::<f32>()?; // along the columns
/// assert_eq!(y, vec![1.0, 1.0, 0.0, 0.0]);
/// let y = softmax::run(&dev, &x, -1)?.to_vec::<f32>()?; // along the rows
/// assert_eq!(y, vec![0.5; 4]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn softmax(x: Tensor, axis: isize) -> Tensor {
    match check("softmax", x, axis) {
        Ok(cd) => x.cast(cd).softmax(axis).cast(x.dtype()),
        Err(poisoned) => poisoned,
    }
}

/// `x - log(sum(exp(x)))` along `axis`, stable: computed as
/// `z - log(sum(exp(z)))` with `z = x - max(x)`, so it stays finite where
/// `log(softmax(x))` would underflow to `-inf`. Narrow floats compute in
/// f32.
///
/// ```
/// use tessel_kernels::softmax::log_softmax;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![0.0f32, -200.0], [2])?;
/// let y = log_softmax::run(&dev, &x, 0)?.to_vec::<f32>()?;
/// assert_eq!(y, vec![0.0, -200.0]); // log(softmax) would give -inf for the second
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn log_softmax(x: Tensor, axis: isize) -> Tensor {
    match check("log_softmax", x, axis) {
        Ok(cd) => x.cast(cd).log_softmax(axis).cast(x.dtype()),
        Err(poisoned) => poisoned,
    }
}
