//! einsum, einsum1 and einsum_n against a direct f64 summation over every
//! label assignment: matmul, batched and attention-shaped products,
//! transposed outputs, outer products, reductions, diagonals and traces,
//! implicit outputs, random equations of one to six operands with
//! ellipses that broadcast, the contraction paths, integer, f64, bf16, f16 and fp8 dtypes (tolerances in `common::tol`; f32
//! sums of up to 130 terms stay within 1e-5 relative), the emitted
//! program, and malformed equations as typed kernel errors.

extern crate tessel_dsl as tessel;

mod common;

use std::collections::BTreeMap;

use common::{assert_close, dev, kernel_error, random, tol, Tol};
use tessel::prelude::*;
use tessel_kernels::einsum::{einsum, einsum1, einsum_n, einsum_path, PathStrategy};
use tessel_testing::Rng;

/// `eq` (explicit `->` form) evaluated by summing over every assignment of
/// its labels; gives the result and its shape.
fn reference(eq: &str, operands: &[(&[f64], &[usize])]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, out) = eq
        .split_once("->")
        .expect("references use explicit outputs");
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut extent = BTreeMap::new();
    // An extent of 1 broadcasts (ellipsis axes written out as letters).
    for (t, (_, shape)) in terms.iter().zip(operands) {
        for (&l, &n) in t.iter().zip(shape.iter()) {
            let e = extent.entry(l).or_insert(n);
            *e = (*e).max(n);
        }
    }
    let labels: Vec<char> = extent.keys().copied().collect();
    let out_shape: Vec<usize> = out.iter().map(|l| extent[l]).collect();
    let mut result = vec![0.0; out_shape.iter().product()];
    let total: usize = extent.values().product();
    let flat = |term: &[char], shape: &[usize], at: &BTreeMap<char, usize>| {
        term.iter()
            .zip(shape)
            .fold(0, |acc, (l, &n)| acc * n + if n == 1 { 0 } else { at[l] })
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
        ("i...j...,jk->ik", &b, "bad character '.' in input term 0"),
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

/// A random equation of `n` operands over the letters `a..f` (repeated
/// labels in a term included), written twice: with an ellipsis standing for
/// the trailing-aligned axes `y`, `z` that each term may carry (some of
/// extent 1, which broadcasts), and with those axes spelled out for the
/// reference. Gives both and the operands' shapes.
fn random_equation(rng: &mut Rng, n: usize) -> (String, String, Vec<Vec<usize>>) {
    let below = |rng: &mut Rng, k: usize| (rng.next_u64() % k as u64) as usize;
    let letters = b"abcdef";
    let extent: Vec<usize> = (0..6).map(|_| 1 + below(rng, 3)).collect();
    let ell = [2usize, 3]; // extents of y and z
    let (mut with, mut spelled, mut shapes) = (Vec::new(), Vec::new(), Vec::new());
    let mut used = Vec::new();
    for _ in 0..n {
        let rank = below(rng, 4);
        let labels: Vec<u8> = (0..rank).map(|_| letters[below(rng, 6)]).collect();
        let e = below(rng, 3); // ellipsis axes: none, z, or y z
        let ell_labels: Vec<(u8, usize)> = [(b'y', ell[0]), (b'z', ell[1])][2 - e..]
            .iter()
            .map(|&(l, n)| (l, if below(rng, 4) == 0 { 1 } else { n }))
            .collect();
        let mut shape: Vec<usize> = ell_labels.iter().map(|&(_, n)| n).collect();
        shape.extend(labels.iter().map(|&l| extent[(l - b'a') as usize]));
        used.extend(labels.iter().copied());
        let text = String::from_utf8(labels.clone()).unwrap();
        with.push(format!("{}{text}", if e > 0 { "..." } else { "" }));
        let ells: String = ell_labels.iter().map(|&(l, _)| l as char).collect();
        spelled.push(format!("{ells}{text}"));
        shapes.push(shape);
    }
    used.sort_unstable();
    used.dedup();
    let mut out: Vec<u8> = used.into_iter().filter(|_| below(rng, 2) == 0).collect();
    // A shuffled output, with the ellipsis axes first.
    for i in (1..out.len()).rev() {
        out.swap(i, below(rng, i + 1));
    }
    let any_ell = spelled
        .iter()
        .any(|t| t.starts_with('y') || t.starts_with('z'));
    let deepest = spelled
        .iter()
        .map(|t| t.chars().take_while(|c| *c == 'y' || *c == 'z').count())
        .max()
        .unwrap_or(0);
    let ell_out = &"yz"[2 - deepest..];
    let out = String::from_utf8(out).unwrap();
    let with = format!(
        "{}->{}{out}",
        with.join(","),
        if any_ell { "..." } else { "" }
    );
    let spelled = format!("{}->{ell_out}{out}", spelled.join(","));
    (with, spelled, shapes)
}

/// Random equations of one to six operands, with ellipses that broadcast,
/// repeated labels and summed-out labels: `einsum_n` equals the direct f64
/// summation of the same equation with its ellipsis axes written out.
#[test]
fn many_operand_equations_match_the_reference() {
    let d = dev();
    let mut rng = Rng::new(42);
    for case in 0..36 {
        let n = 1 + case % 6;
        let (eq, spelled, shapes) = random_equation(&mut rng, n);
        let (hosts, values): (Vec<HostTensor>, Vec<Vec<f64>>) = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| random(F64, s, (case * 10 + k) as u64, -1.0, 1.0))
            .unzip();
        let leaked: &'static str = Box::leak(eq.clone().into_boxed_str());
        let y =
            einsum_n::run(&d, leaked, &hosts).unwrap_or_else(|e| panic!("{eq} {shapes:?}: {e}"));
        let operands: Vec<(&[f64], &[usize])> = values
            .iter()
            .zip(&shapes)
            .map(|(v, s)| (&v[..], &s[..]))
            .collect();
        let (want, shape) = reference(&spelled, &operands);
        assert_eq!(y.shape(), &shape[..], "{eq} ({spelled}) {shapes:?}");
        assert_close(&y, &want, tol(F64), &format!("{eq} ({spelled}) {shapes:?}"));
    }
}

