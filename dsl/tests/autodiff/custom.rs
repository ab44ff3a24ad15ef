//! custom_vjp, checkpoint, jvp and higher-order gradients.

use tessel_dsl::autodiff::{
    checkpoint, custom_vjp, grad, jvp, stop_gradient, value_and_grad, vjp, Remat,
};
use tessel_dsl::{fori_loop, Tensor};
use tessel_testing::tensor;

use crate::fd::{check, data, eval};

#[test]
fn custom_vjp_replaces_the_rule() {
    let x = tensor(&[0.3, 1.7, -2.2], &[3], tessel_dsl::F64);
    // Straight-through rounding: forward rounds, backward is the identity.
    let g = eval(
        |a| {
            let f = |x: Tensor| custom_vjp(x, |x| (x.round(), ()), |_, g: Tensor| g);
            let (v, d) = value_and_grad(|x: Tensor| (f(x) * x).sum(&[0]), a[0]);
            vec![v, d]
        },
        &[x],
    );
    // d/dx round(x) * x with a straight-through round = x + round(x).
    assert_eq!(g[0].to_f64_vec(), vec![0.0 * 0.3 + 2.0 * 1.7 + -2.0 * -2.2]);
    assert_eq!(g[1].to_f64_vec(), vec![0.3, 1.7 + 2.0, -2.2 - 2.0]);
}

#[test]
fn custom_vjp_with_residuals_matches_finite_differences() {
    let x = data(1, &[2, 3], -1.0, 1.0);
    let w = data(2, &[3, 4], -1.0, 1.0);
    check(
        "custom_tanh_matmul",
        |a| {
            let y = custom_vjp(
                (a[0], a[1]),
                |(x, w): (Tensor, Tensor)| {
                    let y = x.matmul(w).tanh();
                    (y, (x, w, y))
                },
                |&(x, w, y): &(Tensor, Tensor, Tensor), g: Tensor| {
                    let d = g * (1.0 - y * y);
                    (d.matmul(w.t()), x.t().matmul(d))
                },
            );
            vec![y.exp()]
        },
        &[x, w],
    );
}

#[test]
fn checkpoint_gives_the_same_gradient() {
    let x = data(3, &[3, 3], -1.0, 1.0);
    for policy in [Remat::Nothing, Remat::Dots] {
        check(
            &format!("checkpoint_{policy:?}"),
            move |a| {
                vec![checkpoint(
                    a[0],
                    |x: Tensor| x.matmul(x).tanh().matmul(x).sin(),
                    policy,
                )]
            },
            &[x.clone()],
        );
    }
    // A checkpointed loop body.
    check(
        "checkpoint_in_loop",
        |a| {
            vec![fori_loop(0, 3, a[0], |_, y| {
                checkpoint(y, |y: Tensor| y.matmul(y).tanh(), Remat::Nothing)
            })]
        },
        &[x],
    );
}

#[test]
fn jvp_and_second_derivatives() {
    let x = data(4, &[5], -1.0, 1.0);
    let out = eval(
        |a| {
            let (y, dy) = jvp(|x: Tensor| x.sin() * x, a[0], a[0].ones_like());
            // d2/dx2 sin(x) = -sin(x), by grad of grad.
            let d2 = grad(
                |x: Tensor| grad(|x: Tensor| x.sin().sum(&[0]), x).sum(&[0]),
                a[0],
            );
            vec![y, dy, d2]
        },
        &[x.clone()],
    );
    let xs = x.to_f64_vec();
    for (i, &v) in xs.iter().enumerate() {
        assert!((out[1].to_f64_vec()[i] - (v.cos() * v + v.sin())).abs() < 1e-12);
        assert!((out[2].to_f64_vec()[i] + v.sin()).abs() < 1e-12);
    }
    // The pullback of a pullback (vjp inside vjp) against finite differences.
    check(
        "vjp_of_vjp",
        |a| {
            let (_, pb) = vjp(|x: Tensor| x.exp() * x.sin(), a[0]);
            vec![pb.call(a[1])]
        },
        &[x, data(5, &[5], -1.0, 1.0)],
    );
}

#[test]
fn stop_gradient_blocks_the_flow() {
    let x = tensor(&[0.5, -1.5, 2.0], &[3], tessel_dsl::F64);
    let g = eval(
        |a| {
            let d = grad(|x: Tensor| (x * stop_gradient(x)).sum(&[0]), a[0]);
            // Everything stopped: a zero gradient, not an error.
            let z = grad(|x: Tensor| stop_gradient(x.exp()).sum(&[0]), a[0]);
            vec![d, z]
        },
        &[x.clone()],
    );
    assert_eq!(g[0].to_f64_vec(), x.to_f64_vec());
    assert_eq!(g[1].to_f64_vec(), vec![0.0; 3]);
}

#[test]
fn custom_gradients_survive_recomputation() {
    // Straight-through rounding and a stopped value, inside a loop body (its
    // backward recomputes the body), a branch and a checkpoint.
    let x = tensor(&[0.3, 1.7, -2.2], &[3], tessel_dsl::F64);
    let g = eval(
        |a| {
            let ste = |x: Tensor| custom_vjp(x, |x| (x.round(), ()), |_, g: Tensor| g);
            let looped = grad(
                |x: Tensor| fori_loop(0, 2, x, |_, y| ste(y) * 2.0 + y).sum(&[0]),
                a[0],
            );
            let traced = grad(
                |x: Tensor| {
                    let n = tessel_dsl::Tensor::scalar(2.0, tessel_dsl::S32);
                    fori_loop(0, n, x, |_, y| ste(y) * 2.0 + y).sum(&[0])
                },
                a[0],
            );
            let stopped = grad(
                |x: Tensor| fori_loop(0, 2, x, |_, y| y * stop_gradient(y)).sum(&[0]),
                a[0],
            );
            let remat = grad(
                |x: Tensor| checkpoint(x, |x: Tensor| ste(x) * x, Remat::Nothing).sum(&[0]),
                a[0],
            );
            let branch = grad(
                |x: Tensor| tessel_dsl::cond(x.sum(&[0]).gt(0.0), || ste(x) * 3.0, || x).sum(&[0]),
                a[0],
            );
            vec![looped, traced, stopped, remat, branch]
        },
        &[x.clone()],
    );
    // y -> 2 round(y) + y has straight-through slope 3 per step: 9 after two.
    assert_eq!(g[0].to_f64_vec(), vec![9.0; 3]);
    assert_eq!(g[1].to_f64_vec(), vec![9.0; 3]);
    // y -> y * stop(y): slope stop(y) = y_k at each step: x * (x*x).
    let xs = x.to_f64_vec();
    let want: Vec<f64> = xs.iter().map(|v| v * v * v).collect();
    assert_eq!(g[2].to_f64_vec(), want);
    // d/dx ste(x) * x = x + round(x).
    let want: Vec<f64> = xs.iter().map(|v| v + v.round()).collect();
    assert_eq!(g[3].to_f64_vec(), want);
    // sum(x) = -0.2 < 0: the else branch, slope 1.
    assert_eq!(g[4].to_f64_vec(), vec![1.0; 3]);
}
