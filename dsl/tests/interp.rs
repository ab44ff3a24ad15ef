//! The host interpreter (`interp::evaluate`) against the XLA CPU plugin:
//! every op family traced once, evaluated by both and compared element by
//! element with the tolerances of `tessel_testing::fuzz::compare`; then the
//! checks (NaN from finite operands, clamped indices) and the errors.

mod common;
mod interp_common;

use common::*;
use interp_common::{both, both_n};
use tessel_dsl::interp::FindingKind;
use tessel_dsl::ops::{GatherDims, ScatterCombine, ScatterDims};
use tessel_dsl::{
    concat, cond, fori_loop, optimization_barrier, while_loop, DType, DotDims, Tensor, BF16, F16,
    F32, F64, F8E4M3FN, F8E5M2, PRED, S32, S64, S8, U32, U8,
};

const ODD_SHAPES: &[&[usize]] = &[&[], &[1], &[7], &[3, 5], &[2, 0, 3], &[2, 1, 9]];

#[test]
fn unary_float_ops() {
    let mut rng = Rng::new(1);
    for dtype in [F32, F64, BF16, F16] {
        for shape in ODD_SHAPES {
            let x = random(&mut rng, shape, dtype, -3.0, 3.0);
            both(
                |a| {
                    let x = a[0];
                    let pos = x.abs() + 0.25;
                    vec![
                        -x,
                        x.abs(),
                        x.exp(),
                        x.expm1(),
                        pos.log(),
                        pos.log1p(),
                        pos.sqrt(),
                        pos.rsqrt(),
                        x.cbrt(),
                        x.tanh(),
                        x.sigmoid(),
                        x.sin(),
                        x.cos(),
                        (x * 0.4).tan(),
                        x.floor(),
                        x.ceil(),
                        (x * 2.0).round(),
                        x.sign(),
                        x.erf(),
                        x.is_finite(),
                    ]
                },
                &[x],
            );
        }
    }
}

#[test]
fn binary_float_ops_propagate_nan() {
    let mut rng = Rng::new(2);
    for dtype in [F32, F64, BF16, F16] {
        let mut a = random(&mut rng, &[4, 6], dtype, -4.0, 4.0).to_f64_vec();
        let b = random(&mut rng, &[4, 6], dtype, 0.5, 4.0).to_f64_vec();
        a[3] = f64::NAN;
        a[7] = f64::INFINITY;
        let (x, y) = (tensor(&a, &[4, 6], dtype), tensor(&b, &[4, 6], dtype));
        let e = both(
            |t| {
                let (x, y) = (t[0], t[1]);
                vec![
                    x + y,
                    x - y,
                    x * y,
                    x / y,
                    x % y,
                    y.pow(x),
                    x.maximum(y),
                    x.minimum(y),
                    y.maximum(x),
                    x.atan2(y),
                    x.lt(y),
                    x.ne(y),
                    x.ge(y),
                    x.eq(x),
                ]
            },
            &[x, y],
        );
        let out = &e.outputs;
        assert!(
            out[6].to_f64_vec()[3].is_nan() && out[8].to_f64_vec()[3].is_nan(),
            "max keeps NaN"
        );
        assert!(
            e.findings.is_empty(),
            "the inputs were not finite: {:?}",
            e.findings
        );
    }
}

#[test]
fn fp8_conversions_round_and_overflow_like_xla() {
    let vals = [
        0.0, 1.0, -1.3, 3.3, 100.0, 447.0, 460.0, 470.0, 500.0, 1e-3, 0.01, -57000.0, 70000.0, 1e6,
    ];
    let x = tensor(&vals, &[vals.len()], F32);
    both(
        |a| {
            let x = a[0];
            let e4 = x.cast(F8E4M3FN);
            let e5 = x.cast(F8E5M2);
            vec![
                e4,
                e5,
                e4.cast(F32),
                e5.cast(F32),
                e4 + e4,
                e5 * e5,
                e4 * 0.3,
            ]
        },
        &[x],
    );
}

#[test]
fn integer_ops_wrap_and_divide_like_xla() {
    for dtype in [S32, U32, S8, U8, S64] {
        let (lo, hi) = int_range(dtype);
        let a = [lo, hi, -1.0, 0.0, 1.0, 7.0, -7.0, 100.0, lo, 5.0, 3.0, 2.0];
        let b = [
            -1.0, 2.0, 0.0, 0.0, 3.0, -2.0, 2.0, 0.0, 1.0, 33.0, 8.0, 70.0,
        ];
        let fix = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| x.clamp(lo, hi)).collect() };
        let (x, y) = (
            tensor(&fix(&a), &[12], dtype),
            tensor(&fix(&b), &[12], dtype),
        );
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
                    x.and(y),
                    x.or(y),
                    x.xor(y),
                    x.shift_left(y),
                    x.shift_right_logical(y),
                    x.shift_right_arithmetic(y),
                    x.logical_not(),
                    x.popcount(),
                    x.abs(),
                    x.sign(),
                    x.lt(y),
                    x.ge(y),
                ]
            },
            &[x, y],
        );
    }
}

