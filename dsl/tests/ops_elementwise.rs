//! Elementwise unary ops against plain-Rust `f64` / integer references,
//! over shape sweeps (rank 0, size 1, odd and non-block-multiple extents)
//! and every dtype where the op is meaningful.

mod common;

use std::f64::consts::PI;

use common::*;
use tessel_dsl::{Tensor, BF16, F16, F32, F64, PRED};

/// `erf` in `f64`: `2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (2n+1)!!`,
/// a series of same-signed terms (no cancellation), accurate to ~1e-15.
fn erf_ref(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    let x2 = x * x;
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / PI.sqrt() * (-x2).exp() * sum
}

/// `sign` as XLA defines it: -1, 0 (keeping the sign of zero) or 1; NaN stays NaN.
fn sign_ref(x: f64) -> f64 {
    if x == 0.0 || x.is_nan() {
        x
    } else {
        x.signum()
    }
}

#[test]
fn reference_erf_matches_tabulated_values() {
    for (x, want) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
        (-1.5, -0.966_105_146_475_310_7),
    ] {
        assert!(
            (erf_ref(x) - want).abs() < 1e-15,
            "erf({x}) = {}",
            erf_ref(x)
        );
    }
}

type UnaryCase = (&'static str, fn(Tensor) -> Tensor, fn(f64) -> f64, Class);

/// Unary float ops on inputs anywhere in [-3, 3].
fn unary_any() -> Vec<UnaryCase> {
    use Class::*;
    vec![
        ("exp", |x| x.exp(), f64::exp, Transcendental),
        ("expm1", |x| x.expm1(), f64::exp_m1, Transcendental),
        ("cbrt", |x| x.cbrt(), f64::cbrt, Transcendental),
        ("tanh", |x| x.tanh(), f64::tanh, Transcendental),
        (
            "sigmoid",
            |x| x.sigmoid(),
            |x| 1.0 / (1.0 + (-x).exp()),
            Transcendental,
        ),
        ("sin", |x| x.sin(), f64::sin, Transcendental),
        ("cos", |x| x.cos(), f64::cos, Transcendental),
        ("erf", |x| x.erf(), erf_ref, Transcendental),
        ("floor", |x| x.floor(), f64::floor, Exact),
        ("ceil", |x| x.ceil(), f64::ceil, Exact),
        ("round", |x| x.round(), f64::round_ties_even, Exact),
        ("sign", |x| x.sign(), sign_ref, Exact),
        ("abs", |x| x.abs(), f64::abs, Exact),
        ("neg", |x| -x, |x| -x, Exact),
        ("relu", |x| x.relu(), |x| x.max(0.0), Exact),
        ("square", |x| x.square(), |x| x * x, Simple),
    ]
}

/// Unary float ops on inputs in [0.05, 5).
fn unary_positive() -> Vec<UnaryCase> {
    use Class::*;
    vec![
        ("log", |x| x.log(), f64::ln, Transcendental),
        ("log1p", |x| x.log1p(), f64::ln_1p, Transcendental),
        ("sqrt", |x| x.sqrt(), f64::sqrt, Simple),
        ("rsqrt", |x| x.rsqrt(), |x| 1.0 / x.sqrt(), Transcendental),
        ("recip", |x| x.recip(), |x| 1.0 / x, Simple),
    ]
}

#[test]
fn unary_float_ops_match_f64_references() {
    let mut rng = Rng::new(1);
    for dtype in FLOATS {
        for shape in shapes_for(dtype) {
            let x = random(&mut rng, shape, dtype, -3.0, 3.0);
            let p = random(&mut rng, shape, dtype, 0.05, 5.0);
            let t = random(&mut rng, shape, dtype, -1.2, 1.2);
            let (any, pos) = (unary_any(), unary_positive());
            let out = run(
                |a| {
                    let mut v: Vec<Tensor> = any.iter().map(|c| (c.1)(a[0])).collect();
                    v.extend(pos.iter().map(|c| (c.1)(a[1])));
                    v.push(a[2].tan());
                    v
                },
                &[&x, &p, &t],
            );
            let cases = any
                .iter()
                .map(|c| (c, &x))
                .chain(pos.iter().map(|c| (c, &p)));
            for (i, ((name, _, r, class), input)) in cases.enumerate() {
                let want: Vec<f64> = input.to_f64_vec().into_iter().map(r).collect();
                check(
                    &out[i],
                    dtype,
                    shape,
                    &want,
                    *class,
                    &format!("{name} {dtype}{shape:?}"),
                );
            }
            let want: Vec<f64> = t.to_f64_vec().into_iter().map(f64::tan).collect();
            let last = out.last().unwrap();
            check(
                last,
                dtype,
                shape,
                &want,
                Class::Transcendental,
                &format!("tan {dtype}"),
            );
        }
    }
}

#[test]
fn special_float_values() {
    let inf = f64::INFINITY;
    let v = [inf, -inf, f64::NAN, 0.0, -0.0, 1e38, -2.5, 3.0];
    for dtype in [F32, F64] {
        let x = tensor(&v, &[8], dtype);
        let one = tensor(&[1.0; 8], &[8], dtype);
        let out = run(
            |a| {
                vec![
                    a[0].is_finite(),
                    a[0].sign(),
                    a[0].exp(),
                    a[0].abs().log(),
                    a[0].maximum(a[1]),
                    a[0].minimum(a[1]),
                    a[0].tanh(),
                    a[0].floor(),
                ]
            },
            &[&x, &one],
        );
        let xs = x.to_f64_vec();
        let fin: Vec<f64> = xs
            .iter()
            .map(|v| f64::from(u8::from(v.is_finite())))
            .collect();
        check(&out[0], PRED, &[8], &fin, Class::Exact, "is_finite");
        let m = |f: fn(f64) -> f64| xs.iter().map(|&v| f(v)).collect::<Vec<_>>();
        check(&out[1], dtype, &[8], &m(sign_ref), Class::Exact, "sign");
        let nan_max = |v: f64| if v.is_nan() { v } else { v.max(1.0) };
        let nan_min = |v: f64| if v.is_nan() { v } else { v.min(1.0) };
        assert_close(&out[2], &m(f64::exp), Class::Transcendental, "exp");
        assert_close(
            &out[3],
            &m(|v| v.abs().ln()),
            Class::Transcendental,
            "log|x|",
        );
        assert_close(&out[4], &m(nan_max), Class::Exact, "maximum propagates NaN");
        assert_close(&out[5], &m(nan_min), Class::Exact, "minimum propagates NaN");
        assert_close(&out[6], &m(f64::tanh), Class::Transcendental, "tanh");
        assert_close(&out[7], &m(f64::floor), Class::Exact, "floor");
        // The sign of zero survives `sign` and `floor`.
        let s = out[1].to_f64_vec();
        assert!(s[3].is_sign_positive() && s[4].is_sign_negative());
    }
}

#[test]
fn rounding_is_half_to_even() {
    let v = [
        -2.5,
        -1.5,
        -0.5,
        0.5,
        1.5,
        2.5,
        3.5,
        0.499_999_97,
        2.4,
        -2.6,
        1e7 + 0.5,
        -0.0,
    ];
    for dtype in [F32, F64, BF16, F16] {
        let x = tensor(&v, &[12], dtype);
        let out = run(|a| vec![a[0].round(), a[0].floor(), a[0].ceil()], &[&x]);
        let xs = x.to_f64_vec();
        for (o, f) in out
            .iter()
            .zip([f64::round_ties_even, f64::floor, f64::ceil])
        {
            let want: Vec<f64> = xs.iter().map(|&v| f(v)).collect();
            check(o, dtype, &[12], &want, Class::Exact, &format!("{dtype}"));
        }
    }
}

#[test]
fn unary_integer_ops() {
    let mut rng = Rng::new(2);
    for dtype in INTS {
        for shape in shapes_for(dtype) {
            let (lo, hi) = int_range(dtype);
            // Not the minimum: its negation and absolute value overflow.
            let x = random(&mut rng, shape, dtype, lo + 1.0, hi);
            let signed = !dtype.is_unsigned();
            let out = run(
                |a| {
                    let mut v = vec![
                        a[0].abs(),
                        a[0].sign(),
                        a[0].popcount(),
                        a[0].logical_not(),
                        !a[0],
                    ];
                    if signed {
                        v.push(-a[0]);
                    }
                    v
                },
                &[&x],
            );
            let xs = x.to_f64_vec();
            let m = |f: &dyn Fn(f64) -> f64| xs.iter().map(|&v| f(v)).collect::<Vec<_>>();
            let what = format!("{dtype}{shape:?}");
            check(
                &out[0],
                dtype,
                shape,
                &m(&f64::abs),
                Class::Exact,
                &format!("abs {what}"),
            );
            check(
                &out[1],
                dtype,
                shape,
                &m(&sign_ref),
                Class::Exact,
                &format!("sign {what}"),
            );
            let pop = m(&|v| f64::from(to_bits(v, dtype).count_ones()));
            check(
                &out[2],
                dtype,
                shape,
                &pop,
                Class::Exact,
                &format!("popcount {what}"),
            );
            let not = m(&|v| from_bits(!to_bits(v, dtype), dtype));
            check(
                &out[3],
                dtype,
                shape,
                &not,
                Class::Exact,
                &format!("not {what}"),
            );
            check(
                &out[4],
                dtype,
                shape,
                &not,
                Class::Exact,
                &format!("! {what}"),
            );
            if signed {
                check(
                    &out[5],
                    dtype,
                    shape,
                    &m(&|v| -v),
                    Class::Exact,
                    &format!("neg {what}"),
                );
            }
        }
    }
}

#[test]
fn logical_not_of_pred() {
    let p = tensor(&[1.0, 0.0, 0.0, 1.0, 1.0], &[5], PRED);
    let out = run(|a| vec![!a[0], a[0].logical_not()], &[&p]);
    for o in &out {
        check(
            o,
            PRED,
            &[5],
            &[0.0, 1.0, 1.0, 0.0, 0.0],
            Class::Exact,
            "not",
        );
    }
}
