//! Shape ops (broadcast, reshape, transpose, static and dynamic slices,
//! concat, pad) against index-arithmetic references.

mod common;

use common::*;
use tessel_dsl::{concat, HostTensor, Tensor, BF16, F32, PRED, S32, S8, U8};

/// `x` (of `shape`) with axes permuted: result axis `i` is axis `perm[i]`.
fn transpose_ref(x: &[f64], shape: &[usize], perm: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let n = x.len();
    let v = (0..n)
        .map(|i| {
            let o = unravel(i, &out);
            let mut src = vec![0; shape.len()];
            for (k, &p) in perm.iter().enumerate() {
                src[p] = o[k];
            }
            x[ravel(&src, shape)]
        })
        .collect();
    (v, out)
}

/// Elements at `start + k * stride` per axis (stopping before `limit`).
fn slice_ref(
    x: &[f64],
    shape: &[usize],
    start: &[usize],
    limit: &[usize],
    step: &[usize],
) -> (Vec<f64>, Vec<usize>) {
    let out: Vec<usize> = (0..shape.len())
        .map(|a| (limit[a] - start[a]).div_ceil(step[a]))
        .collect();
    let v = (0..out.iter().product())
        .map(|i| {
            let o = unravel(i, &out);
            let src: Vec<usize> = (0..shape.len())
                .map(|a| start[a] + o[a] * step[a])
                .collect();
            x[ravel(&src, shape)]
        })
        .collect();
    (v, out)
}

/// XLA pad: `low`/`high` (negative crops) around and `interior` between elements.
fn pad_ref(
    x: &[f64],
    shape: &[usize],
    value: f64,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
) -> (Vec<f64>, Vec<usize>) {
    let out: Vec<usize> = (0..shape.len())
        .map(|a| {
            let d = shape[a] as i64;
            (low[a] + high[a] + d + (d - 1).max(0) * interior[a]) as usize
        })
        .collect();
    let v = (0..out.iter().product())
        .map(|i| {
            let o = unravel(i, &out);
            let mut src = Vec::new();
            for a in 0..shape.len() {
                let p = o[a] as i64 - low[a];
                let s = interior[a] + 1;
                if p < 0 || p % s != 0 || p / s >= shape[a] as i64 {
                    return value;
                }
                src.push((p / s) as usize);
            }
            x[ravel(&src, shape)]
        })
        .collect();
    (v, out)
}

fn concat_ref(parts: &[&HostTensor], axis: usize) -> (Vec<f64>, Vec<usize>) {
    let mut out = parts[0].shape().to_vec();
    out[axis] = parts.iter().map(|p| p.shape()[axis]).sum();
    let v = (0..out.iter().product())
        .map(|i| {
            let mut o = unravel(i, &out);
            for p in parts {
                if o[axis] < p.shape()[axis] {
                    return p.to_f64_vec()[ravel(&o, p.shape())];
                }
                o[axis] -= p.shape()[axis];
            }
            unreachable!()
        })
        .collect();
    (v, out)
}

#[test]
fn broadcast_to_and_broadcast_in_dim() {
    let mut rng = Rng::new(30);
    for dtype in [F32, S32, PRED, BF16] {
        let a = random(&mut rng, &[3, 1], dtype, -9.0, 9.0);
        let s = random(&mut rng, &[], dtype, -9.0, 9.0);
        let v = random(&mut rng, &[5], dtype, -9.0, 9.0);
        let m = random(&mut rng, &[2, 3], dtype, -9.0, 9.0);
        let out = run(
            |t| {
                vec![
                    t[0].broadcast_to([2, 3, 4]),
                    t[1].broadcast_to([2, 2]),
                    t[2].broadcast_to(vec![3, 5]),
                    t[2].broadcast_in_dim([5, 4], &[0]),
                    t[3].broadcast_in_dim([2, 5, 3], &[0, 2]),
                    t[0].broadcast_in_dim([4, 3, 2], &[1, 2]),
                ]
            },
            &[&a, &s, &v, &m],
        );
        let what = format!("{dtype}");
        let e = Class::Exact;
        check(
            &out[0],
            dtype,
            &[2, 3, 4],
            &broadcast(&a.to_f64_vec(), &[3, 1], &[2, 3, 4]),
            e,
            &what,
        );
        check(
            &out[1],
            dtype,
            &[2, 2],
            &broadcast(&s.to_f64_vec(), &[], &[2, 2]),
            e,
            &what,
        );
        check(
            &out[2],
            dtype,
            &[3, 5],
            &broadcast(&v.to_f64_vec(), &[5], &[3, 5]),
            e,
            &what,
        );
        // [5] -> [5, 4] along axis 0: element (i, j) is v[i].
        let vv = v.to_f64_vec();
        let w: Vec<f64> = (0..20).map(|i| vv[i / 4]).collect();
        check(&out[3], dtype, &[5, 4], &w, e, &what);
        let mv = m.to_f64_vec();
        let w: Vec<f64> = (0..30).map(|i| mv[(i / 15) * 3 + i % 3]).collect();
        check(&out[4], dtype, &[2, 5, 3], &w, e, &what);
        // [3, 1] -> [4, 3, 2] with axes (1, 2): element (i, j, k) is a[j, 0].
        let av = a.to_f64_vec();
        let w: Vec<f64> = (0..24).map(|i| av[(i / 2) % 3]).collect();
        check(&out[5], dtype, &[4, 3, 2], &w, e, &what);
    }
}

