//! Traced control flow: `while_loop`, `fori_loop`, `cond` and
//! `optimization_barrier`, with captured tensors, nesting and runtime
//! (traced) bounds and predicates, against plain Rust loops.

mod common;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{cond, fori_loop, optimization_barrier, while_loop, HostTensor, Tensor, F32, S32};

fn f32s(t: &HostTensor) -> Vec<f64> {
    t.to_f64_vec()
}

#[test]
fn while_loop_with_a_tuple_of_carried_tensors_and_a_traced_bound() {
    let x = tensor(&[0.5, -1.0, 2.0], &[3], F32);
    let k = Kernel::new(fresh_name("while"), |a: &[Tensor]| {
        let (i, y, acc) = while_loop(
            (Tensor::scalar(0.0, S32), a[0], Tensor::zeros([2, 2], F32)),
            |(i, _, _)| i.lt(a[1]),
            |(i, y, acc)| (i + 1, y * 2.0 + 1.0, acc + y.sum(&[0])),
        );
        (i, y, acc)
    });
    for n in [0, 1, 5] {
        let out = k.run(&device(), &[&x, &s32(n)]).unwrap();
        let (mut y, mut acc) = (f32s(&x), 0.0);
        for _ in 0..n {
            acc += y.iter().sum::<f64>();
            y = y.iter().map(|v| v * 2.0 + 1.0).collect();
        }
        check(&out[0], S32, &[], &[f64::from(n)], Class::Exact, "counter");
        check(&out[1], F32, &[3], &y, Class::Simple, "y");
        check(&out[2], F32, &[2, 2], &[acc; 4], Class::Simple, "acc");
    }
}

#[test]
fn fori_loop_with_static_and_traced_bounds() {
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let out = run(|a| fori_loop(0, 5, a[0], |i, c| c + i.cast(F32)), &[&x]);
    check(
        &out[0],
        F32,
        &[2],
        &[11.0, 12.0],
        Class::Exact,
        "static bounds",
    );
    let k = Kernel::new(fresh_name("fori"), |a: &[Tensor]| {
        fori_loop(a[1], a[2], (a[0], Tensor::scalar(0.0, S32)), |i, (c, n)| {
            (c * 2.0 + i.cast(F32), n + 1)
        })
    });
    for (lo, hi) in [(2, 7), (5, 5), (6, 3), (-2, 1)] {
        let out = k.run(&device(), &[&x, &s32(lo), &s32(hi)]).unwrap();
        let mut c = f32s(&x);
        for i in lo..hi {
            c = c.iter().map(|v| v * 2.0 + f64::from(i)).collect();
        }
        check(
            &out[0],
            F32,
            &[2],
            &c,
            Class::Simple,
            &format!("{lo}..{hi}"),
        );
        check(
            &out[1],
            S32,
            &[],
            &[f64::from((hi - lo).max(0))],
            Class::Exact,
            "trip count",
        );
    }
}

#[test]
fn loop_bodies_use_captured_outer_tensors() {
    let mut rng = Rng::new(80);
    let x = random(&mut rng, &[2, 3], F32, -1.0, 1.0);
    let w = random(&mut rng, &[3], F32, 0.5, 1.0);
    let b = random(&mut rng, &[2, 3], F32, -1.0, 1.0);
    let limit = tensor(&[3.0], &[], F32);
    let out = run(
        |a| {
            let (x, w, b, limit) = (a[0], a[1], a[2], a[3]);
            let y = fori_loop(0, 4, x, |_, c| c * w + b);
            // The condition captures `limit`, the body `w` (and returns a capture).
            let (n, z) = while_loop(
                (Tensor::scalar(0.0, F32), x),
                |(n, _)| n.lt(limit),
                |(n, z)| (n + 1.0, z + w),
            );
            let same = fori_loop(0, 2, x, |_, _| b);
            vec![y, n, z, same]
        },
        &[&x, &w, &b, &limit],
    );
    let (xv, wv, bv) = (f32s(&x), f32s(&w), f32s(&b));
    let mut y = xv.clone();
    for _ in 0..4 {
        y = (0..6).map(|i| y[i] * wv[i % 3] + bv[i]).collect();
    }
    check(
        &out[0],
        F32,
        &[2, 3],
        &y,
        Class::Simple,
        "fori with captures",
    );
    check(&out[1], F32, &[], &[3.0], Class::Exact, "while count");
    let z: Vec<f64> = (0..6).map(|i| xv[i] + 3.0 * wv[i % 3]).collect();
    check(
        &out[2],
        F32,
        &[2, 3],
        &z,
        Class::Simple,
        "while with captures in cond and body",
    );
    check(
        &out[3],
        F32,
        &[2, 3],
        &bv,
        Class::Exact,
        "body returning a capture",
    );
}

#[test]
fn nested_loops_capture_from_two_levels_up() {
    let x = tensor(&[1.0, -0.5, 0.25], &[3], F32);
    let k = Kernel::new(fresh_name("nested"), |a: &[Tensor]| {
        let (x, n) = (a[0], a[1]);
        fori_loop(0, n, Tensor::zeros([3], F32), |i, outer| {
            // `x` comes from the function body, `i` from the outer loop.
            fori_loop(0, 3, outer, |j, inner| inner + x * (i + j).cast(F32))
        })
    });
    for n in [0, 1, 4] {
        let out = k.run(&device(), &[&x, &s32(n)]).unwrap();
        let s: f64 = (0..n)
            .flat_map(|i| (0..3).map(move |j| f64::from(i + j)))
            .sum();
        let w: Vec<f64> = f32s(&x).iter().map(|v| v * s).collect();
        check(&out[0], F32, &[3], &w, Class::Simple, &format!("n = {n}"));
    }
}

