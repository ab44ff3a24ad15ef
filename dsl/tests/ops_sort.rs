//! `sort`, `argsort`, `sort_with` and `top_k` against stable host sorts.

mod common;

use std::cmp::Ordering;

use common::*;
use tessel_dsl::{DType, HostTensor, BF16, F32, S32, U32};

/// The lines of `shape` along `axis`: for each, the flat indices of its elements.
fn lines(shape: &[usize], axis: usize) -> Vec<Vec<usize>> {
    let mut outer = shape.to_vec();
    outer[axis] = 1;
    (0..outer.iter().product())
        .map(|o| {
            let mut idx = unravel(o, &outer);
            (0..shape[axis])
                .map(|k| {
                    idx[axis] = k;
                    ravel(&idx, shape)
                })
                .collect()
        })
        .collect()
}

/// Total order with NaN after +inf (what a TOTALORDER comparison gives for positive NaNs).
fn total(a: f64, b: f64) -> Ordering {
    a.total_cmp(&b)
}

/// Stable sort along `axis`: (sorted values, source positions along the axis).
fn sort_ref(x: &[f64], shape: &[usize], axis: usize, descending: bool) -> (Vec<f64>, Vec<f64>) {
    let mut vals = vec![0.0; x.len()];
    let mut pos = vec![0.0; x.len()];
    for line in lines(shape, axis) {
        let mut order: Vec<usize> = (0..line.len()).collect();
        order.sort_by(|&i, &j| {
            let o = total(x[line[i]], x[line[j]]);
            if descending {
                o.reverse()
            } else {
                o
            }
        });
        for (k, &src) in order.iter().enumerate() {
            vals[line[k]] = x[line[src]];
            pos[line[k]] = src as f64;
        }
    }
    (vals, pos)
}

#[test]
fn sort_and_argsort_along_several_axes_are_stable() {
    let mut rng = Rng::new(70);
    for dtype in [F32, S32, U32, BF16] {
        for shape in [&[5, 7][..], &[3, 4, 6], &[129]] {
            // Few distinct values (many ties); negative zeros and NaNs for f32.
            let x = HostTensor::from_fn(spec(shape, dtype), |_| {
                let k = rng.int(0, 7) as f64;
                match dtype {
                    DType::U32 => k * 6e8,
                    DType::F32 if k == 7.0 => f64::NAN,
                    DType::F32 if k == 6.0 => -0.0,
                    _ => k - 3.0,
                }
            });
            let r = shape.len() as isize;
            let axes: Vec<isize> = (0..r).chain([-1]).collect();
            let out = run(
                |t| {
                    let mut v = Vec::new();
                    for &a in &axes {
                        for desc in [false, true] {
                            v.extend([t[0].sort(a, desc), t[0].argsort(a, desc)]);
                        }
                    }
                    v
                },
                &[&x],
            );
            let mut o = out.iter();
            for &a in &axes {
                for desc in [false, true] {
                    let what = format!("{dtype}{shape:?} axis {a} descending {desc}");
                    let (vals, pos) =
                        sort_ref(&x.to_f64_vec(), shape, a.rem_euclid(r) as usize, desc);
                    let got = o.next().unwrap();
                    check(
                        got,
                        dtype,
                        shape,
                        &vals,
                        Class::Exact,
                        &format!("sort {what}"),
                    );
                    // -0.0 sorts before +0.0 in a total order.
                    let signs: Vec<bool> = got
                        .to_f64_vec()
                        .iter()
                        .map(|v| v.is_sign_negative())
                        .collect();
                    let want: Vec<bool> = vals.iter().map(|v| v.is_sign_negative()).collect();
                    assert_eq!(signs, want, "signs of zeros, {what}");
                    check(
                        o.next().unwrap(),
                        S32,
                        shape,
                        &pos,
                        Class::Exact,
                        &format!("argsort {what}"),
                    );
                }
            }
        }
    }
}

#[test]
fn sort_with_permutes_values_by_keys() {
    let mut rng = Rng::new(71);
    let shape = [4, 9];
    let keys = random(&mut rng, &shape, S32, 0.0, 3.0);
    let vals = random(&mut rng, &shape, F32, -9.0, 9.0);
    let out = run(
        |t| {
            let (k0, v0) = t[0].sort_with(t[1], 1, false);
            let (k1, v1) = t[0].sort_with(t[1], 0, true);
            vec![k0, v0, k1, v1]
        },
        &[&keys, &vals],
    );
    let (kv, vv) = (keys.to_f64_vec(), vals.to_f64_vec());
    for (k, (axis, desc)) in [(1, false), (0, true)].into_iter().enumerate() {
        let (sk, pos) = sort_ref(&kv, &shape, axis, desc);
        check(&out[2 * k], S32, &shape, &sk, Class::Exact, "keys");
        // Each value moves with its key (stable among equal keys).
        let w: Vec<f64> = (0..36)
            .map(|i| {
                let mut idx = unravel(i, &shape);
                idx[axis] = pos[i] as usize;
                vv[ravel(&idx, &shape)]
            })
            .collect();
        check(
            &out[2 * k + 1],
            F32,
            &shape,
            &w,
            Class::Exact,
            &format!("values axis {axis}"),
        );
    }
}

#[test]
fn top_k_values_and_indices() {
    for dtype in [F32, S32, BF16] {
        for shape in [&[10][..], &[4, 9], &[2, 3, 17]] {
            let n = *shape.last().unwrap();
            // Distinct values per row, so the indices are unambiguous.
            let x =
                HostTensor::from_fn(spec(shape, dtype), |i| ((i * 37 + 11) % 101) as f64 - 50.0);
            for k in [1, 3, n] {
                let out = run(
                    |t| {
                        let (v, i) = t[0].top_k(k);
                        vec![v, i]
                    },
                    &[&x],
                );
                let xv = x.to_f64_vec();
                let (mut wv, mut wi) = (Vec::new(), Vec::new());
                for row in xv.chunks(n) {
                    let mut order: Vec<usize> = (0..n).collect();
                    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                    wv.extend(order[..k].iter().map(|&j| row[j]));
                    wi.extend(order[..k].iter().map(|&j| j as f64));
                }
                let mut s = shape.to_vec();
                *s.last_mut().unwrap() = k;
                check(
                    &out[0],
                    dtype,
                    &s,
                    &wv,
                    Class::Exact,
                    &format!("top_k values {dtype}{shape:?} k={k}"),
                );
                check(
                    &out[1],
                    S32,
                    &s,
                    &wi,
                    Class::Exact,
                    &format!("top_k indices {dtype}{shape:?} k={k}"),
                );
            }
        }
    }
}

#[test]
fn top_k_ties_prefer_the_lower_index() {
    let x = tensor(&[1.0, 3.0, 2.0, 3.0, 1.0, 3.0, 0.0], &[7], F32);
    let out = run(
        |t| {
            let (v, i) = t[0].top_k(4);
            vec![v, i]
        },
        &[&x],
    );
    check(
        &out[0],
        F32,
        &[4],
        &[3.0, 3.0, 3.0, 2.0],
        Class::Exact,
        "values",
    );
    check(
        &out[1],
        S32,
        &[4],
        &[1.0, 3.0, 5.0, 2.0],
        Class::Exact,
        "indices",
    );
}
