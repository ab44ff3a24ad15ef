//! Recording a kernel error from library code.
//!
//! The ops record their own errors (bad shapes, dtypes, axes) on the trace.
//! A library kernel built from ops sometimes knows better what is wrong with
//! its arguments as a whole (say, head counts that do not divide). [`fail`]
//! records such an error on the trace being built, exactly as an op does:
//! the first error wins, it names the kernel, the operands' types and the
//! caller's line, and the trace then returns it as
//! [`Error::Kernel`](crate::Error::Kernel).

use crate::error::Location;
use crate::trace::tensor::Tensor;

/// Records `message` as the current trace's error (if it is the first),
/// naming `op` and the types of `operands`. Outside a trace it is kept as
/// this thread's orphan error, as ops do
/// ([`take_orphan_error`](crate::trace::take_orphan_error)).
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, report, trace, TensorSpec, F32};
/// let params = [("x".to_string(), TensorSpec::new([2, 3], F32))];
/// let err = trace("k", &params, KernelConfig::default(), |a| {
///     if a[0].dim(0) != 3 {
///         report::fail("my_kernel", &[a[0]], "x needs 3 rows");
///     }
///     a[0]
/// })
/// .unwrap_err();
/// let e = err.as_kernel_error().unwrap();
/// assert_eq!((e.op.as_str(), e.message.as_str()), ("my_kernel", "x needs 3 rows"));
/// assert_eq!(e.operands, ["f32[2,3]"]);
/// ```
#[track_caller]
pub fn fail(op: &str, operands: &[Tensor], message: impl Into<String>) {
    crate::trace::tensor::fail(op, operands, message.into(), &Location::caller());
}