#[test]
fn shifts_by_every_amount() {
    for dtype in [S8, U8, S32, U32] {
        let bits = (DType::size_in_bytes(dtype) * 8) as i64;
        let amounts: Vec<f64> = (-2..bits + 3)
            .map(|s| s as f64)
            .filter(|&s| s >= 0.0 || !dtype.is_unsigned())
            .collect();
        let n = amounts.len();
        let x = tensor(
            &vec![if dtype.is_unsigned() { 200.0 } else { -99.0 }; n],
            &[n],
            dtype,
        );
        let s = tensor(&amounts, &[n], dtype);
        both(
            |t| {
                vec![
                    t[0].shift_left(t[1]),
                    t[0].shift_right_logical(t[1]),
                    t[0].shift_right_arithmetic(t[1]),
                ]
            },
            &[x, s],
        );
    }
}

#[test]
fn conversions_saturate_wrap_and_round() {
    let vals = [
        0.0,
        -0.0,
        1.5,
        -1.5,
        2.5,
        -7.9,
        200.0,
        300.0,
        -300.0,
        3e9,
        -3e9,
        1e20,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let n = vals.len();
    let x = tensor(&vals, &[n], F32);
    both(
        |a| {
            let x = a[0];
            vec![
                x.cast(S32),
                x.cast(U32),
                x.cast(S8),
                x.cast(U8),
                x.cast(S64),
                x.cast(PRED),
                x.cast(BF16),
                x.cast(F16),
                x.cast(F64),
            ]
        },
        &[x],
    );
    let ints = tensor(
        &[
            -129.0,
            255.0,
            256.0,
            -1.0,
            0.0,
            16_777_217.0,
            2_147_483_647.0,
        ],
        &[7],
        S64,
    );
    both(
        |a| {
            let x = a[0];
            vec![
                x.cast(S8),
                x.cast(U8),
                x.cast(S32),
                x.cast(U32),
                x.cast(F32),
                x.cast(BF16),
                x.cast(F16),
                x.cast(PRED),
                x.cast(PRED).cast(F32),
            ]
        },
        &[ints],
    );
}

#[test]
fn select_and_clamp() {
    let mut rng = Rng::new(3);
    for dtype in [F32, S32, BF16, U8] {
        let x = random(&mut rng, &[3, 4], dtype, 0.0, 20.0);
        let y = random(&mut rng, &[3, 4], dtype, 0.0, 20.0);
        both(
            |t| {
                let (x, y) = (t[0], t[1]);
                vec![
                    x.gt(y).select(x, y),
                    x.clamp(5, 12),
                    x.clamp(y, 15),
                    Tensor::scalar(1.0, PRED).select(x, y),
                ]
            },
            &[x, y],
        );
    }
    let x = tensor(&[f64::NAN, 1.0, -5.0, 9.0], &[4], F32);
    both(|t| t[0].clamp(0.0, 2.0), &[x]);
}

#[test]
fn shape_ops_on_odd_and_empty_shapes() {
    let mut rng = Rng::new(4);
    for dtype in [F32, S8, PRED, F16] {
        let x = random(&mut rng, &[2, 3, 5], dtype, -9.0, 9.0);
        let z = random(&mut rng, &[2, 0, 5], dtype, -9.0, 9.0);
        both(
            |t| {
                let (x, z) = (t[0], t[1]);
                vec![
                    x.transpose(&[2, 0, 1]),
                    x.reshape(&[5, 6]),
                    x.slice(&[0, 1, 0], &[2, 3, 5], &[1, 1, 2]),
                    x.slice(&[1, 0, 1], &[2, 3, 5], &[2, 2, 3]),
                    x.slice(&[0, 2, 0], &[2, 2, 5], &[1, 1, 1]),
                    concat(&[x, z, x], 1),
                    z.transpose(&[1, 2, 0]),
                    x.broadcast_in_dim([4, 2, 3, 5], &[1, 2, 3]),
                    x.slice(&[0, 0, 0], &[2, 1, 5], &[1, 1, 1])
                        .broadcast_to([2, 4, 5]),
                    x.pad(
                        Tensor::scalar(1.0, dtype),
                        &[1, -1, 0],
                        &[0, 2, -2],
                        &[0, 1, 2],
                    ),
                    z.pad(
                        Tensor::scalar(0.0, dtype),
                        &[1, 1, 0],
                        &[0, 1, 1],
                        &[1, 1, 1],
                    ),
                    Tensor::iota([3, 4], 1, if dtype.is_pred() { S8 } else { dtype }),
                    Tensor::iota([3, 0], 0, F32),
                    Tensor::full([2, 2], 3.0, dtype),
                    Tensor::constant(&tensor(&[1.0, 0.0, -2.0], &[3], dtype)),
                ]
            },
            &[x, z],
        );
    }
}

#[test]
fn gather_and_scatter_with_out_of_range_indices() {
    let mut rng = Rng::new(5);
    for dtype in [F32, S32, BF16] {
        let x = random(&mut rng, &[5, 7], dtype, -9.0, 9.0);
        let idx = tensor(&[0.0, 4.0, -3.0, 9.0, 2.0], &[5], S32);
        let win = tensor(&[0.0, 0.0, 1.0, 2.0, 4.0, 6.0, -2.0, 3.0], &[4, 2], S32);
        let upd = random(&mut rng, &[5, 7], dtype, -9.0, 9.0);
        let e = both(
            |t| {
                let (x, idx, win, upd) = (t[0], t[1], t[2], t[3]);
                let windows = GatherDims {
                    offset_dims: vec![1, 2],
                    collapsed_slice_dims: vec![],
                    start_index_map: vec![0, 1],
                    index_vector_dim: 1,
                };
                vec![
                    x.take(idx, 0),
                    x.take(idx, 1),
                    x.gather(win, windows, &[2, 3]),
                    x.index_update(0, idx, upd, ScatterCombine::Add),
                    x.index_update(0, idx, upd, ScatterCombine::Set),
                    x.index_update(0, idx, upd, ScatterCombine::Max),
                    x.index_update(0, idx, upd, ScatterCombine::Min),
                    x.index_update(0, idx, upd, ScatterCombine::Mul),
                ]
            },
            &[x, idx, win, upd],
        );
        let kinds: Vec<&FindingKind> = e.findings.iter().map(|f| &f.kind).collect();
        assert!(
            kinds
                .iter()
                .any(|k| matches!(k, FindingKind::ClampedIndex { .. })),
            "{kinds:?}"
        );
        assert!(
            kinds
                .iter()
                .any(|k| matches!(k, FindingKind::DroppedScatter { .. })),
            "{kinds:?}"
        );
    }
    // A general scatter of 2x2 windows; the window at (4, 6) does not fit.
    let x = tensor(&[0.0; 35], &[5, 7], F32);
    let idx = tensor(&[0.0, 0.0, 3.0, 5.0, 4.0, 6.0, 1.0, 1.0], &[4, 2], S32);
    let upd = tensor(
        &(1..=16).map(f64::from).collect::<Vec<_>>(),
        &[4, 2, 2],
        F32,
    );
    both(
        |t| {
            let dims = ScatterDims {
                update_window_dims: vec![1, 2],
                inserted_window_dims: vec![],
                scatter_dims_to_operand_dims: vec![0, 1],
                index_vector_dim: 1,
            };
            t[0].scatter(t[1], t[2], dims, ScatterCombine::Add)
        },
        &[x, idx, upd],
    );
}

#[test]
fn reductions_with_init_values_and_empty_axes() {
    let mut rng = Rng::new(6);
    for dtype in [F32, F64, BF16, S32, U8] {
        let x = random(&mut rng, &[3, 4, 5], dtype, 0.0, 4.0);
        let z = random(&mut rng, &[3, 0], dtype, 0.0, 4.0);
        both_n(
            |t| {
                let (x, z) = (t[0], t[1]);
                vec![
                    x.sum(&[2]),
                    x.sum(&[0, 2]),
                    x.sum(&[0, 1, 2]),
                    x.max(&[1]),
                    x.min(&[0, 2]),
                    x.prod(&[0]),
                    z.sum(&[1]),
                    z.max(&[1]),
                    z.min(&[0, 1]),
                    x.argmax(1),
                    x.argmin(2),
                ]
            },
            &[x, z],
            60,
        );
    }
    let p = tensor(&[1.0, 0.0, 1.0, 1.0, 1.0, 1.0], &[2, 3], PRED);
    both(
        |t| vec![t[0].all(&[1]), t[0].any(&[0]), t[0].all(&[0, 1])],
        &[p],
    );
    // NaN wins max and argmax (the first NaN); ties go to the first index.
    let v = tensor(
        &[1.0, f64::NAN, 3.0, f64::NAN, 2.0, 2.0, 1.0, 2.0],
        &[2, 4],
        F32,
    );
    both(
        |t| {
            vec![
                t[0].max(&[1]),
                t[0].argmax(1),
                t[0].argmin(1),
                t[0].min(&[0]),
            ]
        },
        &[v],
    );
}

#[test]
fn dot_general_in_several_dtypes() {
    let mut rng = Rng::new(7);
    for dtype in [F32, F64, BF16, S32] {
        let a = random(&mut rng, &[2, 3, 5], dtype, -3.0, 3.0);
        let b = random(&mut rng, &[2, 5, 4], dtype, -3.0, 3.0);
        let m = random(&mut rng, &[7, 5], dtype, -3.0, 3.0);
        let z = random(&mut rng, &[7, 0], dtype, -3.0, 3.0);
        let dims = DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![2],
            rhs_contract: vec![1],
        };
        both_n(
            move |t| {
                vec![
                    t[0].dot_general(t[1], dims.clone(), None, None),
                    t[2].matmul(t[2].transpose(&[1, 0])),
                    t[3].matmul(t[3].transpose(&[1, 0])),
                ]
            },
            &[a, b, m, z],
            // Cancelling sums: a bound relative to the largest term.
            200,
        );
    }
    let a = random(&mut rng, &[4, 6], BF16, -3.0, 3.0);
    both_n(|t| t[0].matmul_acc(t[0].transpose(&[1, 0]), F32), &[a], 20);
}

