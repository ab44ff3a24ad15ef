//! Gather, take, scatter (add, set, max), index_update, sort and top_k.

use tessel_dsl::ir::{ScatterCombine, ScatterDims};
use tessel_dsl::{TakeMode, Tensor, S32};
use tessel_testing::tensor;

use crate::fd::{check, data};

fn idx(v: &[f64], shape: &[usize]) -> tessel_dsl::HostTensor {
    tensor(v, shape, S32)
}

#[test]
fn take_and_gather_with_out_of_range_indices() {
    let x = data(1, &[5, 3], -1.0, 1.0);
    // Repeated, negative and too-large indices, promised in bounds: XLA
    // clamps them.
    let i = idx(&[0.0, 4.0, 4.0, -2.0, 9.0, 2.0], &[2, 3]);
    check(
        "take_rows",
        |a| vec![a[0].take_with(a[1], 0, TakeMode::PromiseInBounds).sin()],
        &[x.clone(), i.clone()],
    );
    let j = idx(&[2.0, 0.0, 2.0, 7.0], &[4]);
    check(
        "take_cols",
        |a| vec![a[0].take_with(a[1], 1, TakeMode::PromiseInBounds).square()],
        &[x.clone(), j.clone()],
    );
    // The default (fill) and the other modes: negative indices count from
    // the end; clip and wrap move the rest into range.
    let from_end = idx(&[0.0, 4.0, 4.0, -2.0, -5.0, 2.0], &[2, 3]);
    check(
        "take_rows_fill",
        |a| vec![a[0].take(a[1], 0).sin()],
        &[x.clone(), from_end],
    );
    for (name, mode) in [
        ("take_cols_clip", TakeMode::Clip),
        ("take_cols_wrap", TakeMode::Wrap),
    ] {
        check(
            name,
            move |a| vec![a[0].take_with(a[1], 1, mode).square()],
            &[x.clone(), j.clone()],
        );
    }
}

#[test]
fn scatter_add_set_and_max() {
    let x = data(2, &[6, 2], -1.0, 1.0);
    let u = data(3, &[4, 2], -1.0, 1.0);
    // Duplicates (1 twice) and one out-of-range index (9, skipped).
    let i = idx(&[1.0, 3.0, 1.0, 9.0], &[4]);
    for (name, combine) in [
        ("scatter_add", ScatterCombine::Add),
        ("scatter_max", ScatterCombine::Max),
        ("scatter_min", ScatterCombine::Min),
    ] {
        check(
            name,
            move |a| vec![a[0].index_update(0, a[2], a[1], combine).exp()],
            &[x.clone(), u.clone(), i.clone()],
        );
    }
    // Set with unique indices (with duplicates the winner is the plugin's choice).
    let unique = idx(&[1.0, 3.0, 0.0, 9.0], &[4]);
    check(
        "scatter_set",
        |a| vec![a[0].index_update(0, a[2], a[1], ScatterCombine::Set).exp()],
        &[x.clone(), u.clone(), unique],
    );
    // Multiplying scatter: the operand's gradient (the updates come from an
    // integer input, so they carry none).
    let ui = tensor(&[2.0, -1.0, 3.0, 1.0, -2.0, 2.0, 1.0, 1.0], &[4, 2], S32);
    check(
        "scatter_mul_operand",
        |a| vec![a[0].index_update(0, a[2], a[1].cast(tessel_dsl::F64), ScatterCombine::Mul)],
        &[x.clone(), ui, i],
    );
    // A full scatter with an explicit index vector dimension.
    let pts = idx(&[0.0, 1.0, 5.0, 0.0, 2.0, 1.0], &[3, 2]);
    check(
        "scatter_points",
        |a| {
            let dims = ScatterDims {
                update_window_dims: vec![],
                inserted_window_dims: vec![0, 1],
                scatter_dims_to_operand_dims: vec![0, 1],
                index_vector_dim: 1,
            };
            vec![a[0].scatter(a[2], a[1], dims, ScatterCombine::Add).square()]
        },
        &[x, data(4, &[3], -1.0, 1.0), pts],
    );
}

#[test]
fn sort_and_top_k() {
    let x = data(5, &[3, 7], -1.0, 1.0);
    check(
        "sort",
        |a| vec![a[0].sort(1, false) * Tensor::arange(7, tessel_dsl::F64)],
        &[x.clone()],
    );
    check(
        "sort_desc_axis0",
        |a| vec![a[0].sort(0, true).exp()],
        &[x.clone()],
    );
    check(
        "sort_with",
        |a| {
            let (k, v) = a[0].sort_with(a[1], 1, false);
            vec![k.square(), v.exp()]
        },
        &[x.clone(), data(6, &[3, 7], -1.0, 1.0)],
    );
    check(
        "top_k",
        |a| {
            let (v, i) = a[0].top_k(3);
            vec![v.square(), i.cast(tessel_dsl::F64)]
        },
        &[x],
    );
}

/// A scatter into an empty axis lands no update: the updates' gradient is
/// zero, and so is its own derivative (the tangents of a sort of nothing
/// differentiate a scatter's pullback; it used to gather windows of one
/// element from the empty cotangent, which does not trace).
#[test]
fn scatter_into_an_empty_axis_and_its_second_derivative() {
    let empty = data(8, &[0], -1.0, 1.0);
    let u = data(9, &[], -1.0, 1.0);
    check(
        "scatter_into_empty",
        |a| {
            let at = Tensor::scalar(0.0, S32);
            vec![
                a[0].index_update(0, at, a[1], ScatterCombine::Set),
                a[1].exp(),
            ]
        },
        &[empty.clone(), u],
    );
    let y = crate::fd::eval(
        |a| {
            let (y, t) = tessel_dsl::autodiff::jvp(|x: Tensor| x.sort(0, true), a[0], a[0]);
            vec![y, t]
        },
        &[empty],
    );
    assert_eq!(y[1].shape(), [0]);
}
