//! Elementwise ops: unary and binary arithmetic, comparisons, `select`,
//! `clamp` and `convert`, with XLA's integer and NaN rules (see the module
//! docs of [`interp`](super)).

use crate::dtype::DType;
use crate::interp::math::{erf, int_pow, int_pow_unsigned};
use crate::interp::value::{
    bits, daz, int_cmp, int_key, int_to_f64, round, rounder, wrap, wrapper, Data, Val,
};
use crate::ir::{BinaryOp, Comparison, UnaryOp};

type R<T> = Result<T, String>;

/// A function of one float element.
type FloatFn = fn(f64) -> f64;

fn identity(a: f64) -> f64 {
    a
}

fn not_defined(op: impl std::fmt::Debug, d: DType) -> String {
    format!("{op:?} is not defined for {d} elements")
}

/// IEEE `maximum` as XLA computes it: a NaN operand gives NaN, `+0 > -0`;
/// the operands compare as `z` reads them, the winner keeps its bits.
pub(crate) fn fmax_with(a: f64, b: f64, z: fn(f64) -> f64) -> f64 {
    let (x, y) = (z(a), z(b));
    if x.is_nan() || x > y {
        a
    } else if y.is_nan() || y > x || x.is_sign_negative() {
        b
    } else {
        a
    }
}

/// IEEE `minimum` as XLA computes it: a NaN operand gives NaN, `-0 < +0`;
/// the operands compare as `z` reads them, the winner keeps its bits.
pub(crate) fn fmin_with(a: f64, b: f64, z: fn(f64) -> f64) -> f64 {
    let (x, y) = (z(a), z(b));
    if x.is_nan() || x < y {
        a
    } else if y.is_nan() || y < x || y.is_sign_negative() {
        b
    } else {
        a
    }
}

/// `logistic` as XLA expands it, `1 / (1 + exp(-x))`, each of the three
/// ops rounded: to the dtype for f64, f32 and f16 (so an f16 logistic is 0
/// from about -11.1 down, where `exp(-x)` overflows f16, although the
/// exact value is an f16 subnormal until about -16.6), and to f32 for
/// bf16 and fp8, which the CPU computes in f32 and rounds once at the end.
fn logistic(d: DType, v: &[f64]) -> Vec<f64> {
    let wide = if matches!(d, DType::BF16 | DType::F8E4M3FN | DType::F8E5M2) {
        DType::F32
    } else {
        d
    };
    let (z, step, r) = (daz(d), rounder(wide), rounder(d));
    v.iter()
        .map(|&a| {
            let e = step((-z(a)).exp());
            let s = step(1.0 + e);
            r(step(1.0 / s))
        })
        .collect()
}

/// One unary op.
pub(crate) fn unary(op: UnaryOp, x: &Val) -> R<Val> {
    use UnaryOp::*;
    let d = x.dtype;
    match &x.data {
        Data::F(v) => {
            if op == IsFinite {
                let out = v.iter().map(|a| i64::from(a.is_finite())).collect();
                return Val::new(DType::Pred, x.shape.clone(), Data::I(out));
            }
            let f: fn(f64) -> f64 = match op {
                Neg => |a| -a,
                Abs => f64::abs,
                Exp => f64::exp,
                Expm1 => f64::exp_m1,
                Log => f64::ln,
                Log1p => f64::ln_1p,
                Sqrt => f64::sqrt,
                Rsqrt => |a| 1.0 / a.sqrt(),
                Cbrt => f64::cbrt,
                Tanh => f64::tanh,
                Sin => f64::sin,
                Cos => f64::cos,
                Tan => f64::tan,
                Floor => f64::floor,
                Ceil => f64::ceil,
                Round => f64::round_ties_even,
                Sign => |a| {
                    if a.is_nan() || a == 0.0 {
                        a
                    } else {
                        a.signum()
                    }
                },
                Erf => erf,
                Logistic => return Val::new(d, x.shape.clone(), Data::F(logistic(d, v))),
                Not | PopCount | IsFinite => return Err(not_defined(op, d)),
            };
            // Negation and absolute value only move the sign bit: they keep
            // subnormals, which arithmetic reads as zero and flushes.
            let (z, r) = if matches!(op, Neg | Abs) {
                (identity as FloatFn, identity as FloatFn)
            } else {
                (daz(d), rounder(d))
            };
            let out = v.iter().map(|&a| r(f(z(a)))).collect();
            Val::new(d, x.shape.clone(), Data::F(out))
        }
        Data::I(v) => {
            let w = wrapper(d);
            let nbits = bits(d);
            // Unsigned values (u64 ones from 2^63 up held as negative
            // numbers) are their own absolute value, and their sign is 0 or 1.
            let unsigned = d.is_unsigned();
            let f: Box<dyn Fn(i64) -> i64> = match op {
                Neg if !d.is_pred() => Box::new(|a: i64| w(a.wrapping_neg())),
                Abs if unsigned => Box::new(|a: i64| a),
                Abs if !d.is_pred() => Box::new(|a: i64| w(a.wrapping_abs())),
                Sign if unsigned => Box::new(|a: i64| i64::from(a != 0)),
                Sign if !d.is_pred() => Box::new(i64::signum),
                Not => Box::new(|a: i64| w(!a)),
                PopCount if !d.is_pred() => {
                    let mask = if nbits >= 64 {
                        u64::MAX
                    } else {
                        (1u64 << nbits) - 1
                    };
                    Box::new(move |a: i64| i64::from((a as u64 & mask).count_ones()))
                }
                _ => return Err(not_defined(op, d)),
            };
            let out = v.iter().map(|&a| f(a)).collect();
            Val::new(d, x.shape.clone(), Data::I(out))
        }
    }
}

