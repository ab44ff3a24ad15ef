//! Reductions (sum, prod, max, min, mean, any, all, argmax, argmin) and the
//! softmax family against `f64` references.

mod common;

use common::*;
use tessel_dsl::{DType, HostTensor, BF16, F32, F64, PRED, S32, U32, U8};

/// Reduces `x` (of `shape`) over `axes` (negative count from the end) with
/// `f`, starting each output at `init`; returns the values and the shape
/// with those axes removed (or kept as 1 when `keep`).
fn reduce_ref(
    x: &[f64],
    shape: &[usize],
    axes: &[isize],
    keep: bool,
    init: f64,
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let r = shape.len() as isize;
    let axes: Vec<usize> = axes
        .iter()
        .map(|&a| a.rem_euclid(r.max(1)) as usize)
        .collect();
    let kept: Vec<usize> = (0..shape.len())
        .map(|a| if axes.contains(&a) { 1 } else { shape[a] })
        .collect();
    let mut out = vec![init; kept.iter().product()];
    for (i, &v) in x.iter().enumerate() {
        let mut idx = unravel(i, shape);
        for &a in &axes {
            idx[a] = 0;
        }
        let o = ravel(&idx, &kept);
        out[o] = f(out[o], v);
    }
    let shape_out = if keep {
        kept
    } else {
        (0..shape.len())
            .filter(|a| !axes.contains(a))
            .map(|a| shape[a])
            .collect()
    };
    (out, shape_out)
}

const AXES: &[&[isize]] = &[&[0], &[1], &[2], &[-1], &[0, 2], &[0, 1, 2], &[]];

/// Wraps an exact integer product into s32.
fn wrap_s32(v: f64) -> f64 {
    v as i64 as i32 as f64
}

#[test]
fn sum_prod_max_min_mean_over_axis_sets() {
    let mut rng = Rng::new(40);
    for dtype in [F32, F64, BF16, S32] {
        for shape in [&[3, 5, 7][..], &[1, 129, 1]] {
            let x = random(&mut rng, shape, dtype, -2.0, 2.0);
            // Products stay O(1) for floats; integer products wrap, exactly.
            let p = if dtype.is_float() {
                random(&mut rng, shape, dtype, 0.8, 1.25)
            } else {
                random(&mut rng, shape, dtype, -3.0, 3.0)
            };
            let float = dtype.is_float();
            let out = run(
                |t| {
                    let mut r = Vec::new();
                    for axes in AXES {
                        r.extend([
                            t[0].sum(axes),
                            t[1].prod(axes),
                            t[0].max(axes),
                            t[0].min(axes),
                        ]);
                        if float {
                            r.push(t[0].mean(axes));
                        }
                    }
                    r
                },
                &[&x, &p],
            );
            let (xv, pv) = (x.to_f64_vec(), p.to_f64_vec());
            let mut o = out.iter();
            for axes in AXES {
                let what = format!("{dtype}{shape:?} axes {axes:?}");
                let n: usize = axes
                    .iter()
                    .map(|&a| shape[a.rem_euclid(3) as usize])
                    .product();
                let acc = accumulate_tol(dtype, n, 2.0);
                let (w, s) = reduce_ref(&xv, shape, axes, false, 0.0, |a, b| a + b);
                let got = o.next().unwrap();
                assert_eq!(got.shape(), &s[..], "sum {what}");
                assert_close_tol(got, &w, acc, &format!("sum {what}"));
                let (w, s) = if float {
                    reduce_ref(&pv, shape, axes, false, 1.0, |a, b| a * b)
                } else {
                    reduce_ref(&pv, shape, axes, false, 1.0, |a, b| wrap_s32(a * b))
                };
                let got = o.next().unwrap();
                assert_eq!(got.shape(), &s[..], "prod {what}");
                assert_close_tol(
                    got,
                    &w,
                    accumulate_tol(dtype, n, 1.0),
                    &format!("prod {what}"),
                );
                let (w, s) = reduce_ref(&xv, shape, axes, false, f64::NEG_INFINITY, f64::max);
                check(
                    o.next().unwrap(),
                    dtype,
                    &s,
                    &w,
                    Class::Exact,
                    &format!("max {what}"),
                );
                let (w, s) = reduce_ref(&xv, shape, axes, false, f64::INFINITY, f64::min);
                check(
                    o.next().unwrap(),
                    dtype,
                    &s,
                    &w,
                    Class::Exact,
                    &format!("min {what}"),
                );
                if float {
                    let (w, s) = reduce_ref(&xv, shape, axes, false, 0.0, |a, b| a + b);
                    let w: Vec<f64> = w.iter().map(|v| v / n as f64).collect();
                    let got = o.next().unwrap();
                    assert_eq!(got.shape(), &s[..], "mean {what}");
                    assert_close_tol(
                        got,
                        &w,
                        accumulate_tol(dtype, 1, 2.0),
                        &format!("mean {what}"),
                    );
                }
            }
        }
    }
}

