//! Trace-time errors: every misuse returns `Error::Kernel` naming the op, the
//! operand types and the line of this file that made the bad call; nothing
//! panics, and ops after the first error are skipped quietly.

mod common;

use std::cell::Cell;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::ScatterCombine::Set;
use tessel_dsl::{
    cond, fori_loop, while_loop, Error, KernelError, Tensor, TensorSpec, BF16, F32, S32,
};

/// Asserts the error is about `op`, mentions `needle`, and points at `line` of this file.
#[track_caller]
fn expect(e: &KernelError, op: &str, needle: &str, line: u32) {
    assert_eq!(e.op, op, "{e}");
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {needle:?}",
        e.message
    );
    assert!(
        e.location.file.ends_with("trace_errors.rs"),
        "location {}",
        e.location
    );
    assert_eq!(e.location.line, line, "{e}");
    assert!(e.location.column > 0);
    assert!(!e.kernel.is_empty(), "{e}");
    // The rendered error carries everything.
    let shown = e.to_string();
    assert!(
        shown.contains(op) && shown.contains("trace_errors.rs"),
        "{shown}"
    );
}

fn f32s(shape: &[usize]) -> TensorSpec {
    spec(shape, F32)
}

#[test]
fn mismatched_dtypes() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0] + a[1], &[f32s(&[3]), spec(&[3], BF16)]);
    expect(&e, "add", "one dtype", line);
    assert_eq!(e.operands, ["f32[3]", "bf16[3]"]);
    assert!(
        e.message.contains(".cast("),
        "suggests a cast: {}",
        e.message
    );
}

#[test]
fn shapes_that_do_not_broadcast() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0] * a[1], &[f32s(&[2, 3]), f32s(&[4])]);
    expect(&e, "mul", "do not broadcast", line);
    assert_eq!(e.operands, ["f32[2,3]", "f32[4]"]);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].lt(a[1]), &[f32s(&[3]), f32s(&[2])]);
    expect(&e, "lt", "do not broadcast", line);
}

#[test]
fn matmul_contracting_mismatch() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0].matmul(a[1]), &[f32s(&[2, 3]), f32s(&[4, 5])]);
    expect(&e, "dot_general", "contracting axes differ", line);
    assert_eq!(e.operands, ["f32[2,3]", "f32[4,5]"]);
    // A vector operand goes through a reshape first; the error still points here.
    let line = line!() + 1;
    let e = trace_error(|a| a[0].matmul(a[1]), &[f32s(&[3]), f32s(&[4, 5])]);
    expect(&e, "dot_general", "contracting axes differ", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].matmul(a[1]), &[f32s(&[]), f32s(&[4])]);
    expect(&e, "matmul", "rank 1 or more", line);
}

#[test]
fn reshape_with_the_wrong_element_count() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0].reshape(&[4, 2]), &[f32s(&[3, 3])]);
    expect(&e, "reshape", "9 elements", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].reshape(&[-1, 2]), &[f32s(&[3, 3])]);
    expect(&e, "reshape", "cannot reshape", line);
}

#[test]
fn transpose_with_a_bad_permutation() {
    for perm in [&[0, 0, 1][..], &[0, 1], &[2, 1, 3]] {
        let line = line!() + 1;
        let e = trace_error(|a| a[0].transpose(perm), &[f32s(&[2, 3, 4])]);
        expect(&e, "transpose", "not a permutation", line);
    }
}

#[test]
fn reductions_over_out_of_range_axes() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0].sum(&[2]), &[f32s(&[2, 3])]);
    expect(&e, "sum", "out of range", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].max(&[-3]), &[f32s(&[2, 3])]);
    expect(&e, "max", "out of range", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].sum(&[1, -1]), &[f32s(&[2, 3])]);
    expect(&e, "sum", "given twice", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].argmax(2), &[f32s(&[2, 3])]);
    expect(&e, "argmax", "out of range", line);
    let line = line!() + 1;
    let e = trace_error(|a| a[0].argmin(-3), &[f32s(&[2, 3])]);
    expect(&e, "argmin", "out of range", line);
}

#[test]
fn integer_tensor_times_an_unrepresentable_scalar() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0] * 0.5, &[spec(&[3], S32)]);
    expect(&e, "constant", "0.5 cannot be represented in s32", line);
    let line = line!() + 1;
    let e = trace_error(|a| 3e10 + a[0], &[spec(&[3], S32)]);
    expect(&e, "constant", "cannot be represented in s32", line);
}

