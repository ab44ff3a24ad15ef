//! einsum and einsum1 against a direct f64 summation over every label
//! assignment: matmul, batched and attention-shaped products, transposed
//! outputs, outer products, reductions, diagonals and traces, implicit
//! outputs, integer, f64, bf16, f16 and fp8 dtypes (tolerances in `common::tol`; f32
//! sums of up to 130 terms stay within 1e-5 relative), the emitted
//! program, and malformed equations as typed kernel errors.

extern crate tessel_dsl as tessel;

mod common;

use std::collections::BTreeMap;

use common::{assert_close, dev, kernel_error, random, tol, Tol};
use tessel::prelude::*;
use tessel_kernels::einsum::{einsum, einsum1};

/// `eq` (explicit `->` form) evaluated by summing over every assignment of
/// its labels; gives the result and its shape.
fn reference(eq: &str, operands: &[(&[f64], &[usize])]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, out) = eq
        .split_once("->")
        .expect("references use explicit outputs");
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut extent = BTreeMap::new();
    for (t, (_, shape)) in terms.iter().zip(operands) {
        for (&l, &n) in t.iter().zip(shape.iter()) {
            extent.insert(l, n);
        }
    }
    let labels: Vec<char> = extent.keys().copied().collect();
    let out_shape: Vec<usize> = out.iter().map(|l| extent[l]).collect();
    let mut result = vec![0.0; out_shape.iter().product()];
    let total: usize = extent.values().product();
    let flat = |term: &[char], shape: &[usize], at: &BTreeMap<char, usize>| {
        term.iter()
            .zip(shape)
            .fold(0, |acc, (l, &n)| acc * n + at[l])
    };
    for k in 0..total {
        let mut rest = k;
        let mut at = BTreeMap::new();
        for l in labels.iter().rev() {
            at.insert(*l, rest % extent[l]);
            rest /= extent[l];
        }
        let product: f64 = terms
            .iter()
            .zip(operands)
            .map(|(t, (v, shape))| v[flat(t, shape, &at)])
            .product();
        result[flat(&out, &out_shape, &at)] += product;
    }
    (result, out_shape)
}

/// Checks `einsum(eq)` on random operands of `dtype` against the reference.
fn check2(
    d: &Device,
    eq: &'static str,
    a_shape: &[usize],
    b_shape: &[usize],
    dtype: DType,
    t: Tol,
) {
    let (a, av) = random(dtype, a_shape, a_shape.len() as u64, -1.0, 1.0);
    let (b, bv) = random(dtype, b_shape, 10 + b_shape.len() as u64, -1.0, 1.0);
    let y = einsum::run(d, eq, &a, &b).unwrap();
    let (want, shape) = reference(eq, &[(&av, a_shape), (&bv, b_shape)]);
    assert_eq!((y.shape(), y.dtype()), (&shape[..], dtype), "{eq}");
    assert_close(
        &y,
        &want,
        t,
        &format!("{eq} {a_shape:?} {b_shape:?} {dtype}"),
    );
}

fn check1(d: &Device, eq: &'static str, shape: &[usize]) {
    let (a, av) = random(F32, shape, 5, -1.0, 1.0);
    let y = einsum1::run(d, eq, &a).unwrap();
    let (want, out_shape) = reference(eq, &[(&av, shape)]);
    assert_eq!(y.shape(), &out_shape[..], "{eq}");
    assert_close(&y, &want, tol(F32), &format!("{eq} {shape:?}"));
}

