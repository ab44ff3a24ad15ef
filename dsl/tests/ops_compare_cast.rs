//! Comparisons, select, clamp and dtype conversions against plain-Rust
//! references.

mod common;

use common::*;
use tessel_dsl::{
    DType, HostTensor, Tensor, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S16, S32, S8, U16, U32,
    U64, U8,
};

fn b(v: bool) -> f64 {
    f64::from(u8::from(v))
}

type Cmp = (&'static str, fn(f64, f64) -> bool);

const CMP: [Cmp; 6] = [
    ("eq", |x, y| x == y),
    ("ne", |x, y| x != y),
    ("lt", |x, y| x < y),
    ("le", |x, y| x <= y),
    ("gt", |x, y| x > y),
    ("ge", |x, y| x >= y),
];

fn all_comparisons(a: Tensor, b: Tensor) -> Vec<Tensor> {
    vec![a.eq(b), a.ne(b), a.lt(b), a.le(b), a.gt(b), a.ge(b)]
}

#[test]
fn comparisons_give_pred_with_ties_nan_and_broadcasting() {
    let mut rng = Rng::new(20);
    let pairs: &[(&[usize], &[usize])] = &[(&[7], &[7]), (&[3, 1], &[1, 4]), (&[], &[2, 3])];
    for dtype in [F32, F64, BF16, F16, S32, U32, S8, U8, S16, U16, U64, PRED] {
        for (sa, sb) in pairs {
            // Few distinct values, so ties are common; unsigned values above
            // 2^15, 2^31 and 2^63 check that u16, u32 and u64 compare unsigned.
            let draw = |rng: &mut Rng, shape: &[usize]| {
                HostTensor::from_fn(spec(shape, dtype), |_| {
                    let k = rng.int(0, 4) as f64;
                    match dtype {
                        DType::Pred => k % 2.0,
                        DType::U32 => k * 1e9,
                        DType::U64 => k * 4e18,
                        DType::U16 => k * 16000.0,
                        DType::U8 => k * 60.0,
                        _ if dtype.is_float() && k == 4.0 => f64::NAN,
                        _ => k - 2.0,
                    }
                })
            };
            let (x, y) = (draw(&mut rng, sa), draw(&mut rng, sb));
            let out = run(|t| all_comparisons(t[0], t[1]), &[&x, &y]);
            for (o, (name, f)) in out.iter().zip(CMP) {
                let (want, shape) = zip_broadcast(&x, &y, |p, q| b(f(p, q)));
                check(
                    o,
                    PRED,
                    &shape,
                    &want,
                    Class::Exact,
                    &format!("{name} {dtype} {sa:?} {sb:?}"),
                );
            }
        }
    }
}

#[test]
fn comparisons_with_rust_scalars() {
    let x = tensor(&[-2.0, -0.5, 0.0, 0.5, 1.0, 3.0], &[6], F32);
    let i = tensor(&[-2.0, 0.0, 1.0, 2.0, 5.0, 7.0], &[6], S32);
    let out = run(
        |t| {
            vec![
                t[0].gt(0.0),
                t[0].le(0.5f32),
                t[0].eq(1),
                t[1].lt(2),
                t[1].ge(5i64),
                t[1].ne(0),
            ]
        },
        &[&x, &i],
    );
    let want: [&[f64]; 6] = [
        &[0., 0., 0., 1., 1., 1.],
        &[1., 1., 1., 1., 0., 0.],
        &[0., 0., 0., 0., 1., 0.],
        &[1., 1., 1., 0., 0., 0.],
        &[0., 0., 0., 0., 1., 1.],
        &[1., 0., 1., 1., 1., 1.],
    ];
    for (o, w) in out.iter().zip(want) {
        check(o, PRED, &[6], w, Class::Exact, "scalar compare");
    }
}

#[test]
fn select_with_tensor_and_scalar_branches_and_broadcasting() {
    let mut rng = Rng::new(21);
    for dtype in [F32, BF16, S32, U8] {
        let c = random(&mut rng, &[3, 1], PRED, 0.0, 1.0);
        let x = random(&mut rng, &[1, 4], dtype, 0.0, 50.0);
        let y = random(&mut rng, &[3, 4], dtype, 0.0, 50.0);
        let out = run(
            |t| {
                let (c, x, y) = (t[0], t[1], t[2]);
                vec![
                    c.select(x, y),
                    c.select(x, 7.0),
                    c.select(2, y),
                    x.gt(y).select(x, y),
                ]
            },
            &[&c, &x, &y],
        );
        let cv = broadcast(&c.to_f64_vec(), &[3, 1], &[3, 4]);
        let xv = broadcast(&x.to_f64_vec(), &[1, 4], &[3, 4]);
        let yv = y.to_f64_vec();
        let sel = |t: &dyn Fn(usize) -> f64, f: &dyn Fn(usize) -> f64| {
            (0..12)
                .map(|i| if cv[i] != 0.0 { t(i) } else { f(i) })
                .collect::<Vec<_>>()
        };
        let what = format!("select {dtype}");
        check(
            &out[0],
            dtype,
            &[3, 4],
            &sel(&|i| xv[i], &|i| yv[i]),
            Class::Exact,
            &what,
        );
        check(
            &out[1],
            dtype,
            &[3, 4],
            &sel(&|i| xv[i], &|_| 7.0),
            Class::Exact,
            &what,
        );
        check(
            &out[2],
            dtype,
            &[3, 4],
            &sel(&|_| 2.0, &|i| yv[i]),
            Class::Exact,
            &what,
        );
        let mx: Vec<f64> = (0..12).map(|i| xv[i].max(yv[i])).collect();
        check(&out[3], dtype, &[3, 4], &mx, Class::Exact, &what);
    }
}

#[test]
fn clamp_with_scalar_and_tensor_bounds() {
    let mut rng = Rng::new(22);
    for dtype in [F32, F64, BF16, S32, S8] {
        let x = random(&mut rng, &[3, 5], dtype, -10.0, 10.0);
        let lo = random(&mut rng, &[5], dtype, -6.0, -1.0);
        let hi = random(&mut rng, &[3, 5], dtype, 1.0, 6.0);
        let out = run(
            |t| {
                vec![
                    t[0].clamp(-2.0, 3.0),
                    t[0].clamp(t[1], t[2]),
                    t[0].clamp(t[1], 4),
                ]
            },
            &[&x, &lo, &hi],
        );
        let xv = x.to_f64_vec();
        let lv = broadcast(&lo.to_f64_vec(), &[5], &[3, 5]);
        let hv = hi.to_f64_vec();
        let what = format!("clamp {dtype}");
        let w0: Vec<f64> = xv.iter().map(|v| v.clamp(-2.0, 3.0)).collect();
        check(&out[0], dtype, &[3, 5], &w0, Class::Exact, &what);
        let w1: Vec<f64> = (0..15).map(|i| xv[i].clamp(lv[i], hv[i])).collect();
        check(&out[1], dtype, &[3, 5], &w1, Class::Exact, &what);
        let w2: Vec<f64> = (0..15).map(|i| xv[i].clamp(lv[i], 4.0)).collect();
        check(&out[2], dtype, &[3, 5], &w2, Class::Exact, &what);
    }
}

/// What `cast` should give: floats round to nearest even, float to integer
/// truncates toward zero, anything to pred is `!= 0`, pred is 0 or 1.
fn cast_ref(v: f64, from: DType, to: DType) -> f64 {
    if to.is_pred() {
        return b(v != 0.0);
    }
    if from.is_float() && to.is_integer() {
        return v.trunc();
    }
    if !from.is_float() && to.is_integer() {
        // Integer to integer keeps the low bits.
        return match to {
            DType::S8 => v as i64 as i8 as f64,
            DType::U8 => v as i64 as u8 as f64,
            DType::S16 => v as i64 as i16 as f64,
            DType::U16 => v as i64 as u16 as f64,
            DType::S32 => v as i64 as i32 as f64,
            DType::U32 => v as i64 as u32 as f64,
            DType::U64 => v as i64 as u64 as f64,
            _ => v,
        };
    }
    if to == F8E4M3FN && v.abs() >= 464.0 {
        // e4m3fn has no infinity: beyond the largest finite value (448,
        // plus half an ulp) the device gives NaN; the host encoder saturates.
        return f64::NAN;
    }
    rounded(&[v], to)[0]
}

#[test]
fn casts_between_float_int_and_pred_types() {
    let mut rng = Rng::new(23);
    let shape = [3, 7];
    // (source dtype, value range, target dtypes)
    let plan: [(DType, f64, f64, &[DType]); 11] = [
        (
            F32,
            -100.0,
            100.0,
            &[S32, S8, S16, F64, F16, BF16, F8E4M3FN, F8E5M2, PRED],
        ),
        (F32, 0.0, 250.0, &[U8, U32]),
        (F32, 0.0, 6e4, &[U16, U64]),
        (F64, -1e4, 1e4, &[F32, BF16, F16, S32]),
        (BF16, -50.0, 50.0, &[F32, F16, S32]),
        (S32, -3000.0, 3000.0, &[F32, F16, BF16, F64, PRED, S32]),
        (U32, 0.0, 4e9, &[F32, F64, U8]),
        (U8, 0.0, 255.0, &[F32, S32, U32, PRED]),
        (U16, 0.0, 65535.0, &[F32, BF16, S16, U8, S32, U64, PRED]),
        (S16, -32768.0, 32767.0, &[F32, F16, U16, S8, U32, U64, PRED]),
        (PRED, 0.0, 1.0, &[F32, S32, U8, BF16]),
    ];
    for (from, lo, hi, targets) in plan {
        let mut x = random(&mut rng, &shape, from, lo, hi);
        if from == F32 && lo < 0.0 {
            // Exact halves, zeros and near-integers probe rounding and truncation.
            let mut v = x.to_f64_vec();
            v[..6].copy_from_slice(&[-0.5, 0.0, -1.7, 2.5, 99.99, -0.0]);
            x = tensor(&v, &shape, F32);
        }
        let out = run(
            |t| targets.iter().map(|&d| t[0].cast(d)).collect::<Vec<_>>(),
            &[&x],
        );
        for (o, &to) in out.iter().zip(targets) {
            let want: Vec<f64> = x
                .to_f64_vec()
                .iter()
                .map(|&v| cast_ref(v, from, to))
                .collect();
            check(
                o,
                to,
                &shape,
                &want,
                Class::Exact,
                &format!("{from} -> {to}"),
            );
        }
    }
}

#[test]
fn u32_to_s32_cast_reinterprets_large_values() {
    let x = tensor(
        &[0.0, 1.0, 2147483647.0, 2147483648.0, 4294967295.0],
        &[5],
        U32,
    );
    let out = run1(|t| t[0].cast(S32), &[&x]);
    assert_eq!(
        out.to_vec::<i32>().unwrap(),
        vec![0, 1, i32::MAX, i32::MIN, -1]
    );
}

#[test]
fn f32_to_narrow_floats_rounds_to_nearest_even() {
    // Values exactly halfway between two bf16 / f16 / f8 neighbours.
    let halfway_bf16 = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -(2.0 + 1.0 / 128.0)];
    let halfway_f16 = [1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 1024.5];
    let halfway_f8 = [1.0625, 1.1875, -3.25];
    let mut v = Vec::new();
    v.extend_from_slice(&halfway_bf16);
    v.extend_from_slice(&halfway_f16);
    v.extend_from_slice(&halfway_f8);
    v.extend_from_slice(&[0.1, -7.3, 300.0]);
    let x = tensor(&v, &[12], F32);
    let out = run(
        |t| {
            vec![
                t[0].cast(BF16),
                t[0].cast(F16),
                t[0].cast(F8E4M3FN),
                t[0].cast(F8E5M2),
            ]
        },
        &[&x],
    );
    let xs = x.to_f64_vec();
    for (o, d) in out.iter().zip([BF16, F16, F8E4M3FN, F8E5M2]) {
        let want: Vec<f64> = xs.iter().map(|&v| cast_ref(v, F32, d)).collect();
        check(o, d, &[12], &want, Class::Exact, &format!("f32 -> {d}"));
    }
    // Spot checks of the rounding itself (independent of the host conversion).
    let bf = out[0].to_f64_vec();
    assert_eq!(bf[0], 1.0, "1 + 2^-8 ties to even (down)");
    assert_eq!(bf[1], 1.0 + 4.0 / 256.0, "1 + 3*2^-8 ties to even (up)");
    let f8 = out[2].to_f64_vec();
    assert_eq!(f8[6], 1.0, "1.0625 ties to 1.0 in e4m3fn");
    assert_eq!(f8[7], 1.25, "1.1875 ties to 1.25 in e4m3fn");
}

#[test]
fn narrow_float_arithmetic_rounds_each_result() {
    let mut rng = Rng::new(24);
    for dtype in [F8E4M3FN, F8E5M2] {
        let x = random(&mut rng, &[2, 9], dtype, -4.0, 4.0);
        let y = random(&mut rng, &[2, 9], dtype, 0.5, 4.0);
        let out = run(|t| vec![t[0].cast(F32), t[0] * t[1], t[0] + 1.0], &[&x, &y]);
        check(
            &out[0],
            F32,
            &[2, 9],
            &x.to_f64_vec(),
            Class::Exact,
            "f8 -> f32",
        );
        let (want, _) = zip_broadcast(&x, &y, |p, q| p * q);
        check(
            &out[1],
            dtype,
            &[2, 9],
            &want,
            Class::Simple,
            &format!("{dtype} *"),
        );
        let want: Vec<f64> = x.to_f64_vec().iter().map(|v| v + 1.0).collect();
        check(
            &out[2],
            dtype,
            &[2, 9],
            &want,
            Class::Simple,
            &format!("{dtype} +"),
        );
    }
}