#[test]
fn select_with_a_non_pred_condition() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0].select(a[1], 0.0), &[f32s(&[3]), f32s(&[3])]);
    expect(&e, "select", "must be pred", line);
    assert_eq!(e.operands[0], "f32[3]");
}

#[test]
fn top_k_larger_than_the_axis() {
    let line = line!() + 1;
    let e = trace_error(|a| a[0].top_k(5).0, &[f32s(&[2, 3])]);
    expect(&e, "top_k", "k = 5 must be in 1..=3", line);
}

#[test]
fn while_body_changing_a_carried_shape() {
    let line = line!() + 3;
    let e = trace_error(
        |a| {
            while_loop(
                (Tensor::scalar(0.0, S32), a[0]),
                |(i, _)| i.lt(3),
                |(i, x)| (i + 1, concat_twice(x)),
            )
        },
        &[f32s(&[3])],
    );
    expect(
        &e,
        "while_loop",
        "carried value 1 is f32[6] but must be f32[3]",
        line,
    );
    let line = line!() + 2;
    let e = trace_error(
        |a| fori_loop(0, 3, a[0], |_, x| x.cast(BF16)),
        &[f32s(&[3])],
    );
    expect(&e, "while_loop", "must be f32[3]", line);
    let line = line!() + 1;
    let e = trace_error(|a| while_loop(a[0], |x| x.sum(&[0]), |x| x), &[f32s(&[3])]);
    expect(
        &e,
        "while_loop",
        "loop condition 0 is f32[] but must be pred[]",
        line,
    );
}

fn concat_twice(x: Tensor) -> Tensor {
    tessel_dsl::concat(&[x, x], 0)
}

#[test]
fn cond_branches_of_different_types() {
    let line = line!() + 2;
    let e = trace_error(
        |a| cond(a[0].sum(&[0]).gt(0.0), || a[0], || a[0].cast(S32)),
        &[f32s(&[3])],
    );
    expect(
        &e,
        "cond",
        "else-branch result 0 is s32[3] but must be f32[3]",
        line,
    );
    let line = line!() + 3;
    let e = trace_error(
        |a| {
            cond(
                a[0].sum(&[0]).gt(0.0),
                || (a[0], a[0]),
                || (a[0], a[0].sum(&[0])),
            )
        },
        &[f32s(&[3])],
    );
    expect(&e, "cond", "else-branch result 1", line);
    let line = line!() + 1;
    let e = trace_error(|a| cond(a[0].gt(0.0), || a[0], || a[0]), &[f32s(&[3])]);
    expect(&e, "cond", "scalar pred", line);
}

#[test]
fn a_tensor_from_another_trace() {
    let leaked: Cell<Option<Tensor>> = Cell::new(None);
    Kernel::new("first", |a: &[Tensor]| {
        leaked.set(Some(a[0]));
        a[0]
    })
    .trace(&[f32s(&[3])])
    .unwrap();
    let old = leaked.get().unwrap();
    for other in [f32s(&[3]), f32s(&[]), spec(&[3], S32)] {
        let line = line!() + 1;
        let e = trace_error(|a| a[0] + old, std::slice::from_ref(&other));
        expect(&e, "add", "another kernel trace", line);
        assert!(
            e.operands
                .contains(&"<tensor from another trace>".to_string()),
            "{e}"
        );
    }
    let line = line!() + 1;
    let e = trace_error(|a| a[0].matmul(old), &[f32s(&[3])]);
    expect(&e, "matmul", "another kernel trace", line);
}

#[test]
fn a_tensor_created_in_a_loop_body_used_after_the_loop() {
    let inner: Cell<Option<Tensor>> = Cell::new(None);
    let line = line!() + 8;
    let e = trace_error(
        |a| {
            let y = fori_loop(0, 3, a[0], |_, x| {
                let t = x * 2.0;
                inner.set(Some(t));
                t
            });
            y + inner.get().unwrap()
        },
        &[f32s(&[3])],
    );
    expect(&e, "add", "outside the loop or branch body", line);
    // The same for a branch of a cond.
    let line = line!() + 12;
    let e = trace_error(
        |a| {
            let y = cond(
                a[0].sum(&[0]).gt(0.0),
                || {
                    let t = a[0] + 1.0;
                    inner.set(Some(t));
                    t
                },
                || a[0],
            );
            y * inner.get().unwrap()
        },
        &[f32s(&[3])],
    );
    expect(&e, "mul", "outside the loop or branch body", line);
}

