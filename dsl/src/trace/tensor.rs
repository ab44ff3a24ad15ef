//! [`Tensor`]: the `Copy` handle a kernel body computes with.

use std::fmt;

use crate::dtype::DType;
use crate::error::Location;
use crate::shape::{Shape, TensorSpec};
use crate::trace::{self, spec_of};

/// A traced tensor: a `Copy` handle to a value of the kernel being traced.
///
/// Ops on tensors (`+`, `matmul`, `exp`, `sum`, ...) append to the trace and
/// return new handles; their shapes and dtypes are checked on the spot, and a
/// mismatch becomes the trace's error (naming the op, the operand types and
/// the calling line). Handles only mean something inside the trace that made
/// them.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, trace, TensorSpec, F32};
/// let params = [("x".to_string(), TensorSpec::new([2, 3], F32))];
/// let g = trace("k", &params, KernelConfig::default(), |a| {
///     let x = a[0];
///     assert_eq!(x.shape(), vec![2, 3]);
///     assert_eq!(x.dim(-1), 3);
///     (x.exp() + 1.0).sum(&[1])
/// })?;
/// assert_eq!(g.output_specs()[0], TensorSpec::new([2], F32));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone, Copy, Hash)]
pub struct Tensor {
    pub(crate) trace: u32,
    pub(crate) value: usize,
}

impl Tensor {
    /// A handle that belongs to no trace (what ops return outside a kernel).
    pub(crate) const INERT: Tensor = Tensor {
        trace: 0,
        value: usize::MAX,
    };

    /// Dtype and shape. Outside a trace: a scalar `f32`.
    pub fn spec(&self) -> TensorSpec {
        spec_of(*self).unwrap_or_else(|| TensorSpec::scalar(DType::F32))
    }

    /// The extents.
    pub fn shape(&self) -> Shape {
        self.spec().shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.spec().dtype
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.spec().rank()
    }

    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.spec().num_elements()
    }

    /// The extent of axis `axis`; negative axes count from the end (`-1` is the last).
    /// An out-of-range axis is a trace error (and returns 1).
    #[track_caller]
    pub fn dim(&self, axis: isize) -> usize {
        let spec = self.spec();
        match normalize_axis(axis, spec.rank()) {
            Some(a) => spec.shape[a],
            None => {
                let loc = Location::caller();
                fail(
                    "dim",
                    &[*self],
                    format!("axis {axis} is out of range for rank {}", spec.rank()),
                    &loc,
                );
                1
            }
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match spec_of(*self) {
            Some(s) => write!(f, "Tensor(%{}: {s})", self.value),
            None => f.write_str("Tensor(<not in this trace>)"),
        }
    }
}

/// Fails the current trace with `message`, reported under the op name `op`
/// with `operands`' types and the caller's source line, and returns a
/// poisoned handle (later ops on it are skipped; the trace returns this
/// error as an [`Error::Kernel`](crate::Error::Kernel)).
///
/// This is how code built on the op set (a kernel library, a helper called
/// from kernels) rejects arguments the ops themselves would accept: a
/// malformed einsum equation, a static parameter out of range. Like every
/// op it never panics: if an operand is already poisoned the earlier error
/// stands, and outside any trace the error is kept for
/// [`take_orphan_error`](crate::trace::take_orphan_error).
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, tensor::trace_error, trace, TensorSpec, F32};
/// let params = [("x".to_string(), TensorSpec::new([2], F32))];
/// let err = trace("k", &params, KernelConfig::default(), |a| {
///     trace_error("my_op", &[a[0]], "rate must be in [0, 1), got 1.5")
/// })
/// .unwrap_err();
/// let k = err.as_kernel_error().unwrap();
/// assert_eq!((k.op.as_str(), k.operands.as_slice()), ("my_op", &["f32[2]".to_string()][..]));
/// assert!(k.message.contains("rate must be"));
/// ```
#[track_caller]
pub fn trace_error(op: &str, operands: &[Tensor], message: impl Into<String>) -> Tensor {
    let message = message.into();
    trace::build(op, operands, Location::caller(), 1, move |_| Err(message))[0]
}

/// `axis` in `-rank..rank` as a non-negative index.
pub(crate) fn normalize_axis(axis: isize, rank: usize) -> Option<usize> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Records an error on the current trace (or as an orphan error).
pub(crate) fn fail(op: &str, operands: &[Tensor], message: String, loc: &Location) {
    if trace::with_state(|s| s.fail(op, operands, message, loc)).is_none() {
        trace::orphan(op, loc);
    }
}