fn same_shape(a: &Val, b: &Val) -> R<()> {
    if a.shape != b.shape || a.dtype != b.dtype {
        return Err(format!(
            "operands {} and {} differ in type",
            a.spec(),
            b.spec()
        ));
    }
    Ok(())
}

/// The float function of a binary op on `dtype`: operands read as the CPU
/// reads them ([`daz`]), the result rounded to the dtype ([`rounder`]).
pub(crate) fn float_binary(op: BinaryOp, dtype: DType) -> Option<Box<dyn Fn(f64, f64) -> f64>> {
    use BinaryOp::*;
    let (z, r) = (daz(dtype), rounder(dtype));
    let f: fn(f64, f64) -> f64 = match op {
        Max => return Some(Box::new(move |a, b| fmax_with(a, b, z))),
        Min => return Some(Box::new(move |a, b| fmin_with(a, b, z))),
        Add => |a, b| a + b,
        Sub => |a, b| a - b,
        Mul => |a, b| a * b,
        Div => |a, b| a / b,
        Rem => |a, b| a % b,
        Pow => f64::powf,
        Atan2 => f64::atan2,
        _ => return None,
    };
    Some(Box::new(move |a, b| r(f(z(a), z(b)))))
}

/// The integer function of a binary op on `dtype`, wrapping at its width
/// (u64 operands and results are bit patterns: sums, products and bitwise
/// ops are the same bits as on i64, orderings, quotients and remainders are
/// taken unsigned).
pub(crate) fn int_binary(op: BinaryOp, d: DType) -> Option<Box<dyn Fn(i64, i64) -> i64>> {
    use BinaryOp::*;
    if d == DType::U64 {
        match op {
            Div => {
                return Some(Box::new(|a: i64, b| {
                    if b == 0 {
                        -1
                    } else {
                        ((a as u64) / (b as u64)) as i64
                    }
                }))
            }
            Rem => {
                return Some(Box::new(|a: i64, b| {
                    if b == 0 {
                        a
                    } else {
                        ((a as u64) % (b as u64)) as i64
                    }
                }))
            }
            Pow => return Some(Box::new(|a: i64, b| int_pow_unsigned(a, b as u64, |x| x))),
            _ => {}
        }
    }
    let w = wrapper(d);
    let key = int_key(d);
    let nbits = bits(d);
    let mask = if nbits >= 64 {
        u64::MAX
    } else {
        (1u64 << nbits) - 1
    };
    // The value as a signed integer of its width (unsigned values with the
    // top bit set become negative).
    let signed = move |a: i64| -> i64 {
        if nbits >= 64 {
            a
        } else {
            let s = 64 - nbits;
            (a << s) >> s
        }
    };
    let arith = !d.is_pred();
    Some(match op {
        Add if arith => Box::new(move |a: i64, b| w(a.wrapping_add(b))),
        Sub if arith => Box::new(move |a: i64, b| w(a.wrapping_sub(b))),
        Mul if arith => Box::new(move |a: i64, b| w(a.wrapping_mul(b))),
        Div if arith => {
            Box::new(move |a: i64, b| if b == 0 { w(-1) } else { w(a.wrapping_div(b)) })
        }
        Rem if arith => Box::new(move |a: i64, b| if b == 0 { a } else { w(a.wrapping_rem(b)) }),
        Pow if arith => Box::new(move |a: i64, b| int_pow(a, b, w)),
        Max => Box::new(move |a: i64, b| if key(b) > key(a) { b } else { a }),
        Min => Box::new(move |a: i64, b| if key(b) < key(a) { b } else { a }),
        And => Box::new(|a: i64, b| a & b),
        Or => Box::new(|a: i64, b| a | b),
        Xor => Box::new(move |a: i64, b| w(a ^ b)),
        ShiftLeft if arith => Box::new(move |a: i64, b| {
            let s = b as u64 & mask;
            if s >= u64::from(nbits) {
                0
            } else {
                w(a.wrapping_shl(s as u32))
            }
        }),
        ShiftRightLogical if arith => Box::new(move |a: i64, b| {
            let s = b as u64 & mask;
            if s >= u64::from(nbits) {
                0
            } else {
                w(((a as u64 & mask) >> s) as i64)
            }
        }),
        ShiftRightArithmetic if arith => Box::new(move |a: i64, b| {
            let s = (b as u64 & mask).min(u64::from(nbits) - 1);
            w(signed(a) >> s)
        }),
        _ => return None,
    })
}