#[test]
fn reshape_expand_dims_squeeze_flatten_and_unflatten() {
    let mut rng = Rng::new(31);
    let x = random(&mut rng, &[2, 3, 4], F32, -9.0, 9.0);
    let one = random(&mut rng, &[1], S32, -9.0, 9.0);
    let out = run(
        |t| {
            vec![
                t[0].reshape(&[-1, 4]),
                t[0].reshape(&[6, -1]),
                t[0].reshape(&[24]),
                t[0].reshape(&[4, 1, -1, 2]),
                t[1].reshape(&[]),
                t[1].reshape(&[]).reshape(&[1, 1, 1]),
                t[0].expand_dims(0),
                t[0].expand_dims(-1),
                t[0].expand_dims(2),
                t[0].expand_dims(1).squeeze(1),
                t[1].squeeze(0),
                t[1].reshape(&[1, 1]).squeeze(-1),
                t[0].unflatten(-1, &[2, 2]),
                t[0].unflatten(1, &[1, 3, 1]),
                t[0].flatten(0, 1),
                t[0].flatten(-2, -1),
                t[0].unflatten(2, &[2, 2]).flatten(-3, -1),
            ]
        },
        &[&x, &one],
    );
    let shapes: [&[usize]; 17] = [
        &[6, 4],
        &[6, 4],
        &[24],
        &[4, 1, 3, 2],
        &[],
        &[1, 1, 1],
        &[1, 2, 3, 4],
        &[2, 3, 4, 1],
        &[2, 3, 1, 4],
        &[2, 3, 4],
        &[],
        &[1],
        &[2, 3, 2, 2],
        &[2, 1, 3, 1, 4],
        &[6, 4],
        &[2, 12],
        &[2, 12],
    ];
    for (i, (o, s)) in out.iter().zip(shapes).enumerate() {
        let src = if (4..=5).contains(&i) || (10..12).contains(&i) {
            &one
        } else {
            &x
        };
        check(
            o,
            src.dtype(),
            s,
            &src.to_f64_vec(),
            Class::Exact,
            &format!("reshape {i}"),
        );
    }
}

#[test]
fn transpose_every_3d_permutation_and_t() {
    let mut rng = Rng::new(32);
    let perms: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for dtype in [F32, S8] {
        let x = random(&mut rng, &[2, 3, 5], dtype, -9.0, 9.0);
        let m = random(&mut rng, &[3, 7], dtype, -9.0, 9.0);
        let v = random(&mut rng, &[7], dtype, -9.0, 9.0);
        let out = run(
            |t| {
                let mut r: Vec<Tensor> = perms.iter().map(|p| t[0].transpose(p)).collect();
                r.extend([t[0].t(), t[1].t(), t[2].t(), t[1].t().t()]);
                r
            },
            &[&x, &m, &v],
        );
        for (o, p) in out.iter().zip(&perms) {
            let (w, s) = transpose_ref(&x.to_f64_vec(), &[2, 3, 5], p);
            check(o, dtype, &s, &w, Class::Exact, &format!("transpose {p:?}"));
        }
        let (w, s) = transpose_ref(&x.to_f64_vec(), &[2, 3, 5], &[0, 2, 1]);
        check(&out[6], dtype, &s, &w, Class::Exact, "t 3-D");
        let (w, s) = transpose_ref(&m.to_f64_vec(), &[3, 7], &[1, 0]);
        check(&out[7], dtype, &s, &w, Class::Exact, "t 2-D");
        check(
            &out[8],
            dtype,
            &[7],
            &v.to_f64_vec(),
            Class::Exact,
            "t 1-D is the identity",
        );
        check(
            &out[9],
            dtype,
            &[3, 7],
            &m.to_f64_vec(),
            Class::Exact,
            "t t",
        );
    }
}

