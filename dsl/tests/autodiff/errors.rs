//! What has no gradient is a kernel error naming the op and the line.

use tessel_dsl::autodiff::grad;
use tessel_dsl::ir::ScatterCombine;
use tessel_dsl::{Tensor, TensorSpec, F64, S32};
use tessel_testing::trace_error;

#[test]
#[rustfmt::skip]
fn multiplying_scatter_updates_have_no_gradient() {
    let specs = [
        TensorSpec::new([4], F64),
        TensorSpec::new([2], F64),
        TensorSpec::new([2], S32),
    ];
    let mul = |x: Tensor, i: Tensor, u: Tensor| x.index_update(0, i, u, ScatterCombine::Mul); let line = line!();
    let e = trace_error(|a| grad(|u: Tensor| mul(a[0], a[2], u).sum(&[0]), a[1]), &specs);
    assert!(e.op.contains("gradient of scatter"), "{e}");
    assert!(e.message.contains("multiplying scatter"), "{e}");
    assert_eq!(e.location.line, line, "{e}");
}

#[test]
fn grad_needs_a_float_scalar_and_float_inputs() {
    let e = trace_error(
        |a| grad(|x: Tensor| x.exp(), a[0]),
        &[TensorSpec::new([3], F64)],
    );
    assert!(e.message.contains("floating-point scalar"), "{e}");
    let e = trace_error(
        |a| grad(|i: Tensor| i.cast(F64).sum(&[0]), a[0]),
        &[TensorSpec::new([3], S32)],
    );
    assert!(e.message.contains("only floating-point"), "{e}");
}

#[test]
fn a_cotangent_of_the_wrong_type_is_an_error() {
    let e = trace_error(
        |a| {
            let (_, pb) = tessel_dsl::autodiff::vjp(|x: Tensor| x.exp(), a[0]);
            pb.call(Tensor::zeros([2], F64))
        },
        &[TensorSpec::new([3], F64)],
    );
    assert!(
        e.message
            .contains("cotangent 0 is f64[2] but output 0 is f64[3]"),
        "{e}"
    );
}