#[test]
fn cond_with_a_data_dependent_predicate_returns_a_tuple() {
    let k = Kernel::new(fresh_name("cond"), |a: &[Tensor]| {
        let (x, w) = (a[0], a[1]);
        let s = x.sum(&[0]);
        let (y, t) = cond(s.gt(0.0), || (x * w, s + 1.0), || (x - w, s * 3.0));
        (y, t)
    });
    let w = tensor(&[2.0, 3.0, 4.0], &[3], F32);
    for xv in [[1.0, 2.0, -0.5], [-1.0, 0.5, -3.0]] {
        let x = tensor(&xv, &[3], F32);
        let out = k.run(&device(), &[&x, &w]).unwrap();
        let s: f64 = xv.iter().sum();
        let wv = f32s(&w);
        let (y, t): (Vec<f64>, f64) = if s > 0.0 {
            ((0..3).map(|i| xv[i] * wv[i]).collect(), s + 1.0)
        } else {
            ((0..3).map(|i| xv[i] - wv[i]).collect(), s * 3.0)
        };
        check(
            &out[0],
            F32,
            &[3],
            &y,
            Class::Simple,
            &format!("branch for sum {s}"),
        );
        check(&out[1], F32, &[], &[t], Class::Simple, "scalar result");
    }
}

#[test]
fn cond_inside_a_loop_and_a_loop_inside_cond() {
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let w = tensor(&[0.5, -1.0], &[2], F32);
    let k = Kernel::new(fresh_name("mixed"), |a: &[Tensor]| {
        let (x, w, flag) = (a[0], a[1], a[2]);
        // Even steps add the captured `w`, odd steps double.
        let y = fori_loop(0, 5, x, |i, c| cond((i % 2).eq(0), || c + w, || c * 2.0));
        // A loop inside a branch, capturing `w` through the branch.
        let z = cond(flag.gt(0), || fori_loop(0, 3, x, |_, c| c - w), || x * 10.0);
        vec![y, z]
    });
    for flag in [1, 0] {
        let out = k.run(&device(), &[&x, &w, &s32(flag)]).unwrap();
        let (xv, wv) = (f32s(&x), f32s(&w));
        let mut y = xv.clone();
        for i in 0..5 {
            y = (0..2)
                .map(|k| if i % 2 == 0 { y[k] + wv[k] } else { y[k] * 2.0 })
                .collect();
        }
        check(&out[0], F32, &[2], &y, Class::Simple, "cond in loop");
        let z: Vec<f64> = (0..2)
            .map(|k| {
                if flag > 0 {
                    xv[k] - 3.0 * wv[k]
                } else {
                    xv[k] * 10.0
                }
            })
            .collect();
        check(
            &out[1],
            F32,
            &[2],
            &z,
            Class::Simple,
            &format!("loop in cond, flag {flag}"),
        );
    }
}

#[test]
fn optimization_barrier_passes_values_through() {
    let x = tensor(&[1.0, 2.0, 3.0], &[3], F32);
    let i = tensor(&[7.0], &[1], S32);
    let out = run(
        |a| {
            let (p, q) = optimization_barrier((a[0] * 2.0, a[1] + 1));
            let r = optimization_barrier(p + 1.0);
            vec![r, q, optimization_barrier(vec![a[0]]).remove(0)]
        },
        &[&x, &i],
    );
    check(
        &out[0],
        F32,
        &[3],
        &[3.0, 5.0, 7.0],
        Class::Exact,
        "barrier of a tuple",
    );
    check(&out[1], S32, &[1], &[8.0], Class::Exact, "second value");
    check(
        &out[2],
        F32,
        &[3],
        &[1.0, 2.0, 3.0],
        Class::Exact,
        "barrier of a Vec",
    );
}

#[test]
fn loops_carry_vecs_and_arrays() {
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let out = run(
        |a| {
            let v = fori_loop(0, 3, vec![a[0], a[0] * 0.0], |_, v| {
                vec![v[0] * 2.0, v[1] + v[0]]
            });
            let [p, q] = fori_loop(0, 2, [a[0], a[0]], |i, [p, q]| [q, p + i.cast(F32)]);
            vec![v[0], v[1], p, q]
        },
        &[&x],
    );
    check(
        &out[0],
        F32,
        &[2],
        &[8.0, 16.0],
        Class::Exact,
        "vec carry 0",
    );
    check(
        &out[1],
        F32,
        &[2],
        &[7.0, 14.0],
        Class::Exact,
        "vec carry 1",
    );
    // (p, q): (x, x) -> (x, x + 0) -> (x, x + 1).
    check(
        &out[2],
        F32,
        &[2],
        &[1.0, 2.0],
        Class::Exact,
        "array carry 0",
    );
    check(
        &out[3],
        F32,
        &[2],
        &[2.0, 3.0],
        Class::Exact,
        "array carry 1",
    );
}
