//! The interpreter against the CPU plugin at the edges: special float
//! values through every unary op, the tails of `sigmoid`, 64-bit integers
//! beyond f64's precision,
//! fp8 arithmetic, bitwise reductions, duplicate scatter indices, general
//! gathers and nested loops.

mod common;
mod interp_common;

use common::*;
use interp_common::{both, both_n};
use tessel_dsl::ops::{GatherDims, ScatterCombine};
use tessel_dsl::{
    fori_loop, while_loop, DType, HostTensor, Tensor, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, S32,
    U32, U8,
};

const SPECIAL: [f64; 14] = [
    0.0,
    -0.0,
    -1.0,
    1.0,
    -2.5,
    2.5,
    0.5,
    -0.5,
    1e30,
    -1e30,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    100.0,
];

#[test]
fn unary_ops_at_special_values() {
    for dtype in [F32, F64, BF16, F16] {
        let x = tensor(&SPECIAL, &[SPECIAL.len()], dtype);
        both(
            |t| {
                let x = t[0];
                vec![
                    x.log(),
                    x.log1p(),
                    x.sqrt(),
                    x.rsqrt(),
                    x.exp(),
                    x.expm1(),
                    x.tanh(),
                    x.sigmoid(),
                    x.erf(),
                    x.sign(),
                    x.round(),
                    x.floor(),
                    x.ceil(),
                    // XLA's f32 cbrt is about 7 ulps off at 1e30: small values only.
                    x.clamp(-100.0, 100.0).cbrt(),
                    x.abs(),
                    -x,
                    x.is_finite(),
                ]
            },
            &[x],
        );
    }
}

/// `sigmoid` over its tails, where XLA's expansion (`1 / (1 + exp(-x))`,
/// each op rounded) departs from the exact value: an f16 `exp(-x)`
/// overflows from about -11.1 down and the result is 0, where the exact
/// value is still an f16 subnormal; bf16 and fp8 are computed in f32.
#[test]
fn sigmoid_tails_round_as_xlas_expansion() {
    let xs: Vec<f64> = (-120..=120).map(|i| f64::from(i) * 0.25).collect();
    for dtype in [F32, F64, BF16, F16, F8E4M3FN, F8E5M2] {
        let x = tensor(&xs, &[xs.len()], dtype);
        let e = both(|t| vec![t[0].sigmoid()], &[x]);
        if dtype == F16 {
            // -13.875 (the fuzzer's seed 1795799000000793): exactly 9.4e-7,
            // an f16 subnormal; 0 on both sides.
            let at = tensor(&[-13.875, -11.0], &[2], F16);
            let e = both(|t| vec![t[0].sigmoid()], &[at]);
            let v = e.outputs[0].to_f64_vec();
            assert_eq!(v[0], 0.0);
            assert!(v[1] > 0.0, "{v:?}");
        }
        let v = e.outputs[0].to_f64_vec();
        assert!(
            v.iter().all(|y| (0.0..=1.0).contains(y)),
            "{dtype:?}: {v:?}"
        );
    }
}

#[test]
fn binary_ops_at_special_values() {
    let n = SPECIAL.len();
    let a: Vec<f64> = (0..n * n).map(|i| SPECIAL[i / n]).collect();
    let b: Vec<f64> = (0..n * n).map(|i| SPECIAL[i % n]).collect();
    for dtype in [F32, F64] {
        let (x, y) = (tensor(&a, &[n, n], dtype), tensor(&b, &[n, n], dtype));
        both(
            |t| {
                let (x, y) = (t[0], t[1]);
                vec![
                    x + y,
                    x - y,
                    x * y,
                    x / y,
                    x % y,
                    x.maximum(y),
                    x.minimum(y),
                    x.lt(y),
                    x.eq(y),
                ]
            },
            &[x, y],
        );
    }
}

#[test]
fn fp8_arithmetic() {
    let vals = [
        0.0, 0.25, -1.5, 3.0, 7.5, -20.0, 100.0, 0.015625, 240.0, -448.0,
    ];
    for dtype in [F8E4M3FN, F8E5M2] {
        let x = tensor(&vals, &[vals.len()], dtype);
        let y = tensor(&vals.map(|v| v * 0.5 - 1.0), &[vals.len()], dtype);
        both(
            |t| {
                let (x, y) = (t[0], t[1]);
                vec![
                    x + y,
                    x - y,
                    x * y,
                    x.maximum(y),
                    x.abs().sqrt(),
                    x.floor(),
                    x.lt(y),
                    x.cast(S32),
                    x.sum(&[0]),
                ]
            },
            &[x, y],
        );
    }
}

