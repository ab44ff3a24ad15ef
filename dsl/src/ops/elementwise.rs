//! Elementwise ops: unary math, binary arithmetic with numpy broadcasting,
//! comparisons, select, clamp, casts, and the operator overloads.

use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Rem, Sub};

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::constant::full_at;
use crate::ops::{BinaryOp, Comparison, Op, UnaryOp};
use crate::shape::{Shape, TensorSpec};
use crate::trace::build;
use crate::trace::tensor::Tensor;

/// A Rust number (or `bool`) usable where a tensor operand is expected; it
/// takes the other operand's dtype.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a tensor operand",
    label = "expected a `Tensor` or a Rust number",
    note = "operands are `Tensor`s or scalars of type f32, f64, i32, i64, u32, usize or bool; scalars take the tensor's dtype"
)]
pub trait Scalar: Copy {
    /// The value as `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
scalar!(f32, f64, i32, i64, u32, usize, u8, i8, i16, u16, u64);

impl Scalar for bool {
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
}

/// Anything usable as the second operand of a binary op: a [`Tensor`] or a [`Scalar`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a tensor operand",
    label = "expected a `Tensor` or a Rust number",
    note = "operands are `Tensor`s or scalars of type f32, f64, i32, i64, u32, usize or bool"
)]
pub trait Operand: Copy {
    /// This operand as a tensor, taking `like`'s dtype if it is a scalar.
    fn to_tensor(self, like: Tensor, loc: &Location) -> Tensor;
    /// The tensor, if this operand is one.
    fn as_tensor(self) -> Option<Tensor>;
    /// The value, if this operand is a Rust number (known while tracing).
    fn static_value(self) -> Option<f64> {
        None
    }
}

impl Operand for Tensor {
    fn to_tensor(self, _like: Tensor, _loc: &Location) -> Tensor {
        self
    }
    fn as_tensor(self) -> Option<Tensor> {
        Some(self)
    }
}

impl<S: Scalar> Operand for S {
    fn to_tensor(self, like: Tensor, loc: &Location) -> Tensor {
        full_at(Vec::new(), self.to_f64(), like.dtype(), loc.clone())
    }
    fn as_tensor(self) -> Option<Tensor> {
        None
    }
    fn static_value(self) -> Option<f64> {
        Some(self.to_f64())
    }
}

/// The numpy broadcast of two shapes.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// `x` broadcast (numpy rules, trailing axes aligned) to `shape`.
pub(crate) fn broadcast_to_at(x: Tensor, shape: &[usize], loc: &Location) -> Tensor {
    let spec = x.spec();
    if spec.shape == shape {
        return x;
    }
    let target = shape.to_vec();
    build("broadcast_to", &[x], loc.clone(), 1, move |s| {
        let src = &s[0];
        if src.rank() > target.len() {
            return Err(format!(
                "cannot broadcast {src} to a lower rank shape {target:?}"
            ));
        }
        let off = target.len() - src.rank();
        for (i, &d) in src.shape.iter().enumerate() {
            if d != 1 && d != target[off + i] {
                return Err(format!("cannot broadcast {src} to shape {target:?}"));
            }
        }
        Ok((
            Op::BroadcastInDim {
                dims: (off..target.len()).collect(),
            },
            vec![TensorSpec::new(target, src.dtype)],
        ))
    })[0]
}

fn unary_check(op: UnaryOp, s: &TensorSpec) -> Result<TensorSpec, String> {
    use UnaryOp::*;
    let d = s.dtype;
    let ok = match op {
        Neg | Abs | Sign => !(d.is_pred() || (d.is_unsigned() && op == Neg)),
        Not => d.is_integer() || d.is_pred(),
        PopCount => d.is_integer(),
        IsFinite => d.is_float(),
        _ => d.is_float(),
    };
    if !ok {
        return Err(format!(
            "{op:?} is not defined for {d} elements{}",
            if d.is_float() {
                ""
            } else {
                "; cast to a float dtype first (x.cast(F32))"
            }
        ));
    }
    let out = if op == IsFinite { DType::Pred } else { d };
    Ok(TensorSpec::new(s.shape.clone(), out))
}

pub(crate) fn unary_at(x: Tensor, op: UnaryOp, loc: Location) -> Tensor {
    // StableHLO's abs and sign reject unsigned integers: there |x| = x and
    // sign(x) = min(x, 1).
    let d = x.dtype();
    if d.is_unsigned() && crate::trace::spec_of(x).is_some() {
        match op {
            UnaryOp::Abs => return x,
            UnaryOp::Sign => {
                let one = full_at(Vec::new(), 1.0, d, loc.clone());
                return binary_at(x, one, BinaryOp::Min, loc);
            }
            _ => {}
        }
    }
    let at = loc.clone();
    let r = build(unary_name(op), &[x], loc, 1, move |s| {
        Ok((Op::Unary(op), vec![unary_check(op, &s[0])?]))
    })[0];
    crate::ops::check::nan_auto(r, unary_name(op), &at);
    r
}

