//! `matmul`, `matmul_acc` and `dot_general` against an `f64` reference
//! contraction, over odd sizes, batch broadcasting, vectors and precisions.

mod common;

use common::*;
use tessel_dsl::{DType, DotDims, HostTensor, Precision, BF16, F16, F32, F64, S32};

/// A general contraction on the host: `dot_general` semantics in `f64`.
fn dot_ref(a: &HostTensor, b: &HostTensor, d: &DotDims) -> (Vec<f64>, Vec<usize>) {
    let (sa, sb) = (a.shape(), b.shape());
    let free = |s: &[usize], batch: &[usize], con: &[usize]| -> Vec<usize> {
        (0..s.len())
            .filter(|i| !batch.contains(i) && !con.contains(i))
            .collect()
    };
    let (fa, fb) = (
        free(sa, &d.lhs_batch, &d.lhs_contract),
        free(sb, &d.rhs_batch, &d.rhs_contract),
    );
    let bshape: Vec<usize> = d.lhs_batch.iter().map(|&i| sa[i]).collect();
    let cshape: Vec<usize> = d.lhs_contract.iter().map(|&i| sa[i]).collect();
    let mut out: Vec<usize> = bshape.clone();
    out.extend(fa.iter().map(|&i| sa[i]));
    out.extend(fb.iter().map(|&i| sb[i]));
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let nc: usize = cshape.iter().product();
    let v = (0..out.iter().product())
        .map(|o| {
            let idx = unravel(o, &out);
            let (bi, rest) = idx.split_at(bshape.len());
            let (ai_free, bi_free) = rest.split_at(fa.len());
            let mut ia = vec![0; sa.len()];
            let mut ib = vec![0; sb.len()];
            for (k, (&x, &y)) in d.lhs_batch.iter().zip(&d.rhs_batch).enumerate() {
                ia[x] = bi[k];
                ib[y] = bi[k];
            }
            for (k, &x) in fa.iter().enumerate() {
                ia[x] = ai_free[k];
            }
            for (k, &y) in fb.iter().enumerate() {
                ib[y] = bi_free[k];
            }
            (0..nc)
                .map(|c| {
                    let ci = unravel(c, &cshape);
                    for (k, (&x, &y)) in d.lhs_contract.iter().zip(&d.rhs_contract).enumerate() {
                        ia[x] = ci[k];
                        ib[y] = ci[k];
                    }
                    av[ravel(&ia, sa)] * bv[ravel(&ib, sb)]
                })
                .sum()
        })
        .collect();
    (v, out)
}

/// numpy `matmul` on the host, through [`dot_ref`] after broadcasting batch axes.
fn matmul_ref(a: &HostTensor, b: &HostTensor) -> (Vec<f64>, Vec<usize>) {
    let (ra, rb) = (a.shape().len(), b.shape().len());
    let a2 = if ra == 1 {
        a.clone().reshape([1, a.shape()[0]]).unwrap()
    } else {
        a.clone()
    };
    let b2 = if rb == 1 {
        b.clone().reshape([b.shape()[0], 1]).unwrap()
    } else {
        b.clone()
    };
    let (sa, sb) = (a2.shape().to_vec(), b2.shape().to_vec());
    let batch = broadcast_shape(&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let grow = |t: &HostTensor, s: &[usize]| {
        let mut target = batch.clone();
        target.extend_from_slice(&s[s.len() - 2..]);
        let v = broadcast(&t.to_f64_vec(), s, &target);
        tensor(&v, &target, F64)
    };
    let (a3, b3) = (grow(&a2, &sa), grow(&b2, &sb));
    let nb = batch.len();
    let d = DotDims {
        lhs_batch: (0..nb).collect(),
        rhs_batch: (0..nb).collect(),
        lhs_contract: vec![nb + 1],
        rhs_contract: vec![nb],
    };
    let (v, mut shape) = dot_ref(&a3, &b3, &d);
    // Drop the axes that stood in for vectors.
    if rb == 1 {
        shape.remove(nb + 1);
    }
    if ra == 1 {
        shape.remove(nb);
    }
    (v, shape)
}

fn dot_tol(dtype: DType, k: usize) -> Tol {
    // Terms are products of values in [-1, 1).
    accumulate_tol(dtype, k, 1.0)
}

#[test]
fn matmul_2d_odd_sizes() {
    let mut rng = Rng::new(50);
    for dtype in [F32, F64, BF16, F16, S32] {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (33, 17, 9), (2, 3, 4), (1, 64, 3)] {
            let (lo, hi) = if dtype.is_float() {
                (-1.0, 1.0)
            } else {
                (-9.0, 9.0)
            };
            let a = random(&mut rng, &[m, k], dtype, lo, hi);
            let b = random(&mut rng, &[k, n], dtype, lo, hi);
            let out = run1(|t| t[0].matmul(t[1]), &[&a, &b]);
            let (w, s) = matmul_ref(&a, &b);
            assert_eq!(s, [m, n]);
            assert_eq!(out.dtype(), dtype);
            assert_eq!(out.shape(), &s[..]);
            assert_close_tol(&out, &w, dot_tol(dtype, k), &format!("{dtype} {m}x{k}x{n}"));
        }
    }
}