/// One binary op on operands of one type and shape.
pub(crate) fn binary(op: BinaryOp, a: &Val, b: &Val) -> R<Val> {
    same_shape(a, b)?;
    let d = a.dtype;
    let data = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let f = float_binary(op, d).ok_or_else(|| not_defined(op, d))?;
            Data::F(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        (Data::I(x), Data::I(y)) => {
            let f = int_binary(op, d).ok_or_else(|| not_defined(op, d))?;
            Data::I(x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect())
        }
        _ => return Err(not_defined(op, d)),
    };
    Val::new(d, a.shape.clone(), data)
}

/// An elementwise comparison, giving `pred` (IEEE for floats: NaN compares
/// unequal to everything, itself included).
pub(crate) fn compare(dir: Comparison, a: &Val, b: &Val) -> R<Val> {
    use std::cmp::Ordering::*;
    same_shape(a, b)?;
    let test = move |o: Option<std::cmp::Ordering>| -> i64 {
        i64::from(match dir {
            Comparison::Eq => o == Some(Equal),
            Comparison::Ne => o != Some(Equal),
            Comparison::Lt => o == Some(Less),
            Comparison::Le => matches!(o, Some(Less | Equal)),
            Comparison::Gt => o == Some(Greater),
            Comparison::Ge => matches!(o, Some(Greater | Equal)),
        })
    };
    let out = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let z = daz(a.dtype);
            x.iter()
                .zip(y)
                .map(|(&p, &q)| test(z(p).partial_cmp(&z(q))))
                .collect()
        }
        (Data::I(x), Data::I(y)) => {
            let cmp = int_cmp(a.dtype);
            x.iter()
                .zip(y)
                .map(|(p, q)| test(Some(cmp(p, q))))
                .collect()
        }
        _ => return Err("compare operands differ in kind".into()),
    };
    Val::new(DType::Pred, a.shape.clone(), Data::I(out))
}

/// Element `i` of `v`, or its only element when it is a scalar.
fn at(v: &Val, i: usize) -> usize {
    if v.len() == 1 {
        0
    } else {
        i
    }
}