fn unary_name(op: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match op {
        Neg => "neg",
        Abs => "abs",
        Exp => "exp",
        Expm1 => "expm1",
        Log => "log",
        Log1p => "log1p",
        Sqrt => "sqrt",
        Rsqrt => "rsqrt",
        Cbrt => "cbrt",
        Tanh => "tanh",
        Logistic => "sigmoid",
        Sin => "sin",
        Cos => "cos",
        Tan => "tan",
        Floor => "floor",
        Ceil => "ceil",
        Round => "round",
        Sign => "sign",
        Erf => "erf",
        Not => "not",
        IsFinite => "is_finite",
        PopCount => "popcount",
    }
}

fn binary_name(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Add => "add",
        Sub => "sub",
        Mul => "mul",
        Div => "div",
        Rem => "rem",
        Pow => "pow",
        Max => "maximum",
        Min => "minimum",
        Atan2 => "atan2",
        And => "and",
        Or => "or",
        Xor => "xor",
        ShiftLeft => "shift_left",
        ShiftRightLogical => "shift_right_logical",
        ShiftRightArithmetic => "shift_right_arithmetic",
    }
}

/// Checks two operand specs of an elementwise op and returns the broadcast shape.
fn same_dtype_broadcast(name: &str, a: &TensorSpec, b: &TensorSpec) -> Result<Shape, String> {
    if a.dtype != b.dtype {
        return Err(format!(
            "{name} needs operands of one dtype, got {} and {}; convert one with .cast({})",
            a.dtype,
            b.dtype,
            a.dtype.name().to_uppercase()
        ));
    }
    broadcast_shapes(&a.shape, &b.shape).ok_or_else(|| {
        format!(
            "shapes {:?} and {:?} do not broadcast (numpy rules: trailing axes must be equal or 1)",
            a.shape, b.shape
        )
    })
}

/// Whether `a` or `b` is not a tensor of the current trace: `build` then
/// reports that under the op's name, before the placeholder spec such a
/// handle reads as (a scalar f32) could mislead the dtype and shape checks.
fn foreign(a: Tensor, b: Tensor) -> bool {
    crate::trace::spec_of(a).is_none() || crate::trace::spec_of(b).is_none()
}

/// Applies a two-operand elementwise op after checking dtypes and broadcasting.
pub(crate) fn binary_at(a: Tensor, b: Tensor, op: BinaryOp, loc: Location) -> Tensor {
    let name = binary_name(op);
    if foreign(a, b) {
        return build(name, &[a, b], loc, 1, |_| Err(String::new()))[0];
    }
    let (sa, sb) = (a.spec(), b.spec());
    let shape = match same_dtype_broadcast(name, &sa, &sb) {
        Ok(s) => s,
        Err(m) => return build(name, &[a, b], loc, 1, move |_| Err(m))[0],
    };
    let a2 = broadcast_to_at(a, &shape, &loc);
    let b2 = broadcast_to_at(b, &shape, &loc);
    if matches!(op, BinaryOp::Div | BinaryOp::Rem) {
        crate::ops::check::div_auto(b2, name, &loc);
    }
    let at = loc.clone();
    let r = build(name, &[a2, b2], loc, 1, move |s| {
        use BinaryOp::*;
        let d = s[0].dtype;
        let ok = match op {
            And | Or | Xor => d.is_integer() || d.is_pred(),
            ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => d.is_integer(),
            Pow | Atan2 => d.is_float(),
            _ => !d.is_pred(),
        };
        if !ok {
            return Err(format!("{name} is not defined for {d} elements"));
        }
        Ok((Op::Binary(op), vec![s[0].clone()]))
    })[0];
    crate::ops::check::nan_auto(r, name, &at);
    r
}