#[test]
fn strided_slices_and_narrow() {
    let mut rng = Rng::new(33);
    let x = random(&mut rng, &[7, 9], F32, -9.0, 9.0);
    let y = random(&mut rng, &[3, 4, 5], U8, 0.0, 200.0);
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[1, 2], &[7, 9], &[2, 3]),
        (&[0, 0], &[7, 9], &[1, 1]),
        (&[6, 8], &[7, 9], &[5, 5]),
        (&[2, 3], &[2, 9], &[1, 4]),
    ];
    let out = run(
        |t| {
            let mut r: Vec<Tensor> = cases
                .iter()
                .map(|(s, l, st)| t[0].slice(s, l, st))
                .collect();
            r.push(t[1].slice(&[1, 0, 1], &[3, 4, 5], &[1, 3, 2]));
            r.push(t[0].slice_axis(1, 2, 7));
            r.push(t[0].slice_axis(-2, 6, 7));
            r.push(t[1].slice_axis(-1, 0, 1));
            r.push(t[0].narrow(1, 2, 5));
            r.push(t[1].narrow(-2, 1, 3));
            r
        },
        &[&x, &y],
    );
    for (i, (s, l, st)) in cases.iter().enumerate() {
        let (w, sh) = slice_ref(&x.to_f64_vec(), &[7, 9], s, l, st);
        check(
            &out[i],
            F32,
            &sh,
            &w,
            Class::Exact,
            &format!("slice {s:?}..{l:?} step {st:?}"),
        );
    }
    let (w, sh) = slice_ref(
        &y.to_f64_vec(),
        &[3, 4, 5],
        &[1, 0, 1],
        &[3, 4, 5],
        &[1, 3, 2],
    );
    check(&out[4], U8, &sh, &w, Class::Exact, "3-D strided slice");
    let (w, sh) = slice_ref(&x.to_f64_vec(), &[7, 9], &[0, 2], &[7, 7], &[1, 1]);
    check(&out[5], F32, &sh, &w, Class::Exact, "slice_axis axis 1");
    let (w, sh) = slice_ref(&x.to_f64_vec(), &[7, 9], &[6, 0], &[7, 9], &[1, 1]);
    check(&out[6], F32, &sh, &w, Class::Exact, "slice_axis axis -2");
    let (w, sh) = slice_ref(
        &y.to_f64_vec(),
        &[3, 4, 5],
        &[0, 0, 0],
        &[3, 4, 1],
        &[1, 1, 1],
    );
    check(&out[7], U8, &sh, &w, Class::Exact, "slice_axis axis -1");
    // narrow takes a length: 5 columns from 2 is slice_axis(1, 2, 7).
    assert_eq!(out[8].to_f64_vec(), out[5].to_f64_vec());
    let (w, sh) = slice_ref(
        &y.to_f64_vec(),
        &[3, 4, 5],
        &[0, 1, 0],
        &[3, 4, 5],
        &[1, 1, 1],
    );
    check(
        &out[9],
        U8,
        &sh,
        &w,
        Class::Exact,
        "narrow axis -2, length 3",
    );
}

/// Where XLA puts a dynamic window: `start` clamped into `0..=dim - size`.
fn clamp_start(start: i32, dim: usize, size: usize) -> usize {
    start.clamp(0, (dim - size) as i32) as usize
}

