//! Elementwise ops, comparisons, select, clamp and casts.

use tessel_dsl::autodiff::grad;
use tessel_dsl::{Tensor, F32, F64, S32};

use crate::fd::{check, data, eval};

#[test]
fn unary_rules_match_finite_differences() {
    type U = fn(Tensor) -> Tensor;
    let positive: &[(&str, U)] = &[
        ("log", |x| x.log()),
        ("sqrt", |x| x.sqrt()),
        ("rsqrt", |x| x.rsqrt()),
        ("cbrt", |x| x.cbrt()),
        ("log1p", |x| x.log1p()),
        ("recip", |x| x.recip()),
    ];
    for (i, (name, f)) in positive.iter().enumerate() {
        let f = *f;
        check(
            name,
            move |a| vec![f(a[0])],
            &[data(i as u64, &[3, 5], 0.3, 2.0)],
        );
    }
    let any: &[(&str, U)] = &[
        ("neg", |x| -x),
        ("exp", |x| x.exp()),
        ("expm1", |x| x.expm1()),
        ("tanh", |x| x.tanh()),
        ("sigmoid", |x| x.sigmoid()),
        ("sin", |x| x.sin()),
        ("cos", |x| x.cos()),
        ("tan", |x| (x * 0.5).tan()),
        ("erf", |x| x.erf()),
        ("abs", |x| x.abs()),
        ("square", |x| x.square()),
        ("relu", |x| x.relu()),
    ];
    for (i, (name, f)) in any.iter().enumerate() {
        let f = *f;
        // Values away from 0 so abs and relu are smooth around them.
        let x = data(10 + i as u64, &[7], 0.1, 1.5);
        check(name, move |a| vec![f(a[0]), f(-a[0])], &[x]);
    }
}

#[test]
fn piecewise_constant_ops_have_zero_gradient() {
    let x = data(30, &[2, 3], 0.1, 0.4);
    check(
        "floor_ceil_round_sign",
        |a| vec![a[0].floor() + a[0].ceil() + a[0].round() + a[0].sign() + a[0]],
        &[x],
    );
}

#[test]
fn binary_rules_with_broadcasting() {
    type B = fn(Tensor, Tensor) -> Tensor;
    let ops: &[(&str, B)] = &[
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("div", |a, b| a / b),
        ("pow", |a, b| a.pow(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("atan2", |a, b| a.atan2(b)),
        ("rem", |a, b| (a * 3.0) % b),
    ];
    for (i, (name, f)) in ops.iter().enumerate() {
        let f = *f;
        let a = data(40 + i as u64, &[3, 1], 0.5, 2.0);
        let b = data(60 + i as u64, &[1, 4], 0.7, 1.9);
        check(name, move |x| vec![f(x[0], x[1])], &[a.clone(), b]);
        // A scalar operand on either side, and the same tensor twice.
        check(
            &format!("{name}_scalar"),
            move |x| vec![f(x[0], x[1].sum(&[0, 1]))],
            &[a.clone(), data(80 + i as u64, &[2, 2], 0.2, 0.5)],
        );
        if *name != "rem" {
            // (3a) % a jumps at every multiple: no derivative to compare.
            check(
                &format!("{name}_self"),
                move |x| vec![f(x[0], x[0])],
                &[a.clone()],
            );
        }
    }
}

#[test]
fn select_clamp_and_where() {
    let x = data(1, &[4, 5], -1.0, 1.0);
    let y = data(2, &[4, 5], -1.0, 1.0);
    check(
        "select",
        |a| vec![a[0].gt(a[1]).select(a[0] * 2.0, a[1].exp())],
        &[x.clone(), y.clone()],
    );
    check(
        "select_scalar_branch",
        |a| vec![a[0].gt(0.0).select(a[0], 0.25)],
        &[x.clone()],
    );
    let lo = data(3, &[4, 5], -0.6, -0.1);
    let hi = data(4, &[4, 5], 0.1, 0.6);
    check(
        "clamp",
        |a| vec![a[0].clamp(a[1], a[2])],
        &[x.clone(), lo, hi],
    );
    check(
        "clamp_scalars",
        |a| vec![a[0].clamp(-0.3, 0.4) * a[0]],
        &[x.clone()],
    );
    // Bounds that cross: the result is the upper bound wherever it is below
    // the lower one, whatever the operand.
    let lo = data(6, &[4, 5], 0.5, 1.5);
    let hi = data(7, &[4, 5], -1.5, 0.4);
    check(
        "clamp_crossed_bounds",
        |a| vec![a[0].clamp(a[1], a[2])],
        &[x, lo, hi],
    );
}

#[test]
fn casts_pass_gradients_between_floats_only() {
    let x = data(5, &[6], -2.0, 2.0);
    // f64 -> f32 -> f64 rounds the value (finite differences would see f32
    // steps); the gradient of the round trip is exactly 1.
    let g = eval(
        |a| vec![grad(|x: Tensor| x.cast(F32).cast(F64).sum(&[0]), a[0])],
        &[x.clone()],
    );
    assert_eq!(g[0].to_f64_vec(), vec![1.0; 6]);
    let h = eval(
        |a| vec![grad(|x: Tensor| x.cast(F32).sum(&[0]), a[0])],
        &[x.clone()],
    );
    assert_eq!(h[0].to_f64_vec(), vec![1.0; 6]);
    // Through an integer the gradient is zero.
    check(
        "cast_int",
        |a| vec![(a[0] * 0.01).cast(S32).cast(F64) + a[0]],
        &[x],
    );
}