pub(crate) fn compare_at(a: Tensor, b: Tensor, dir: Comparison, loc: Location) -> Tensor {
    let name = match dir {
        Comparison::Eq => "eq",
        Comparison::Ne => "ne",
        Comparison::Lt => "lt",
        Comparison::Le => "le",
        Comparison::Gt => "gt",
        Comparison::Ge => "ge",
    };
    if foreign(a, b) {
        return build(name, &[a, b], loc, 1, |_| Err(String::new()))[0];
    }
    let shape = match same_dtype_broadcast(name, &a.spec(), &b.spec()) {
        Ok(s) => s,
        Err(m) => return build(name, &[a, b], loc, 1, move |_| Err(m))[0],
    };
    let a2 = broadcast_to_at(a, &shape, &loc);
    let b2 = broadcast_to_at(b, &shape, &loc);
    build(name, &[a2, b2], loc, 1, move |s| {
        Ok((
            Op::Compare(dir),
            vec![TensorSpec::new(s[0].shape.clone(), DType::Pred)],
        ))
    })[0]
}

macro_rules! unary_methods {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(self) -> Tensor {
                unary_at(self, UnaryOp::$op, Location::caller())
            }
        )*}
    };
}

unary_methods! {
    /// `e^x`.
    exp => Exp;
    /// `e^x - 1`, accurate near 0.
    expm1 => Expm1;
    /// Natural logarithm.
    log => Log;
    /// `ln(1 + x)`, accurate near 0.
    log1p => Log1p;
    /// Square root.
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// Cube root.
    cbrt => Cbrt;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// The logistic sigmoid `1 / (1 + e^-x)`.
    sigmoid => Logistic;
    /// Sine.
    sin => Sin;
    /// Cosine.
    cos => Cos;
    /// Tangent.
    tan => Tan;
    /// Round toward -inf.
    floor => Floor;
    /// Round toward +inf.
    ceil => Ceil;
    /// Round half to even.
    round => Round;
    /// -1, 0 or 1 (NaN stays NaN).
    sign => Sign;
    /// The error function.
    erf => Erf;
    /// Absolute value.
    abs => Abs;
    /// Whether each element is finite (gives `pred`).
    is_finite => IsFinite;
    /// Number of set bits of each integer.
    popcount => PopCount;
    /// Logical not of `pred`, bitwise not of integers.
    logical_not => Not;
}

/// Methods `name(self, other: impl Operand)` that build `$build(self, other,
/// $kind::$op, loc)`: the binary arithmetic and the comparisons.
macro_rules! operand_methods {
    ($build:ident, $kind:ident: $($(#[$m:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$m])*
            #[track_caller]
            pub fn $name(self, other: impl Operand) -> Tensor {
                let loc = Location::caller();
                let o = other.to_tensor(self, &loc);
                $build(self, o, $kind::$op, loc)
            }
        )*}
    };
}

operand_methods! {
    binary_at, BinaryOp:
    /// Elementwise maximum (NaN-propagating).
    maximum => Max;
    /// Elementwise minimum (NaN-propagating).
    minimum => Min;
    /// `self ^ other` for floats.
    pow => Pow;
    /// `atan2(self, other)`.
    atan2 => Atan2;
    /// Logical and of `pred`, bitwise and of integers.
    and => And;
    /// Logical or of `pred`, bitwise or of integers.
    or => Or;
    /// Logical xor of `pred`, bitwise xor of integers.
    xor => Xor;
    /// Integer shift left.
    shift_left => ShiftLeft;
    /// Integer shift right, filling with zeros.
    shift_right_logical => ShiftRightLogical;
    /// Integer shift right, filling with the sign bit.
    shift_right_arithmetic => ShiftRightArithmetic;
}

operand_methods! {
    compare_at, Comparison:
    /// `self == other`, elementwise (gives `pred`).
    eq => Eq;
    /// `self != other`, elementwise.
    ne => Ne;
    /// `self < other`, elementwise.
    lt => Lt;
    /// `self <= other`, elementwise.
    le => Le;
    /// `self > other`, elementwise.
    gt => Gt;
    /// `self >= other`, elementwise.
    ge => Ge;
}

impl Tensor {
    /// Converts elements to `dtype` (floats round to nearest; float to int truncates).
    #[track_caller]
    pub fn cast(self, dtype: DType) -> Tensor {
        if self.dtype() == dtype && crate::trace::spec_of(self).is_some() {
            return self;
        }
        build("cast", &[self], Location::caller(), 1, move |s| {
            Ok((
                Op::Convert,
                vec![TensorSpec::new(s[0].shape.clone(), dtype)],
            ))
        })[0]
    }