#[test]
fn two_operand_forms_match_the_reference() {
    let d = dev();
    let cases: &[(&'static str, &[usize], &[usize])] = &[
        // matmul, with sizes 1, odd and past 128
        ("ij,jk->ik", &[1, 1], &[1, 1]),
        ("ij,jk->ik", &[3, 5], &[5, 7]),
        ("ij,jk->ik", &[9, 130], &[130, 17]),
        // batched matmul and attention scores / values
        ("bij,bjk->bik", &[2, 3, 5], &[2, 5, 4]),
        ("bij,bjk->bik", &[1, 1, 1], &[1, 1, 1]),
        ("bhqd,bhkd->bhqk", &[2, 3, 5, 8], &[2, 3, 7, 8]),
        ("bhqk,bkhd->bqhd", &[2, 3, 5, 7], &[2, 7, 3, 4]),
        // transposed and permuted outputs
        ("ij,jk->ki", &[3, 5], &[5, 7]),
        ("ijk,ikl->lji", &[2, 3, 4], &[2, 4, 5]),
        // outer products
        ("i,j->ij", &[3], &[129]),
        ("ij,k->kji", &[2, 3], &[5]),
        // matrix-vector, dot, Hadamard, row-wise dot
        ("ij,j->i", &[7, 9], &[9]),
        ("i,i->", &[131], &[131]),
        ("ij,ij->ij", &[3, 4], &[3, 4]),
        ("ij,ij->i", &[3, 4], &[3, 4]),
        // labels summed out of one operand before the dot
        ("ijk,kl->il", &[2, 3, 4], &[4, 5]),
        ("ab,cd->", &[2, 3], &[4, 5]),
        ("ab,cd->ad", &[2, 3], &[4, 5]),
        // a diagonal inside one operand
        ("ii,i->i", &[4, 4], &[4]),
        ("iij,jk->ik", &[3, 3, 2], &[2, 5]),
    ];
    for &(eq, a, b) in cases {
        check2(&d, eq, a, b, F32, tol(F32));
    }
}

#[test]
fn one_operand_forms_match_the_reference() {
    let d = dev();
    check1(&d, "ij->ji", &[3, 129]);
    check1(&d, "ijk->kij", &[2, 3, 4]);
    check1(&d, "ij->ij", &[1, 1]);
    check1(&d, "ijk->j", &[2, 5, 3]);
    check1(&d, "ij->", &[7, 9]);
    check1(&d, "ii->i", &[5, 5]);
    check1(&d, "ii->", &[5, 5]);
    check1(&d, "iji->ji", &[3, 2, 3]);
    check1(&d, "bii->b", &[2, 4, 4]);
}

#[test]
fn implicit_outputs_follow_numpy() {
    let d = dev();
    let (a, _) = random(F32, &[3, 4], 1, -1.0, 1.0);
    let (b, _) = random(F32, &[4, 5], 2, -1.0, 1.0);
    assert_eq!(
        einsum::run(&d, "ij,jk", &a, &b).unwrap(),
        einsum::run(&d, "ij,jk->ik", &a, &b).unwrap()
    );
    // Sorted alphabetically: "ba" is the transpose, "ii" the trace.
    assert_eq!(
        einsum1::run(&d, "ba", &a).unwrap(),
        einsum1::run(&d, "ba->ab", &a).unwrap()
    );
    let (sq, _) = random(F32, &[4, 4], 3, -1.0, 1.0);
    assert_eq!(
        einsum1::run(&d, "ii", &sq).unwrap(),
        einsum1::run(&d, "ii->", &sq).unwrap()
    );
    // Whitespace is ignored.
    assert_eq!(
        einsum::run(&d, " ij , jk -> ik ", &a, &b).unwrap(),
        einsum::run(&d, "ij,jk->ik", &a, &b).unwrap()
    );
}

#[test]
fn dtypes_integer_exact_and_narrow_floats_accumulate_in_f32() {
    let d = dev();
    let a = HostTensor::from_vec((0..15).map(|i| i - 7).collect::<Vec<i32>>(), [3, 5]).unwrap();
    let b = HostTensor::from_vec((0..10).map(|i| 2 * i - 9).collect::<Vec<i32>>(), [5, 2]).unwrap();
    let y = einsum::run(&d, "ij,jk->ik", &a, &b).unwrap();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let (want, _) = reference("ij,jk->ik", &[(&av, &[3, 5]), (&bv, &[5, 2])]);
    assert_eq!(y.to_f64_vec(), want);
    for dtype in [BF16, F16, F64, F8E4M3FN, F8E5M2] {
        check2(
            &d,
            "bij,bjk->bik",
            &[2, 3, 130],
            &[2, 130, 5],
            dtype,
            tol(dtype),
        );
        check2(&d, "ijk,kl->il", &[3, 64, 4], &[4, 5], dtype, tol(dtype));
    }
    let text = einsum::lower(
        "ij,jk->ik",
        &TensorSpec::new([2, 8], BF16),
        &TensorSpec::new([8, 3], BF16),
    )
    .unwrap();
    assert!(
        text.contains("(tensor<2x8xbf16>, tensor<8x3xbf16>) -> tensor<2x3xf32>"),
        "{text}"
    );
}

#[test]
fn lowering_is_one_dot_and_a_transpose_only_when_needed() {
    let (a, b) = (TensorSpec::new([4, 6], F32), TensorSpec::new([6, 5], F32));
    let plain = einsum::lower("ij,jk->ik", &a, &b).unwrap();
    assert_eq!(plain.matches("stablehlo.dot_general").count(), 1);
    assert!(!plain.contains("stablehlo.transpose"), "{plain}");
    let transposed = einsum::lower("ij,jk->ki", &a, &b).unwrap();
    assert_eq!(transposed.matches("stablehlo.dot_general").count(), 1);
    assert_eq!(transposed.matches("stablehlo.transpose").count(), 1);
    // Batch and contracting dimensions are given to the dot directly: no
    // transposes or reshapes of the operands.
    let (q, k) = (
        TensorSpec::new([2, 3, 5, 8], F32),
        TensorSpec::new([2, 3, 7, 8], F32),
    );
    let scores = einsum::lower("bhqd,bhkd->bhqk", &q, &k).unwrap();
    assert!(
        !scores.contains("stablehlo.transpose") && !scores.contains("stablehlo.reshape"),
        "{scores}"
    );
}

#[test]
fn malformed_equations_are_kernel_errors() {
    let d = dev();
    let (a, _) = random(F32, &[2, 3], 1, -1.0, 1.0);
    let (b, _) = random(F32, &[3, 4], 2, -1.0, 1.0);
    let (c, _) = random(F32, &[4, 5], 3, -1.0, 1.0);
    let cases: &[(&'static str, &HostTensor, &str)] = &[
        ("ij,jk->i$", &b, "bad character '$' in the output"),
        ("ij;jk->ik", &b, "bad character ';' in input term 0"),
        ("i1,jk->ik", &b, "bad character '1'"),
        ("ij,jk->ik->i", &b, "bad character '-'"),
        ("ij->ij", &b, "1 input terms for 2 operands"),
        ("ij,jk,kl->il", &b, "3 input terms for 2 operands"),
        (
            "ijk,jk->ik",
            &b,
            "input term 0 \"ijk\" names 3 axes, but operand 0 has rank 2",
        ),
        (
            "ij,jk->ik",
            &c,
            "label 'j' has extent 3 in one place and 4 in another",
        ),
        (
            "ii,jk->ik",
            &b,
            "label 'i' has extent 2 in one place and 3 in another",
        ),
        (
            "ij,jk->iz",
            &b,
            "output label 'z' does not occur in any input",
        ),
        ("ij,jk->iki", &b, "output label 'i' is repeated"),
        ("...ij,...jk->...ik", &b, "ellipsis"),
    ];
    for &(eq, rhs, message) in cases {
        let err = einsum::run(&d, eq, &a, rhs).unwrap_err();
        assert!(matches!(err, Error::Kernel(_)), "{eq}: {err}");
        let e = kernel_error(Err::<(), _>(err));
        assert_eq!(
            (e.kernel.as_str(), e.op.as_str()),
            ("einsum", "einsum"),
            "{eq}"
        );
        assert!(e.message.contains(message), "{eq}: {}", e.message);
        assert!(
            e.message.contains(&format!("{eq:?}")),
            "the message quotes the equation: {}",
            e.message
        );
    }
    let e = kernel_error(einsum1::run(&d, "ij,jk->ik", &a));
    assert_eq!(e.op, "einsum1");
    assert!(
        e.message.contains("2 input terms for 1 operand"),
        "{}",
        e.message
    );
    let e = kernel_error(einsum1::run(&d, "ij->jj", &a));
    assert!(
        e.message.contains("output label 'j' is repeated"),
        "{}",
        e.message
    );
    // Dtypes: mixed, and pred.
    let e = kernel_error(einsum::run(&d, "ij,jk->ik", &a, &b.cast(BF16)));
    assert!(
        e.message.contains("different dtypes f32 and bf16"),
        "{}",
        e.message
    );
    let p = HostTensor::from_vec(vec![true; 6], [2, 3]).unwrap();
    let e = kernel_error(einsum1::run(&d, "ij->i", &p));
    assert!(e.message.contains("pred operands"), "{}", e.message);
}

/// einsum inside a user kernel: attention scores, then a misuse whose
/// error points at this file.
#[cpu_kernel]
fn scores(q: Tensor, k: Tensor) -> Tensor {
    einsum("bqd,bkd->bqk", q, k).softmax(-1)
}

#[cpu_kernel]
fn bad_scores(q: Tensor, k: Tensor) -> Tensor {
    einsum("bqd,bkd->bqz", q, k)
}

#[test]
fn einsum_inlines_into_user_kernels() {
    let d = dev();
    let (q, qv) = random(F32, &[2, 3, 4], 1, -1.0, 1.0);
    let (k, kv) = random(F32, &[2, 5, 4], 2, -1.0, 1.0);
    let y = scores::run(&d, &q, &k).unwrap();
    let (s, _) = reference("bqd,bkd->bqk", &[(&qv, &[2, 3, 4]), (&kv, &[2, 5, 4])]);
    let want: Vec<f64> = s
        .chunks(5)
        .flat_map(|row| {
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
            row.iter().map(move |v| (v - m).exp() / z)
        })
        .collect();
    assert_close(&y, &want, tol(F32), "scores");
    let e = kernel_error(bad_scores::run(&d, &q, &k));
    assert_eq!((e.kernel.as_str(), e.op.as_str()), ("bad_scores", "einsum"));
    assert!(
        e.location.file.ends_with("tests/einsum.rs"),
        "{}",
        e.location
    );
}
