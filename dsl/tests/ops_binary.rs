//! Elementwise binary ops (arithmetic, min/max, pow, atan2, bitwise and
//! logical ops, shifts) with numpy broadcasting and Rust scalars on either
//! side, against plain-Rust `f64` / integer references.

mod common;

use common::*;
use tessel_dsl::{DType, HostTensor, F32, PRED, S32, U32};

/// A named binary reference.
type NamedOp = (&'static str, fn(f64, f64) -> f64);
/// A named binary reference and its tolerance class.
type ClassedOp = (&'static str, fn(f64, f64) -> f64, Class);
/// A named reference of an op with a scalar operand, on exact integers.
type IntOp = (&'static str, fn(i128) -> i128);
/// A shift's name, its reference on bit patterns and a fixed amount, if any.
type ShiftCase<'a> = (&'static str, &'a dyn Fn(f64, u32) -> u64, Option<u32>);

/// Shape pairs of the binary sweeps: equal shapes and numpy broadcasting.
const PAIRS: &[(&[usize], &[usize])] = &[
    (&[7], &[7]),
    (&[3, 1], &[1, 4]),
    (&[5], &[2, 5]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[], &[]),
    (&[2, 1, 33], &[5, 1]),
    (&[1], &[129]),
];
const SHORT_PAIRS: &[(&[usize], &[usize])] =
    &[(&[3, 1], &[1, 4]), (&[], &[2, 3]), (&[2, 1, 33], &[5, 1])];

fn pairs_for(dtype: DType) -> &'static [(&'static [usize], &'static [usize])] {
    if dtype == F32 || dtype == S32 {
        PAIRS
    } else {
        SHORT_PAIRS
    }
}

#[test]
fn binary_float_arithmetic_with_broadcasting() {
    let mut rng = Rng::new(3);
    for dtype in FLOATS {
        for (sa, sb) in pairs_for(dtype) {
            let a = random(&mut rng, sa, dtype, -4.0, 4.0);
            let b = away_from_zero(&mut rng, sb, dtype);
            let out = run(
                |t| {
                    let (a, b) = (t[0], t[1]);
                    vec![
                        a + b,
                        a - b,
                        a * b,
                        a / b,
                        a % b,
                        a.maximum(b),
                        a.minimum(b),
                    ]
                },
                &[&a, &b],
            );
            let fs: [ClassedOp; 7] = [
                ("+", |x, y| x + y, Class::Simple),
                ("-", |x, y| x - y, Class::Simple),
                ("*", |x, y| x * y, Class::Simple),
                ("/", |x, y| x / y, Class::Simple),
                ("%", |x, y| x % y, Class::Simple),
                ("maximum", f64::max, Class::Exact),
                ("minimum", f64::min, Class::Exact),
            ];
            for (o, (name, f, class)) in out.iter().zip(fs) {
                let (want, shape) = zip_broadcast(&a, &b, f);
                check(
                    o,
                    dtype,
                    &shape,
                    &want,
                    class,
                    &format!("{name} {dtype} {sa:?} {sb:?}"),
                );
            }
        }
    }
}

#[test]
fn float_ops_with_rust_scalars_on_both_sides() {
    let mut rng = Rng::new(4);
    for dtype in FLOATS {
        let shape = [3, 7];
        let a = random(&mut rng, &shape, dtype, -4.0, 4.0);
        let b = away_from_zero(&mut rng, &shape, dtype);
        let out = run(
            |t| {
                let (a, b) = (t[0], t[1]);
                vec![
                    a + 2.0,
                    2.0 + a,
                    a - 1.5f32,
                    1.5 - a,
                    a * 3,
                    3 * a,
                    a / 2.0,
                    2.0 / b,
                    a % 2.0,
                    7.0 % b,
                    a + 2u32,
                    4 - a,
                    a.maximum(0.5),
                    a.minimum(-0.5),
                    (-0.5 * a).abs(),
                ]
            },
            &[&a, &b],
        );
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let fs: [NamedOp; 15] = [
            ("a+2", |a, _| a + 2.0),
            ("2+a", |a, _| 2.0 + a),
            ("a-1.5", |a, _| a - 1.5),
            ("1.5-a", |a, _| 1.5 - a),
            ("a*3", |a, _| a * 3.0),
            ("3*a", |a, _| 3.0 * a),
            ("a/2", |a, _| a / 2.0),
            ("2/b", |_, b| 2.0 / b),
            ("a%2", |a, _| a % 2.0),
            ("7%b", |_, b| 7.0 % b),
            ("a+2u32", |a, _| a + 2.0),
            ("4-a", |a, _| 4.0 - a),
            ("max(a,0.5)", |a, _| a.max(0.5)),
            ("min(a,-0.5)", |a, _| a.min(-0.5)),
            ("(-0.5*a).abs()", |a, _| (-0.5 * a).abs()),
        ];
        for (o, (name, f)) in out.iter().zip(fs) {
            let want: Vec<f64> = av.iter().zip(&bv).map(|(&x, &y)| f(x, y)).collect();
            check(
                o,
                dtype,
                &shape,
                &want,
                Class::Simple,
                &format!("{name} {dtype}"),
            );
        }
    }
}

#[test]
fn pow_and_atan2() {
    let mut rng = Rng::new(5);
    for dtype in FLOATS {
        for shape in shapes_for(dtype) {
            let base = random(&mut rng, shape, dtype, 0.1, 3.0);
            let expo = random(&mut rng, shape, dtype, -2.0, 2.0);
            let y = random(&mut rng, shape, dtype, -3.0, 3.0);
            let x = away_from_zero(&mut rng, shape, dtype);
            let out = run(
                |t| vec![t[0].pow(t[1]), t[0].pow(2.0), t[2].atan2(t[3])],
                &[&base, &expo, &y, &x],
            );
            let tr = Class::Transcendental;
            let (want, _) = zip_broadcast(&base, &expo, f64::powf);
            check(&out[0], dtype, shape, &want, tr, &format!("pow {dtype}"));
            let want: Vec<f64> = base.to_f64_vec().iter().map(|b| b * b).collect();
            check(&out[1], dtype, shape, &want, tr, &format!("pow 2 {dtype}"));
            let (want, _) = zip_broadcast(&y, &x, f64::atan2);
            check(&out[2], dtype, shape, &want, tr, &format!("atan2 {dtype}"));
        }
    }
}

/// Integer `a op b` as XLA computes it: exact, then wrapped into the dtype;
/// division and remainder truncate toward zero.
fn int_ref(op: &str, a: f64, b: f64, dtype: DType) -> f64 {
    let (x, y) = (a as i128, b as i128);
    let v = match op {
        "+" => x + y,
        "-" => x - y,
        "*" => x * y,
        "/" => x / y,
        "%" => x % y,
        "max" => x.max(y),
        "min" => x.min(y),
        "and" => return from_bits(to_bits(a, dtype) & to_bits(b, dtype), dtype),
        "or" => return from_bits(to_bits(a, dtype) | to_bits(b, dtype), dtype),
        "xor" => return from_bits(to_bits(a, dtype) ^ to_bits(b, dtype), dtype),
        _ => unreachable!("{op}"),
    };
    wrap(v, dtype)
}

#[test]
fn binary_integer_arithmetic_and_bitwise_ops() {
    let mut rng = Rng::new(6);
    for dtype in INTS {
        // Products of s8/u8 operands stay in range; s16/u16/s32/u32 ones
        // wrap; u64 ones stay below 2^53 (exact as f64), its differences wrap.
        let (lo, hi, dlo, dhi) = match dtype {
            DType::S8 => (-11.0, 11.0, -11.0, 11.0),
            DType::U8 => (0.0, 15.0, 1.0, 15.0),
            DType::S16 => (-30_000.0, 30_000.0, -300.0, 300.0),
            DType::U16 => (0.0, 65_000.0, 1.0, 600.0),
            DType::S32 => (-3e6, 3e6, -70_000.0, 70_000.0),
            _ => (0.0, 4e9, 1.0, 70_000.0),
        };
        for (sa, sb) in pairs_for(dtype) {
            let a = random(&mut rng, sa, dtype, lo, hi);
            let b = HostTensor::from_fn(spec(sb, dtype), |_| loop {
                let v = rng.int(dlo as i64, dhi as i64);
                if v != 0 {
                    return v as f64;
                }
            });
            let out = run(
                |t| {
                    let (a, b) = (t[0], t[1]);
                    vec![
                        a + b,
                        a - b,
                        a * b,
                        a / b,
                        a % b,
                        a.maximum(b),
                        a.minimum(b),
                        a & b,
                        a | b,
                        a ^ b,
                        a.and(b),
                        a.or(b),
                        a.xor(b),
                    ]
                },
                &[&a, &b],
            );
            let ops = [
                "+", "-", "*", "/", "%", "max", "min", "and", "or", "xor", "and", "or", "xor",
            ];
            for (o, op) in out.iter().zip(ops) {
                let (want, shape) = zip_broadcast(&a, &b, |x, y| int_ref(op, x, y, dtype));
                check(
                    o,
                    dtype,
                    &shape,
                    &want,
                    Class::Exact,
                    &format!("{op} {dtype} {sa:?} {sb:?}"),
                );
            }
        }
    }
}

#[test]
fn integer_ops_with_rust_scalars() {
    let mut rng = Rng::new(7);
    for dtype in INTS {
        let hi = if dtype.size_in_bytes() == 1 {
            20.0
        } else {
            1000.0
        };
        let a = random(&mut rng, &[4, 9], dtype, 1.0, hi);
        let out = run(
            |t| {
                let a = t[0];
                vec![
                    a + 3,
                    3 + a,
                    100 - a,
                    a * 2u32,
                    2 * a,
                    a / 3,
                    100 / a,
                    a % 3,
                    a.maximum(5),
                    (3 * a).maximum(7),
                ]
            },
            &[&a],
        );
        let fs: [IntOp; 10] = [
            ("a+3", |a| a + 3),
            ("3+a", |a| 3 + a),
            ("100-a", |a| 100 - a),
            ("a*2", |a| a * 2),
            ("2*a", |a| 2 * a),
            ("a/3", |a| a / 3),
            ("100/a", |a| 100 / a),
            ("a%3", |a| a % 3),
            ("max(a,5)", |a| a.max(5)),
            ("(3*a).max(7)", |a| (3 * a).max(7)),
        ];
        let av = a.to_f64_vec();
        for (o, (name, f)) in out.iter().zip(fs) {
            let want: Vec<f64> = av.iter().map(|&x| wrap(f(x as i128), dtype)).collect();
            check(
                o,
                dtype,
                &[4, 9],
                &want,
                Class::Exact,
                &format!("{name} {dtype}"),
            );
        }
    }
}

#[test]
fn logical_ops_on_pred_with_broadcasting() {
    let mut rng = Rng::new(8);
    for (sa, sb) in PAIRS {
        let a = random(&mut rng, sa, PRED, 0.0, 1.0);
        let b = random(&mut rng, sb, PRED, 0.0, 1.0);
        let out = run(
            |t| {
                vec![
                    t[0] & t[1],
                    t[0] | t[1],
                    t[0] ^ t[1],
                    t[0].and(true),
                    t[0].or(false),
                ]
            },
            &[&a, &b],
        );
        let fs: [fn(bool, bool) -> bool; 3] = [|x, y| x & y, |x, y| x | y, |x, y| x ^ y];
        for (o, f) in out.iter().zip(fs) {
            let (want, shape) =
                zip_broadcast(&a, &b, |x, y| f64::from(u8::from(f(x != 0.0, y != 0.0))));
            check(
                o,
                PRED,
                &shape,
                &want,
                Class::Exact,
                &format!("pred {sa:?} {sb:?}"),
            );
        }
        check(&out[3], PRED, sa, &a.to_f64_vec(), Class::Exact, "and true");
        check(&out[4], PRED, sa, &a.to_f64_vec(), Class::Exact, "or false");
    }
}

#[test]
fn shifts_on_u32_and_s32_including_oversized_amounts() {
    let mut rng = Rng::new(9);
    for dtype in [U32, S32] {
        let (lo, hi) = int_range(dtype);
        let x = random(&mut rng, &[5, 13], dtype, lo, hi);
        // Every amount 0..=35 appears; those >= 32 shift everything out.
        let n = HostTensor::from_fn(spec(&[5, 13], dtype), |i| (i % 36) as f64);
        let out = run(
            |t| {
                vec![
                    t[0].shift_left(t[1]),
                    t[0].shift_right_logical(t[1]),
                    t[0].shift_right_arithmetic(t[1]),
                    t[0].shift_left(3),
                    t[0].shift_right_logical(31),
                ]
            },
            &[&x, &n],
        );
        let xs = x.to_f64_vec();
        let ns = n.to_f64_vec();
        let shl = |v: f64, s: u32| if s >= 32 { 0 } else { to_bits(v, dtype) << s };
        let shr = |v: f64, s: u32| if s >= 32 { 0 } else { to_bits(v, dtype) >> s };
        // Arithmetic shifts fill with the top bit (of the bit pattern, for u32 too).
        let sar = |v: f64, s: u32| (to_bits(v, dtype) as u32 as i32 >> s.min(31)) as u32 as u64;
        let cases: [ShiftCase; 5] = [
            ("shl", &shl, None),
            ("shr_logical", &shr, None),
            ("shr_arithmetic", &sar, None),
            ("shl 3", &shl, Some(3)),
            ("shr_logical 31", &shr, Some(31)),
        ];
        for (o, (name, f, fixed)) in out.iter().zip(cases) {
            let want: Vec<f64> = xs
                .iter()
                .zip(&ns)
                .map(|(&v, &s)| from_bits(f(v, fixed.unwrap_or(s as u32)), dtype))
                .collect();
            check(
                o,
                dtype,
                &[5, 13],
                &want,
                Class::Exact,
                &format!("{name} {dtype}"),
            );
        }
    }
}