#[test]
fn sort_is_stable_and_top_k_orders_ties_by_index() {
    let keys = [3.0, 1.0, 2.0, 1.0, 3.0, f64::NAN, -0.0, 0.0, 2.0, 1.0];
    for dtype in [F32, S32, BF16] {
        let k = tensor(
            &keys.map(|v| {
                if dtype.is_float() || !v.is_nan() {
                    v
                } else {
                    5.0
                }
            }),
            &[2, 5],
            dtype,
        );
        both(
            |t| {
                let x = t[0];
                let (sk, sv) = x.sort_with(Tensor::iota([2, 5], 1, S32), 1, false);
                let (dk, dv) = x.sort_with(Tensor::iota([2, 5], 1, S32), 1, true);
                let (tv, ti) = x.top_k(3);
                vec![sk, sv, dk, dv, x.argsort(0, false), x.sort(0, true), tv, ti]
            },
            &[k],
        );
    }
}

#[test]
fn while_loops_and_conditionals() {
    let x = tensor(&[0.5, -1.0, 2.0], &[3], F32);
    for n in [0, 1, 6] {
        both(
            |a| {
                let (i, y) = while_loop(
                    (Tensor::scalar(0.0, S32), a[0]),
                    |(i, _)| i.lt(a[1]),
                    |(i, y)| (i + 1, y * 1.5 + a[0]),
                );
                let z = fori_loop(0, 4, y, |j, c| {
                    cond(j.lt(2), || c + j.cast(F32), || c * 0.5)
                });
                let w = cond(a[1].gt(2), || (z, i), || (y, i * 2));
                let b = optimization_barrier((w.0, a[0]));
                vec![i, y, z, w.0, w.1, b.0 + b.1]
            },
            &[x.clone(), s32(n)],
        );
    }
}