#[test]
fn reductions_of_rank_0_and_size_1_tensors() {
    let s = tensor(&[2.5], &[], F32);
    let one = tensor(&[-3.0], &[1], S32);
    let out = run(
        |t| {
            vec![
                t[0].sum(&[]),
                t[0].max(&[]),
                t[1].sum(&[0]),
                t[1].min(&[-1]),
                t[1].prod(&[0]),
            ]
        },
        &[&s, &one],
    );
    check(&out[0], F32, &[], &[2.5], Class::Exact, "sum of rank 0");
    check(&out[1], F32, &[], &[2.5], Class::Exact, "max of rank 0");
    for o in &out[2..] {
        check(o, S32, &[], &[-3.0], Class::Exact, "reduce of [1]");
    }
}

#[test]
fn integer_max_min_start_at_the_dtype_extremes() {
    // Rows of all-minimum / all-maximum values: the init must not win.
    for dtype in [S32, U8, U32] {
        let (lo, hi) = int_range(dtype);
        let x = HostTensor::from_fn(spec(&[2, 5], dtype), |i| if i < 5 { lo } else { hi });
        let out = run(|t| vec![t[0].max(&[1]), t[0].min(&[1])], &[&x]);
        check(
            &out[0],
            dtype,
            &[2],
            &[lo, hi],
            Class::Exact,
            &format!("max {dtype}"),
        );
        check(
            &out[1],
            dtype,
            &[2],
            &[lo, hi],
            Class::Exact,
            &format!("min {dtype}"),
        );
    }
}

#[test]
fn any_all_on_pred_and_bitwise_on_integers() {
    let mut rng = Rng::new(41);
    let shape = [4, 3, 5];
    // Mostly-true and mostly-false data make both answers occur.
    let p = HostTensor::from_fn(spec(&shape, PRED), |i| {
        f64::from(u8::from(rng.unit() < if i < 30 { 0.9 } else { 0.1 }))
    });
    let axes: &[&[isize]] = &[&[0], &[2], &[-2], &[0, 2], &[0, 1, 2]];
    let out = run(
        |t| {
            let mut r = Vec::new();
            for a in axes {
                r.extend([t[0].any(a), t[0].all(a)]);
            }
            r
        },
        &[&p],
    );
    for (k, a) in axes.iter().enumerate() {
        let (w, s) = reduce_ref(&p.to_f64_vec(), &shape, a, false, 0.0, f64::max);
        check(
            &out[2 * k],
            PRED,
            &s,
            &w,
            Class::Exact,
            &format!("any {a:?}"),
        );
        let (w, s) = reduce_ref(&p.to_f64_vec(), &shape, a, false, 1.0, f64::min);
        check(
            &out[2 * k + 1],
            PRED,
            &s,
            &w,
            Class::Exact,
            &format!("all {a:?}"),
        );
    }
    // On integers `all` / `any` are bitwise and / or over the axis.
    for dtype in [S32, U8, U32] {
        let (lo, hi) = int_range(dtype);
        let x = random(&mut rng, &[3, 6], dtype, lo, hi);
        let out = run(
            |t| vec![t[0].all(&[1]), t[0].any(&[1]), t[0].all(&[0])],
            &[&x],
        );
        let bits = |v: f64| v as i64;
        let back = |v: i64| match dtype {
            DType::U8 => v as u8 as f64,
            DType::U32 => v as u32 as f64,
            _ => v as i32 as f64,
        };
        let (w, _) = reduce_ref(&x.to_f64_vec(), &[3, 6], &[1], false, back(-1), |a, b| {
            back(bits(a) & bits(b))
        });
        check(
            &out[0],
            dtype,
            &[3],
            &w,
            Class::Exact,
            &format!("bitwise all {dtype}"),
        );
        let (w, _) = reduce_ref(&x.to_f64_vec(), &[3, 6], &[1], false, 0.0, |a, b| {
            back(bits(a) | bits(b))
        });
        check(
            &out[1],
            dtype,
            &[3],
            &w,
            Class::Exact,
            &format!("bitwise any {dtype}"),
        );
        let (w, _) = reduce_ref(&x.to_f64_vec(), &[3, 6], &[0], false, back(-1), |a, b| {
            back(bits(a) & bits(b))
        });
        check(
            &out[2],
            dtype,
            &[6],
            &w,
            Class::Exact,
            &format!("bitwise all axis 0 {dtype}"),
        );
    }
}