/// Narrow floats stay f32 between the steps and are rounded once.
#[test]
fn many_operand_chains_in_bf16_round_once() {
    let d = dev();
    let shapes: [&[usize]; 3] = [&[3, 16], &[16, 16], &[16, 5]];
    let (hosts, values): (Vec<HostTensor>, Vec<Vec<f64>>) = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| random(BF16, s, 70 + k as u64, -1.0, 1.0))
        .unzip();
    let y = einsum_n::run(&d, "ij,jk,kl->il", &hosts).unwrap();
    let operands: Vec<(&[f64], &[usize])> = values
        .iter()
        .zip(shapes)
        .map(|(v, s)| (&v[..], s))
        .collect();
    let (want, _) = reference("ij,jk,kl->il", &operands);
    assert_eq!(y.dtype(), BF16);
    assert_close(&y, &want, tol(BF16), "bf16 chain");
}

/// The path: the cheaper order of a matrix chain, the same order in the
/// program (two dots), greedy past six operands, and errors.
#[test]
fn paths_are_chosen_by_cost_and_reported() {
    // a (2 x 100), b (100 x 3), c (3 x 50): (a b) c, 900 multiply-adds.
    let p = einsum_path("ij,jk,kl->il", &[&[2, 100], &[100, 3], &[3, 50]]).unwrap();
    assert_eq!(p.steps, [(0, 1), (0, 1)]);
    assert_eq!(p.cost, 900.0);
    assert_eq!(p.naive_cost, 2.0 * 100.0 * 3.0 * 50.0);
    assert_eq!(p.largest_intermediate, 100.0);
    // With c (3 x 1) and a (200 x 100), b c first is cheaper.
    let p = einsum_path("ij,jk,kl->il", &[&[200, 100], &[100, 3], &[3, 1]]).unwrap();
    assert_eq!(p.steps, [(1, 2), (0, 1)]);
    assert_eq!(p.equations, ["jk,kl->jl", "ij,jl->il"]);
    let spec = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    let text = einsum_n::lower(
        "ij,jk,kl->il",
        &vec![spec(&[200, 100]), spec(&[100, 3]), spec(&[3, 1])],
    )
    .unwrap();
    assert_eq!(text.matches("stablehlo.dot_general").count(), 2);
    // Seven operands: greedy, six steps.
    let shapes: Vec<Vec<usize>> = (0..7).map(|_| vec![4, 4]).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(|s| &s[..]).collect();
    let p = einsum_path("ab,bc,cd,de,ef,fg,gh->ah", &refs).unwrap();
    assert_eq!(p.strategy, PathStrategy::Greedy);
    assert_eq!(p.steps.len(), 6);
    assert_eq!(p.cost, 6.0 * 64.0);
    let e = einsum_path("ij,jk->ik", &[&[2, 3], &[4, 5]]).unwrap_err();
    assert!(e.to_string().contains("label 'j' has extent 3"), "{e}");
    // Errors of the kernel name it.
    let d = dev();
    let x = HostTensor::zeros(TensorSpec::new([2, 2], F32));
    let e = kernel_error(einsum_n::run(&d, "ij,jk->ik", &vec![x.clone()]));
    assert_eq!(e.op, "einsum_n");
    assert!(
        e.message.contains("2 input terms for 1 operand"),
        "{}",
        e.message
    );
    let e = kernel_error(einsum_n::run(&d, "", &vec![]));
    assert!(e.message.contains("no operand"), "{}", e.message);
}