#[test]
fn dynamic_slice_and_update_with_traced_starts_clamp_out_of_range() {
    let mut rng = Rng::new(34);
    let shape = [6, 7];
    let x = random(&mut rng, &shape, F32, -9.0, 9.0);
    let u = random(&mut rng, &[2, 3], F32, 10.0, 20.0);
    let size = [2, 3];
    // The kernel is compiled once; the starts are runtime values.
    let starts = [(0, 0), (1, 2), (4, 4), (5, 6), (-3, 2), (100, -100), (4, 5)];
    let body = |t: &[Tensor]| {
        let s = [t[2], t[3]];
        vec![
            t[0].dynamic_slice(&s, &size),
            t[0].dynamic_update_slice(t[1], &s),
        ]
    };
    let k = tessel_dsl::kernel::Kernel::new(fresh_name("dyn"), body);
    for (r, c) in starts {
        let out = k.run(&device(), &[&x, &u, &s32(r), &s32(c)]).unwrap();
        let (r0, c0) = (clamp_start(r, 6, 2), clamp_start(c, 7, 3));
        let (w, sh) = slice_ref(
            &x.to_f64_vec(),
            &shape,
            &[r0, c0],
            &[r0 + 2, c0 + 3],
            &[1, 1],
        );
        check(
            &out[0],
            F32,
            &sh,
            &w,
            Class::Exact,
            &format!("dynamic_slice at ({r}, {c})"),
        );
        let mut w = x.to_f64_vec();
        let uv = u.to_f64_vec();
        for i in 0..2 {
            for j in 0..3 {
                w[(r0 + i) * 7 + c0 + j] = uv[i * 3 + j];
            }
        }
        check(
            &out[1],
            F32,
            &shape,
            &w,
            Class::Exact,
            &format!("dynamic_update_slice at ({r}, {c})"),
        );
    }
}

#[test]
fn concat_three_tensors_on_every_axis() {
    let mut rng = Rng::new(35);
    for dtype in [F32, S32, PRED] {
        for axis in [0isize, 1, 2, -1] {
            let a_ = axis.rem_euclid(3) as usize;
            let mk = |rng: &mut Rng, k: usize| {
                let mut s = vec![2, 3, 4];
                s[a_] = k;
                random(rng, &s, dtype, -9.0, 9.0)
            };
            let (a, b, c) = (mk(&mut rng, 1), mk(&mut rng, 3), mk(&mut rng, 2));
            let out = run1(|t| concat(&[t[0], t[1], t[2]], axis), &[&a, &b, &c]);
            let (w, s) = concat_ref(&[&a, &b, &c], a_);
            check(
                &out,
                dtype,
                &s,
                &w,
                Class::Exact,
                &format!("concat {dtype} axis {axis}"),
            );
        }
    }
}

#[test]
fn pad_with_interior_and_negative_edges() {
    let mut rng = Rng::new(36);
    let cases: [(&[i64], &[i64], &[i64]); 5] = [
        (&[1, 2], &[3, 0], &[0, 0]),
        (&[0, 0], &[0, 0], &[1, 2]),
        (&[2, 1], &[1, 2], &[1, 1]),
        (&[-1, 0], &[0, -2], &[0, 0]),
        (&[-1, 2], &[1, -3], &[2, 1]),
    ];
    for dtype in [F32, S32, BF16] {
        let x = random(&mut rng, &[3, 5], dtype, -9.0, 9.0);
        let pv = HostTensor::from_fn(spec(&[], dtype), |_| 7.0);
        let out = run(
            |t| {
                let mut r: Vec<Tensor> = cases
                    .iter()
                    .map(|(l, h, i)| t[0].pad(-1.0, l, h, i))
                    .collect();
                r.push(t[0].pad(t[1], &[1, 0], &[0, 1], &[1, 0]));
                r.push(t[0].pad_to_multiple(1, 4, 0.0));
                r.push(t[0].pad_to_multiple(0, 3, 5.0));
                r.push(t[0].pad_to_multiple(-1, 1, 5.0));
                r
            },
            &[&x, &pv],
        );
        let xv = x.to_f64_vec();
        for (i, (l, h, inner)) in cases.iter().enumerate() {
            let (w, s) = pad_ref(&xv, &[3, 5], -1.0, l, h, inner);
            check(
                &out[i],
                dtype,
                &s,
                &w,
                Class::Exact,
                &format!("pad {l:?} {h:?} {inner:?}"),
            );
        }
        let (w, s) = pad_ref(&xv, &[3, 5], 7.0, &[1, 0], &[0, 1], &[1, 0]);
        check(
            &out[5],
            dtype,
            &s,
            &w,
            Class::Exact,
            "pad with a traced value",
        );
        let (w, s) = pad_ref(&xv, &[3, 5], 0.0, &[0, 0], &[0, 3], &[0, 0]);
        check(&out[6], dtype, &s, &w, Class::Exact, "pad_to_multiple 4");
        check(
            &out[7],
            dtype,
            &[3, 5],
            &xv,
            Class::Exact,
            "already a multiple of 3",
        );
        check(&out[8], dtype, &[3, 5], &xv, Class::Exact, "multiple of 1");
    }
}