#[test]
fn keepdims_variants() {
    let mut rng = Rng::new(42);
    let shape = [3, 4, 5];
    let x = random(&mut rng, &shape, F32, -2.0, 2.0);
    let i = random(&mut rng, &shape, S32, -50.0, 50.0);
    let axes: &[&[isize]] = &[&[1], &[0, 2], &[-1], &[0, 1, 2]];
    let out = run(
        |t| {
            let mut r = Vec::new();
            for a in axes {
                r.extend([
                    t[0].sum_keepdims(a),
                    t[0].max_keepdims(a),
                    t[0].mean_keepdims(a),
                    t[1].mean(a),
                ]);
            }
            r
        },
        &[&x, &i],
    );
    let xv = x.to_f64_vec();
    for (k, a) in axes.iter().enumerate() {
        let n: usize = a.iter().map(|&b| shape[b.rem_euclid(3) as usize]).product();
        let (w, s) = reduce_ref(&xv, &shape, a, true, 0.0, |p, q| p + q);
        assert_eq!(out[4 * k].shape(), &s[..]);
        assert_close_tol(
            &out[4 * k],
            &w,
            accumulate_tol(F32, n, 2.0),
            &format!("sum_keepdims {a:?}"),
        );
        let (wm, s) = reduce_ref(&xv, &shape, a, true, f64::NEG_INFINITY, f64::max);
        check(
            &out[4 * k + 1],
            F32,
            &s,
            &wm,
            Class::Exact,
            &format!("max_keepdims {a:?}"),
        );
        let w: Vec<f64> = w.iter().map(|v| v / n as f64).collect();
        assert_eq!(out[4 * k + 2].shape(), &s[..]);
        assert_close_tol(
            &out[4 * k + 2],
            &w,
            accumulate_tol(F32, 1, 2.0),
            &format!("mean_keepdims {a:?}"),
        );
        // Integer mean divides with truncation toward zero.
        let (w, s) = reduce_ref(&i.to_f64_vec(), &shape, a, false, 0.0, |p, q| p + q);
        let w: Vec<f64> = w.iter().map(|v| (v / n as f64).trunc()).collect();
        check(
            &out[4 * k + 3],
            S32,
            &s,
            &w,
            Class::Exact,
            &format!("s32 mean {a:?}"),
        );
    }
}

/// The index along `axis` that argmax (`max`) or argmin picks: the first
/// NaN if there is one, else the first extreme element.
fn arg_ref(x: &[f64], shape: &[usize], axis: usize, max: bool) -> (Vec<f64>, Vec<usize>) {
    let out_shape: Vec<usize> = (0..shape.len())
        .filter(|&a| a != axis)
        .map(|a| shape[a])
        .collect();
    let v = (0..out_shape.iter().product())
        .map(|o| {
            let mut idx = unravel(o, &out_shape);
            idx.insert(axis, 0);
            let mut best = 0usize;
            let at = |idx: &mut Vec<usize>, k: usize| {
                idx[axis] = k;
                x[ravel(idx, shape)]
            };
            for k in 1..shape[axis] {
                let (b, c) = (at(&mut idx, best), at(&mut idx, k));
                let better = if max { c > b } else { c < b };
                if !b.is_nan() && (c.is_nan() || better) {
                    best = k;
                }
            }
            best as f64
        })
        .collect();
    (v, out_shape)
}

#[test]
fn argmax_argmin_ties_take_the_first_index_and_nan_wins() {
    let mut rng = Rng::new(43);
    let shape = [4, 6, 5];
    for dtype in [F32, BF16, S32, U8] {
        // Few distinct values: many ties. Some NaNs for floats.
        let x = HostTensor::from_fn(spec(&shape, dtype), |_| {
            let k = rng.int(0, 9);
            if dtype.is_float() && k == 9 && rng.unit() < 0.3 {
                f64::NAN
            } else {
                (k % 4) as f64
            }
        });
        let out = run(
            |t| {
                let mut r = Vec::new();
                for a in [0isize, 1, -1] {
                    r.extend([t[0].argmax(a), t[0].argmin(a)]);
                }
                r
            },
            &[&x],
        );
        for (k, a) in [0usize, 1, 2].into_iter().enumerate() {
            for (j, max) in [true, false].into_iter().enumerate() {
                let (w, s) = arg_ref(&x.to_f64_vec(), &shape, a, max);
                let name = if max { "argmax" } else { "argmin" };
                check(
                    &out[2 * k + j],
                    S32,
                    &s,
                    &w,
                    Class::Exact,
                    &format!("{name} {dtype} axis {a}"),
                );
            }
        }
    }
}