    /// `on_true` where `self` (a `pred` tensor) is true, else `on_false`; all
    /// three broadcast. A scalar branch takes the other branch's dtype (f32
    /// when both are scalars).
    #[track_caller]
    pub fn select(self, on_true: impl Operand, on_false: impl Operand) -> Tensor {
        let loc = Location::caller();
        // A scalar branch takes the other branch's dtype; two scalars are f32.
        let like = match on_true.as_tensor().or(on_false.as_tensor()) {
            Some(t) => t,
            None => crate::ops::constant::full_at(Vec::new(), 0.0, DType::F32, loc.clone()),
        };
        let t = on_true.to_tensor(like, &loc);
        let f = on_false.to_tensor(like, &loc);
        let shape = [self.shape(), t.shape(), f.shape()]
            .iter()
            .try_fold(Vec::new(), |acc, s| broadcast_shapes(&acc, s));
        let Some(shape) = shape else {
            let m = "predicate and branches do not broadcast to one shape".to_string();
            return build("select", &[self, t, f], loc, 1, move |_| Err(m))[0];
        };
        let p = broadcast_to_at(self, &shape, &loc);
        let t = broadcast_to_at(t, &shape, &loc);
        let f = broadcast_to_at(f, &shape, &loc);
        build("select", &[p, t, f], loc, 1, |s| {
            if s[0].dtype != DType::Pred {
                return Err(format!(
                    "the condition of select must be pred, got {}; compare first (x.gt(0.0))",
                    s[0].dtype
                ));
            }
            if s[1].dtype != s[2].dtype {
                return Err(format!(
                    "select branches have different dtypes {} and {}",
                    s[1].dtype, s[2].dtype
                ));
            }
            Ok((Op::Select, vec![s[1].clone()]))
        })[0]
    }

    /// Limits every element to `[min, max]`: `minimum(maximum(self, min), max)`,
    /// so where `min > max` the result is `max` (as numpy's `clip`).
    #[track_caller]
    pub fn clamp(self, min: impl Operand, max: impl Operand) -> Tensor {
        let loc = Location::caller();
        let lo = broadcast_to_at(min.to_tensor(self, &loc), &self.shape(), &loc);
        let hi = broadcast_to_at(max.to_tensor(self, &loc), &self.shape(), &loc);
        build("clamp", &[lo, self, hi], loc, 1, |s| {
            if s[0].dtype != s[1].dtype || s[2].dtype != s[1].dtype {
                return Err("clamp bounds must have the tensor's dtype".into());
            }
            Ok((Op::Clamp, vec![s[1].clone()]))
        })[0]
    }

    /// `max(self, 0)`.
    #[track_caller]
    pub fn relu(self) -> Tensor {
        self.maximum(0.0)
    }

    /// `1 / self`.
    #[track_caller]
    pub fn recip(self) -> Tensor {
        let loc = Location::caller();
        let one = 1.0.to_tensor(self, &loc);
        binary_at(one, self, BinaryOp::Div, loc)
    }

    /// `self * self`.
    #[track_caller]
    pub fn square(self) -> Tensor {
        binary_at(self, self, BinaryOp::Mul, Location::caller())
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl<O: Operand> $trait<O> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: O) -> Tensor {
                let loc = Location::caller();
                let r = rhs.to_tensor(self, &loc);
                binary_at(self, r, BinaryOp::$op, loc)
            }
        }
        // A number on the left: one float type and one integer type, so
        // that an unsuffixed literal there has one impl to take and the
        // result's type is known at once (`(2.0 * x).exp()`, `(3 * n).cast(F32)`);
        // with impls for f32 too, `2.0 * x` left the literal's type open and
        // a method called on the product failed to compile (E0282). Other
        // scalar types go on the right (`x * s` for `s: f32`), as any
        // `Operand` does.
        binary_operator!(@scalar_lhs $trait, $method, $op, f64, i32);
    };
    (@scalar_lhs $trait:ident, $method:ident, $op:ident, $($s:ty),*) => {$(
        impl $trait<Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                let loc = Location::caller();
                let l = self.to_tensor(rhs, &loc);
                binary_at(l, rhs, BinaryOp::$op, loc)
            }
        }
    )*};
}

binary_operator!(Add, add, Add);
binary_operator!(Sub, sub, Sub);
binary_operator!(Mul, mul, Mul);
binary_operator!(Div, div, Div);
binary_operator!(Rem, rem, Rem);

macro_rules! logic_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl<O: Operand> $trait<O> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: O) -> Tensor {
                let loc = Location::caller();
                let r = rhs.to_tensor(self, &loc);
                binary_at(self, r, BinaryOp::$op, loc)
            }
        }
    };
}

logic_operator!(BitAnd, bitand, And);
logic_operator!(BitOr, bitor, Or);
logic_operator!(BitXor, bitxor, Xor);

impl Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        unary_at(self, UnaryOp::Neg, Location::caller())
    }
}

impl Not for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn not(self) -> Tensor {
        unary_at(self, UnaryOp::Not, Location::caller())
    }
}
