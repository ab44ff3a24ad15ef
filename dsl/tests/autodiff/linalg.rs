//! Reductions, the softmax family and dot_general with any dimension numbers.

use tessel_dsl::autodiff::grad;
use tessel_dsl::{DotDims, Tensor};

use crate::fd::{check, data, eval};

#[test]
fn reductions() {
    let x = data(1, &[3, 4, 5], -1.0, 1.0);
    check(
        "sum",
        |a| vec![a[0].sum(&[0, 2]), a[0].sum(&[1])],
        &[x.clone()],
    );
    check("mean", |a| vec![a[0].mean(&[-1])], &[x.clone()]);
    check(
        "max_min",
        |a| vec![a[0].max(&[1]), a[0].min(&[0, 2])],
        &[x.clone()],
    );
    check(
        "prod",
        |a| vec![a[0].prod(&[1])],
        &[data(2, &[3, 5], 0.5, 1.5)],
    );
    check(
        "softmax",
        |a| vec![a[0].softmax(-1), a[0].log_softmax(1)],
        &[x.clone()],
    );
    check("logsumexp", |a| vec![a[0].logsumexp(0)], &[x]);
}

#[test]
fn prod_with_zeros_is_exact() {
    // d/dx prod(x) with one zero: only the zero's slot is nonzero.
    let x = tessel_testing::tensor(&[2.0, 0.0, 3.0, 0.0, 5.0, 1.5], &[2, 3], tessel_dsl::F64);
    let g = eval(
        |a| vec![grad(|x: Tensor| x.prod(&[1]).sum(&[0]), a[0])],
        &[x],
    );
    assert_eq!(g[0].to_f64_vec(), vec![0.0, 6.0, 0.0, 7.5, 0.0, 0.0]);
}

#[test]
fn max_ties_share_the_gradient() {
    let x = tessel_testing::tensor(&[1.0, 3.0, 3.0, 2.0], &[4], tessel_dsl::F64);
    let g = eval(|a| vec![grad(|x: Tensor| x.max(&[0]), a[0])], &[x.clone()]);
    assert_eq!(g[0].to_f64_vec(), vec![0.0, 0.5, 0.5, 0.0]);
    let g = eval(
        |a| vec![grad(|x: Tensor| x.maximum(3.0).sum(&[0]), a[0])],
        &[x],
    );
    assert_eq!(g[0].to_f64_vec(), vec![0.0, 0.5, 0.5, 0.0]);
}

#[test]
fn argmax_passes_no_gradient_but_its_value_does() {
    let x = data(3, &[4, 6], -1.0, 1.0);
    check(
        "argmax_onehot",
        |a| {
            let i = a[0].argmax(1);
            vec![a[0].take(i, 1) * 2.0, i.cast(tessel_dsl::F64)]
        },
        &[x],
    );
}

#[test]
fn matmul_and_dot_general() {
    let a = data(4, &[3, 5], -1.0, 1.0);
    let b = data(5, &[5, 2], -1.0, 1.0);
    check(
        "matmul",
        |x| vec![x[0].matmul(x[1])],
        &[a.clone(), b.clone()],
    );
    check(
        "matvec",
        |x| vec![x[0].matmul(x[1].sum(&[1]))],
        &[a.clone(), b],
    );
    let ba = data(6, &[2, 3, 4], -1.0, 1.0);
    let bb = data(7, &[2, 4, 5], -1.0, 1.0);
    check("batched", |x| vec![x[0].matmul(x[1])], &[ba, bb]);
    // Batch axes in the middle and contracting axes in odd places:
    // lhs [4(c), 2(b), 3], rhs [5, 2(b), 3(c)... ] contract lhs 0 with rhs 2.
    let l = data(8, &[4, 2, 3], -1.0, 1.0);
    let r = data(9, &[5, 2, 4, 3], -1.0, 1.0);
    check(
        "dot_general",
        |x| {
            let dims = DotDims {
                lhs_batch: vec![1],
                rhs_batch: vec![1],
                lhs_contract: vec![0, 2],
                rhs_contract: vec![2, 3],
            };
            vec![x[0].dot_general(x[1], dims, None, None)]
        },
        &[l, r],
    );
}