#[test]
fn s64_beyond_f64_precision() {
    let a = [
        i64::MAX,
        i64::MIN,
        (1 << 53) + 1,
        -(1 << 60) - 3,
        7,
        -1,
        i64::MIN + 1,
        123_456_789_123,
    ];
    let b = [1, -1, (1 << 53) + 3, 2, 0, 64, i64::MAX, -(1 << 40) - 1];
    let x = HostTensor::from_vec(a.to_vec(), [a.len()]).unwrap();
    let y = HostTensor::from_vec(b.to_vec(), [b.len()]).unwrap();
    let e = both(
        |t| {
            let (x, y) = (t[0], t[1]);
            vec![
                x + y,
                x - y,
                x * y,
                x / y,
                x % y,
                x.maximum(y),
                x.shift_left(y),
                x.shift_right_logical(y),
                x.shift_right_arithmetic(y),
                x.xor(y),
                x.popcount(),
                x.lt(y),
                x.cast(F64),
                x.cast(F32),
                x.cast(S32),
                x.cast(U32),
                x.reshape(&[2, 4]).argmax(1),
                x.reshape(&[2, 4]).max(&[1]),
                x.sort(0, false),
            ]
        },
        &[x, y],
    );
    assert_eq!(
        e.outputs[0].to_vec::<i64>().unwrap()[0],
        i64::MIN,
        "i64::MAX + 1 wraps"
    );
}

#[test]
fn bitwise_reductions_and_unsigned_wrap() {
    let mut rng = Rng::new(9);
    for dtype in [S32, U32, U8] {
        let x = random(&mut rng, &[3, 5], dtype, 0.0, 4e9);
        both(
            |t| {
                let x = t[0];
                vec![
                    x.all(&[1]),
                    x.any(&[0]),
                    x.sum(&[0, 1]),
                    x.prod(&[1]),
                    x * x,
                    x.minimum(3) * 2,
                ]
            },
            &[x],
        );
    }
}

#[test]
fn scatter_with_duplicate_indices_and_points_gather() {
    let x = tensor(&[0.0; 12], &[4, 3], F32);
    let idx = tensor(&[1.0, 1.0, 3.0, 1.0, -1.0, 4.0], &[6], S32);
    let upd = tensor(&(1..=18).map(f64::from).collect::<Vec<_>>(), &[6, 3], F32);
    let pts = tensor(&[0.0, 3.0, 2.0, 9.0, 1.0, 2.0], &[2, 3], S32);
    both(
        |t| {
            let (x, idx, upd, pts) = (t[0], t[1], t[2], t[3]);
            let points = GatherDims {
                offset_dims: vec![],
                collapsed_slice_dims: vec![0, 1],
                start_index_map: vec![0, 1],
                index_vector_dim: 0,
            };
            let y = x.index_update(0, idx, upd, ScatterCombine::Add);
            vec![
                y,
                x.index_update(0, idx, upd, ScatterCombine::Set),
                x.index_update(0, idx, upd, ScatterCombine::Max),
                y.gather(pts, points, &[1, 1]),
            ]
        },
        &[x, idx, upd, pts],
    );
}

#[test]
fn nested_loops_with_captured_values() {
    let x = tensor(&[1.0, -2.0, 0.5], &[3], F32);
    for n in [0, 3] {
        both(
            |a| {
                let (x, n) = (a[0], a[1]);
                let outer = fori_loop(0, n, x, |i, c| {
                    let inner = fori_loop(0, i, c, |j, d| d * 0.5 + x * j.cast(F32));
                    inner + 1.0
                });
                let (k, w) = while_loop(
                    (Tensor::scalar(0.0, S32), x.cast(DType::S32)),
                    |(k, w)| k.lt(n).and(w.sum(&[0]).lt(1000)),
                    |(k, w)| (k + 1, w * 3 + k),
                );
                vec![outer, k, w]
            },
            &[x.clone(), s32(n)],
        );
    }
}

#[test]
fn pads_of_integers_and_bf16_crop_and_dilate() {
    let mut rng = Rng::new(10);
    for dtype in [S32, U8, BF16] {
        let x = random(&mut rng, &[3, 4], dtype, 0.0, 50.0);
        both(
            |t| {
                let x = t[0];
                vec![
                    x.pad(Tensor::scalar(7.0, dtype), &[-1, 2], &[1, -3], &[2, 0]),
                    x.pad(Tensor::scalar(0.0, dtype), &[-3, -4], &[0, 0], &[0, 0]),
                    x.pad(Tensor::scalar(1.0, dtype), &[0, 0], &[0, 0], &[3, 1]),
                ]
            },
            &[x],
        );
    }
}

#[test]
fn long_narrow_sums_do_not_stall() {
    // One bf16 or f16 accumulator would stop at 256 or 2048; XLA sums in
    // f32, and the interpreter in f64.
    let mut rng = Rng::new(11);
    for dtype in [BF16, F16] {
        let ones = tensor(&[1.0; 3000], &[3000], dtype);
        let mixed = random(&mut rng, &[3, 1000], dtype, -1.0, 2.0);
        // XLA splits long reductions into pieces whose partial sums it
        // rounds to the dtype: a few ulps apart on mixed values.
        let e = both_n(
            |t| vec![t[0].sum(&[0]), t[1].sum(&[1]), t[1].sum(&[0, 1])],
            &[ones, mixed],
            4,
        );
        let want = if dtype == BF16 { 3008.0 } else { 3000.0 };
        assert_eq!(e.outputs[0].to_f64_vec(), vec![want]);
    }
}