#[test]
fn argmax_over_long_rows_with_several_nans_and_infinities() {
    // Long rows let XLA reduce in any order: the first NaN must still win.
    let n = 1000;
    let mut v = vec![0.0; 4 * n];
    for (i, x) in v.iter_mut().enumerate() {
        *x = ((i * 7919) % 1009) as f64 / 100.0;
    }
    for &(r, c) in &[
        (0, 700),
        (0, 300),
        (0, 999),
        (1, 5),
        (1, 6),
        (2, 998),
        (2, 999),
    ] {
        v[r * n + c] = f64::NAN;
    }
    for x in &mut v[3 * n..] {
        *x = f64::NEG_INFINITY;
    }
    let x = tensor(&v, &[4, n], F32);
    let out = run(|t| vec![t[0].argmax(1), t[0].argmin(1)], &[&x]);
    let (w, _) = arg_ref(&v, &[4, n], 1, true);
    assert_eq!(w, [300.0, 5.0, 998.0, 0.0]);
    check(&out[0], S32, &[4], &w, Class::Exact, "argmax");
    let (w, _) = arg_ref(&v, &[4, n], 1, false);
    check(&out[1], S32, &[4], &w, Class::Exact, "argmin");
}

#[test]
fn max_min_reductions_propagate_nan() {
    let x = tensor(&[1.0, f64::NAN, 3.0, 2.0, 0.5, -1.0], &[2, 3], F32);
    let out = run(
        |t| vec![t[0].max(&[1]), t[0].min(&[1]), t[0].max(&[0, 1])],
        &[&x],
    );
    check(&out[0], F32, &[2], &[f64::NAN, 2.0], Class::Exact, "max");
    check(&out[1], F32, &[2], &[f64::NAN, -1.0], Class::Exact, "min");
    check(&out[2], F32, &[], &[f64::NAN], Class::Exact, "max of all");
}

fn softmax_ref(x: &[f64], shape: &[usize], axis: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (m, _) = reduce_ref(
        x,
        shape,
        &[axis as isize],
        true,
        f64::NEG_INFINITY,
        f64::max,
    );
    let mut kept = shape.to_vec();
    kept[axis] = 1;
    let mb = broadcast(&m, &kept, shape);
    let e: Vec<f64> = x.iter().zip(&mb).map(|(v, m)| (v - m).exp()).collect();
    let (s, _) = reduce_ref(&e, shape, &[axis as isize], true, 0.0, |a, b| a + b);
    let sb = broadcast(&s, &kept, shape);
    let soft = e.iter().zip(&sb).map(|(e, s)| e / s).collect();
    let logsoft = x
        .iter()
        .zip(&mb)
        .zip(&sb)
        .map(|((v, m), s)| v - m - s.ln())
        .collect();
    let lse = m.iter().zip(&s).map(|(m, s)| m + s.ln()).collect();
    (soft, logsoft, lse)
}

#[test]
fn softmax_log_softmax_logsumexp_are_stable_for_large_inputs() {
    let mut rng = Rng::new(44);
    for dtype in [F32, F64, BF16] {
        for (shape, axis) in [(&[3, 7][..], 1isize), (&[6, 1, 5][..], 0), (&[129][..], -1)] {
            // Offsets of +-1000 overflow a naive exp in every float dtype.
            let x = HostTensor::from_fn(spec(shape, dtype), |i| {
                let base = [1000.0, -1000.0, 0.0][i % 3];
                base + rng.uniform(-8.0, 8.0)
            });
            let out = run(
                |t| {
                    vec![
                        t[0].softmax(axis),
                        t[0].log_softmax(axis),
                        t[0].logsumexp(axis),
                    ]
                },
                &[&x],
            );
            let a = axis.rem_euclid(shape.len() as isize) as usize;
            let (soft, logsoft, lse) = softmax_ref(&x.to_f64_vec(), shape, a);
            let what = format!("{dtype}{shape:?} axis {axis}");
            let tr = tol(dtype, Class::Transcendental);
            assert_eq!(out[0].shape(), shape);
            assert_close_tol(&out[0], &soft, tr, &format!("softmax {what}"));
            let s: Vec<f64> = {
                let (w, _) =
                    reduce_ref(&out[0].to_f64_vec(), shape, &[axis], false, 0.0, |p, q| {
                        p + q
                    });
                w
            };
            assert!(
                s.iter().all(|v| (v - 1.0).abs() < 2e-2),
                "softmax rows sum to 1: {s:?}"
            );
            // log-softmax values reach -1000s: relative tolerance plus an
            // absolute one for the subtraction of two large numbers.
            let lt = Tol {
                rtol: tr.rtol,
                atol: tr.atol + tr.rtol * 2000.0,
            };
            assert_close_tol(&out[1], &logsoft, lt, &format!("log_softmax {what}"));
            let mut sq = shape.to_vec();
            sq.remove(a);
            assert_eq!(out[2].shape(), &sq[..]);
            assert_close_tol(&out[2], &lse, lt, &format!("logsumexp {what}"));
        }
    }
}