#[test]
fn batched_matmul_with_batch_broadcasting_and_vectors() {
    let mut rng = Rng::new(51);
    let cases: [(&[usize], &[usize], &[usize]); 11] = [
        (&[2, 3, 4], &[2, 4, 5], &[2, 3, 5]),
        (&[4, 1, 3, 5], &[2, 5, 6], &[4, 2, 3, 6]),
        (&[3, 4], &[2, 4, 5], &[2, 3, 5]),
        (&[3, 1, 2, 7], &[1, 5, 7, 3], &[3, 5, 2, 3]),
        (&[4], &[4, 5], &[5]),
        (&[3, 4], &[4], &[3]),
        (&[7], &[7], &[]),
        (&[4], &[2, 4, 5], &[2, 5]),
        (&[2, 3, 4], &[4], &[2, 3]),
        // A layer's weight: no batch axes on the right (one dot, no broadcast).
        (&[2, 3, 4], &[4, 5], &[2, 3, 5]),
        (&[2, 1, 3, 7], &[7, 1], &[2, 1, 3, 1]),
    ];
    for (sa, sb, want_shape) in cases {
        let a = random(&mut rng, sa, F32, -1.0, 1.0);
        let b = random(&mut rng, sb, F32, -1.0, 1.0);
        let out = run1(|t| t[0].matmul(t[1]), &[&a, &b]);
        let (w, s) = matmul_ref(&a, &b);
        assert_eq!(s, want_shape, "reference shape {sa:?} x {sb:?}");
        assert_eq!(out.shape(), want_shape, "{sa:?} x {sb:?}");
        let k = if sb.len() == 1 {
            sb[0]
        } else {
            sb[sb.len() - 2]
        };
        assert_close_tol(&out, &w, dot_tol(F32, k), &format!("{sa:?} x {sb:?}"));
    }
}

type DotCase = (&'static [usize], &'static [usize], DotDims, Vec<usize>);

#[test]
fn dot_general_with_explicit_dimension_numbers() {
    let mut rng = Rng::new(52);
    // (lhs shape, rhs shape, dimension numbers, result shape)
    let cases: Vec<DotCase> = vec![
        // Batch axis 0, two contracting axes in different orders.
        (
            &[2, 3, 4, 5],
            &[2, 5, 4, 6],
            DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![2, 3],
                rhs_contract: vec![2, 1],
            },
            vec![2, 3, 6],
        ),
        // Batch axes not leading on the right-hand side.
        (
            &[3, 2, 7],
            &[7, 3, 2, 4],
            DotDims {
                lhs_batch: vec![0, 1],
                rhs_batch: vec![1, 2],
                lhs_contract: vec![2],
                rhs_contract: vec![0],
            },
            vec![3, 2, 4],
        ),
        // No contraction: an outer product.
        (&[3], &[4], DotDims::default(), vec![3, 4]),
        // Contract everything: a scalar.
        (
            &[3, 5],
            &[5, 3],
            DotDims {
                lhs_contract: vec![0, 1],
                rhs_contract: vec![1, 0],
                ..DotDims::default()
            },
            vec![],
        ),
        // Contract the leading axes (a transposed-lhs matmul).
        (
            &[6, 3],
            &[6, 5],
            DotDims {
                lhs_contract: vec![0],
                rhs_contract: vec![0],
                ..DotDims::default()
            },
            vec![3, 5],
        ),
    ];
    for dtype in [F32, F64] {
        for (sa, sb, dims, want_shape) in &cases {
            let a = random(&mut rng, sa, dtype, -1.0, 1.0);
            let b = random(&mut rng, sb, dtype, -1.0, 1.0);
            let d = dims.clone();
            let out = run1(
                move |t| t[0].dot_general(t[1], d.clone(), None, None),
                &[&a, &b],
            );
            let (w, s) = dot_ref(&a, &b, dims);
            assert_eq!(&s, want_shape);
            assert_eq!(out.shape(), &want_shape[..]);
            let k: usize = dims.lhs_contract.iter().map(|&i| sa[i]).product();
            assert_close_tol(&out, &w, dot_tol(dtype, k), &format!("{dtype} {dims:?}"));
        }
    }
}