/// `select(pred, on_true, on_false)`; `pred` may be a scalar.
pub(crate) fn select(p: &Val, t: &Val, f: &Val) -> R<Val> {
    same_shape(t, f)?;
    if p.dtype != DType::Pred
        || (p.shape != t.shape && p.len() != 1 || p.shape.len() > t.shape.len())
    {
        return Err(format!(
            "select predicate {} does not fit {}",
            p.spec(),
            t.spec()
        ));
    }
    let n = t.len();
    let pick = |i: usize| p.i64_at(at(p, i)) != 0;
    let data = match (&t.data, &f.data) {
        (Data::F(x), Data::F(y)) => {
            Data::F((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        (Data::I(x), Data::I(y)) => {
            Data::I((0..n).map(|i| if pick(i) { x[i] } else { y[i] }).collect())
        }
        _ => return Err("select branches differ in kind".into()),
    };
    Val::new(t.dtype, t.shape.clone(), data)
}

/// `clamp(min, x, max)` = `min(max(x, min), max)`; the bounds may be scalars.
pub(crate) fn clamp(lo: &Val, x: &Val, hi: &Val) -> R<Val> {
    for b in [lo, hi] {
        if b.dtype != x.dtype || (b.shape != x.shape && b.len() != 1) {
            return Err(format!(
                "clamp bound {} does not fit {}",
                b.spec(),
                x.spec()
            ));
        }
    }
    let n = x.len();
    let data = match (&lo.data, &x.data, &hi.data) {
        (Data::F(l), Data::F(v), Data::F(h)) => {
            let z = daz(x.dtype);
            Data::F(
                (0..n)
                    .map(|i| fmin_with(fmax_with(v[i], l[at(lo, i)], z), h[at(hi, i)], z))
                    .collect(),
            )
        }
        (Data::I(l), Data::I(v), Data::I(h)) => {
            // The key is its own inverse.
            let key = int_key(x.dtype);
            Data::I(
                (0..n)
                    .map(|i| key(key(v[i]).max(key(l[at(lo, i)])).min(key(h[at(hi, i)]))))
                    .collect(),
            )
        }
        _ => return Err("clamp operands differ in kind".into()),
    };
    Val::new(x.dtype, x.shape.clone(), data)
}

/// Float to integer as XLA converts: toward zero, saturating at the
/// target's range, NaN to 0.
fn float_to_int(to: DType, a: f64) -> i64 {
    match to {
        DType::S8 => i64::from(a as i8),
        DType::S16 => i64::from(a as i16),
        DType::S32 => i64::from(a as i32),
        DType::U8 => i64::from(a as u8),
        DType::U16 => i64::from(a as u16),
        DType::U32 => i64::from(a as u32),
        // Held as its bit pattern.
        DType::U64 => a as u64 as i64,
        DType::Pred => i64::from(a != 0.0),
        _ => a as i64,
    }
}

/// Element type conversion to `to`.
pub(crate) fn convert(x: &Val, to: DType) -> R<Val> {
    let data = match &x.data {
        Data::F(v) if to.is_float() => {
            // Conversions between f64 and f32 (or bf16, through f32) run on
            // the CPU's float unit, which flushes subnormals; the others
            // are bit manipulations that keep them.
            let fpu = |d: DType| matches!(d, DType::F32 | DType::F64 | DType::BF16);
            let wide = |d: DType| d == DType::F64;
            let (z, r): (FloatFn, FloatFn) =
                if fpu(x.dtype) && fpu(to) && (wide(x.dtype) != wide(to)) {
                    (daz(x.dtype), rounder(to))
                } else {
                    (|a| a, |a| a)
                };
            Data::F(v.iter().map(|&a| round(to, r(z(a)))).collect())
        }
        Data::F(v) => {
            let z = daz(x.dtype);
            Data::I(v.iter().map(|&a| float_to_int(to, z(a))).collect())
        }
        Data::I(v) if to.is_float() => {
            let from = x.dtype;
            Data::F(
                v.iter()
                    .map(|&a| {
                        if to == DType::F64 {
                            int_to_f64(from, a)
                        } else if from == DType::U64 {
                            round(to, f64::from(a as u64 as f32))
                        } else {
                            round(to, f64::from(a as f32))
                        }
                    })
                    .collect(),
            )
        }
        Data::I(v) if to.is_pred() => Data::I(v.iter().map(|&a| i64::from(a != 0)).collect()),
        Data::I(v) => Data::I(v.iter().map(|&a| wrap(to, a)).collect()),
    };
    Val::new(to, x.shape.clone(), data)
}