#[test]
fn subnormals_flush_like_the_cpu_runtime() {
    let vals = [1e-40, 1e-38, -1e-39, 3e-8, 1e-310, 0.0, -0.0, 2.0];
    for dtype in [F32, F64, BF16, F16] {
        let x = tensor(&vals, &[vals.len()], dtype);
        both(
            |t| {
                let x = t[0];
                let mut out = vec![
                    x * 0.01,
                    x + x,
                    x * 1e-30,
                    x.eq(x * 0.0),
                    x.lt(x.abs()),
                    x.abs().sqrt(),
                    x.cast(F16),
                    x.cast(F64),
                    x.cast(F32),
                    x.sum(&[0]),
                    x.cast(PRED),
                    x.argmax(0),
                    x.argmin(0),
                ];
                if dtype != BF16 {
                    out.push(x.maximum(-x));
                    out.push(x.minimum(-x));
                }
                out
            },
            &[x],
        );
    }
    // maximum and minimum order -0 below +0.
    let z = tensor(&[-0.0, 0.0, -0.0, 0.0], &[2, 2], F32);
    let e = both(
        |t| {
            let (a, b) = (t[0], t[0].transpose(&[1, 0]));
            vec![a.maximum(b), a.minimum(b), a.max(&[1]), a.min(&[0])]
        },
        &[z],
    );
    let signs = |i: usize| -> Vec<bool> {
        e.outputs[i]
            .to_f64_vec()
            .iter()
            .map(|v| v.is_sign_negative())
            .collect()
    };
    assert_eq!(signs(0), [true, false, false, false]);
    assert_eq!(signs(1), [true, true, true, false]);
}