#[test]
fn matmul_acc_accumulates_bf16_inputs_in_f32() {
    let mut rng = Rng::new(53);
    for (sa, sb) in [
        (&[7, 33][..], &[33, 5][..]),
        (&[2, 3, 64], &[64, 4]),
        (&[17], &[17, 3]),
    ] {
        let a = random(&mut rng, sa, BF16, -1.0, 1.0);
        let b = random(&mut rng, sb, BF16, -1.0, 1.0);
        let out = run(
            |t| {
                vec![
                    t[0].matmul_acc(t[1], F32),
                    t[0].matmul(t[1]),
                    t[0].cast(F32).matmul(t[1].cast(F32)),
                ]
            },
            &[&a, &b],
        );
        let (w, s) = matmul_ref(&a, &b);
        let k = sb[0];
        assert_eq!(
            out[0].dtype(),
            F32,
            "matmul_acc returns the accumulation type"
        );
        assert_eq!(out[0].shape(), &s[..]);
        // Exact products of bf16 values, summed in f32: f32 accuracy.
        assert_close_tol(&out[0], &w, dot_tol(F32, k), &format!("matmul_acc {sa:?}"));
        assert_close_tol(
            &out[0],
            &out[2].to_f64_vec(),
            dot_tol(F32, k),
            "acc = f32 matmul",
        );
        assert_eq!(out[1].dtype(), BF16);
        assert_close_tol(
            &out[1],
            &w,
            dot_tol(BF16, k),
            &format!("bf16 matmul {sa:?}"),
        );
    }
}

#[test]
fn every_precision_compiles_and_agrees_on_cpu() {
    let mut rng = Rng::new(54);
    let a = random(&mut rng, &[5, 11], F32, -1.0, 1.0);
    let b = random(&mut rng, &[11, 3], F32, -1.0, 1.0);
    let d = DotDims {
        lhs_contract: vec![1],
        rhs_contract: vec![0],
        ..DotDims::default()
    };
    let precisions = [
        None,
        Some(Precision::Default),
        Some(Precision::High),
        Some(Precision::Highest),
    ];
    let out = run(
        |t| {
            precisions
                .iter()
                .map(|&p| t[0].dot_general(t[1], d.clone(), p, None))
                .collect::<Vec<_>>()
        },
        &[&a, &b],
    );
    let (w, _) = dot_ref(&a, &b, &d);
    for (o, p) in out.iter().zip(precisions) {
        assert_close_tol(o, &w, dot_tol(F32, 11), &format!("{p:?}"));
        assert_eq!(
            o.as_bytes(),
            out[0].as_bytes(),
            "CPU computes every precision alike"
        );
    }
    for (p, name) in [
        (Precision::Default, "DEFAULT"),
        (Precision::High, "HIGH"),
        (Precision::Highest, "HIGHEST"),
    ] {
        let text = lower(
            |t| t[0].dot_general(t[1], d.clone(), Some(p), None),
            &[a.spec().clone(), b.spec().clone()],
        );
        assert!(
            text.contains(&format!("#stablehlo<precision {name}>")),
            "{text}"
        );
    }
}