#[test]
fn the_first_error_wins_and_later_ops_are_skipped() {
    let line = line!() + 3;
    let e = trace_error(
        |a| {
            let bad = a[0] + a[1];
            let worse = bad.matmul(a[0]).reshape(&[7, 7]).sum(&[9]);
            cond(worse.gt(0.0), || worse.top_k(100).0, || a[0])
        },
        &[f32s(&[2, 3]), f32s(&[4])],
    );
    expect(&e, "add", "do not broadcast", line);
}

#[test]
fn run_reports_kernel_errors_without_compiling() {
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let line = line!() + 1;
    match try_run(|a| a[0].reshape(&[3]), &[&x]) {
        Err(Error::Kernel(e)) => expect(&e, "reshape", "cannot reshape", line),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

#[test]
fn ops_outside_any_kernel_leave_an_orphan_error() {
    let _ = tessel_dsl::trace::take_orphan_error();
    let line = line!() + 1;
    let t = Tensor::zeros([3], F32);
    let _ = t + 1.0;
    let e = tessel_dsl::trace::take_orphan_error().expect("an orphan error");
    assert_eq!(e.op, "constant");
    assert!(e.message.contains("only run while a kernel is traced"));
    assert!(e.location.file.ends_with("trace_errors.rs"));
    assert_eq!(e.location.line, line);
}

type Body = fn(&[Tensor]) -> Tensor;

#[test]
fn more_misuses_each_name_their_op() {
    let s = |shape: &[usize]| vec![f32s(shape)];
    // (body, its line, op, message fragment, argument specs)
    let cases: Vec<(Body, u32, &str, &str, Vec<TensorSpec>)> = vec![
        (|a| a[0].squeeze(0), line!(), "squeeze", "not 1", s(&[2, 1])),
        (
            |a| a[0].unflatten(1, &[2, 2]),
            line!(),
            "unflatten",
            "not the product of [2, 2]",
            s(&[2, 6]),
        ),
        (
            |a| a[0].unflatten(2, &[1]),
            line!(),
            "unflatten",
            "out of range",
            s(&[2, 6]),
        ),
        (
            |a| a[0].flatten(1, 0),
            line!(),
            "flatten",
            "wrong order",
            s(&[2, 6]),
        ),
        (
            |a| a[0].flatten(0, 5),
            line!(),
            "flatten",
            "out of range",
            s(&[2, 6]),
        ),
        (
            |a| a[0].expand_dims(3),
            line!(),
            "expand_dims",
            "out of range",
            s(&[2]),
        ),
        (
            |a| tessel_dsl::concat(&[a[0], a[0].t()], 0),
            line!(),
            "concat",
            "does not match",
            s(&[2, 3]),
        ),
        (
            |_| tessel_dsl::concat(&[], 0),
            line!(),
            "concat",
            "at least one",
            s(&[2]),
        ),
        (
            |a| a[0].slice(&[0], &[5], &[1]),
            line!(),
            "slice",
            "not inside",
            s(&[4]),
        ),
        (
            |a| a[0].slice_axis(0, 2, 9),
            line!(),
            "slice_axis",
            "2..9 is not inside axis 0",
            s(&[4]),
        ),
        (
            |a| a[0].narrow(0, 2, 3),
            line!(),
            "narrow",
            "2..5 is not inside axis 0",
            s(&[4]),
        ),
        (
            |a| a[0].narrow(0, 1, usize::MAX),
            line!(),
            "narrow",
            "1..(past usize::MAX) is not inside",
            s(&[4]),
        ),
        (
            |a| a[0].dynamic_slice(&[a[0]], &[1]),
            line!(),
            "dynamic_slice",
            "start indices",
            s(&[4]),
        ),
        (
            |a| a[0].pad(a[0], &[1], &[1], &[0]),
            line!(),
            "pad",
            "scalar f32",
            s(&[4]),
        ),
        (
            |a| a[0].pad(0.0, &[-3], &[-3], &[0]),
            line!(),
            "pad",
            "negative extent",
            s(&[4]),
        ),
        (|a| a[0].take(a[0], 0), line!(), "take", "integers", s(&[4])),
        (
            |a| a[0].index_update(0, a[0].cast(S32), a[0].cast(S32), Set),
            line!(),
            "scatter",
            "dtype",
            s(&[4]),
        ),
        (
            |_| Tensor::iota([3], 0, tessel_dsl::PRED),
            line!(),
            "iota",
            "pred",
            s(&[4]),
        ),
        (
            |a| a[0].broadcast_to([3, 5]),
            line!(),
            "broadcast_to",
            "cannot broadcast",
            s(&[4]),
        ),
        (
            |a| a[0].broadcast_in_dim([3, 5], &[0]),
            line!(),
            "broadcast_in_dim",
            "cannot map",
            s(&[4]),
        ),
        (
            |a| a[0].matmul(a[0].cast(BF16)),
            line!(),
            "dot_general",
            "different dtypes",
            s(&[4]),
        ),
        (
            |a| a[0].gt(0.0).sort(0, false),
            line!(),
            "sort",
            "pred",
            s(&[4]),
        ),
        (
            |a| a[0].sum(&[0]).top_k(1).0,
            line!(),
            "top_k",
            "rank 1 or more",
            s(&[4]),
        ),
        (
            |a| a[0].cast(S32).log(),
            line!(),
            "log",
            "not defined for s32",
            s(&[4]),
        ),
        (
            |a| -a[0].cast(tessel_dsl::U32),
            line!(),
            "neg",
            "not defined for u32",
            s(&[4]),
        ),
        (
            |a| a[0].shift_left(a[0]),
            line!(),
            "shift_left",
            "not defined for f32",
            s(&[4]),
        ),
        (
            |a| a[0].cast(S32).pow(2),
            line!(),
            "pow",
            "not defined for s32",
            s(&[4]),
        ),
        (
            |a| a[0].gt(0.0).argmax(0),
            line!(),
            "argmax",
            "pred",
            s(&[4]),
        ),
        (
            |a| a[0].gt(0.0).sum(&[0]).cast(F32),
            line!(),
            "sum",
            "not defined for pred",
            s(&[4]),
        ),
        (
            |a| a[0].clamp(Tensor::zeros([4], S32), 1.0),
            line!(),
            "clamp",
            "dtype",
            s(&[4]),
        ),
        (
            |a| a[0] * a[0].dim(5) as f32,
            line!(),
            "dim",
            "out of range",
            s(&[4]),
        ),
        (
            |a| cond(a[0].sum(&[0]), || a[0], || a[0]),
            line!(),
            "cond",
            "scalar pred",
            s(&[4]),
        ),
        (
            |a| while_loop(a[0], |x| x.gt(0.0), |x| x),
            line!(),
            "while_loop",
            "loop condition 0 is pred[4]",
            s(&[4]),
        ),
    ];
    for (body, line, op, needle, specs) in cases {
        let e = trace_error(body, &specs);
        assert_eq!(e.op, op, "{e}");
        assert!(
            e.message.contains(needle),
            "{op}: message {:?} lacks {needle:?}",
            e.message
        );
        assert!(e.location.file.ends_with("trace_errors.rs"), "{e}");
        assert!(
            e.location.line.abs_diff(line) <= 1,
            "{op}: line {} for the case at {line}",
            e.location.line
        );
    }
}

/// Rust code in a body that panics on a poisoned result's (guessed) type
/// does not hide the error that poisoned it: the trace returns that error.
#[test]
fn a_panic_after_an_error_returns_the_error() {
    let line = line!() + 3;
    let e = trace_error(
        |a| {
            let bad = a[0].matmul(a[1]); // fails: its result is poisoned
            let n = bad.shape()[1]; // the guessed type is the scalar's: panics
            a[0] * n as f64
        },
        &[f32s(&[2, 3]), f32s(&[4, 5])],
    );
    expect(&e, "dot_general", "contracting axes differ", line);
}

/// A panic in a body that recorded no error is the body's own: it unwinds
/// to the caller.
#[test]
fn a_panic_without_an_error_unwinds() {
    let caught = std::panic::catch_unwind(|| {
        let params = [("x".to_string(), f32s(&[2]))];
        let _ = tessel_dsl::trace("k", &params, Default::default(), |a| {
            let dims = a[0].shape();
            assert_eq!(dims.len(), 5, "the body's own check");
            a[0]
        });
    });
    let payload = caught.expect_err("the body's panic reaches the caller");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("the body's own check"), "{message}");
    // The trace was popped: new traces work.
    assert!(trace_error(|a| a[0].reshape(&[3]), &[f32s(&[2])])
        .message
        .contains("elements"));
}
