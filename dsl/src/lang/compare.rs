//! Comparison and logical operators in kernel bodies.
//!
//! Rust's `<`, `==`, `&&` and `||` must return `bool`, so the kernel macros
//! rewrite them into these functions. The operand types decide what they
//! mean: on plain Rust values they are the ordinary operators (`&&` and `||`
//! still short-circuit); with a [`Tensor`] on either side they build
//! elementwise `pred` tensors.

use crate::trace::tensor::Tensor;

/// A comparison `Self op Rhs` in a kernel body.
#[diagnostic::on_unimplemented(
    message = "cannot compare `{Self}` with `{Rhs}` in a kernel",
    label = "no comparison between `{Self}` and `{Rhs}`",
    note = "comparisons work between Rust values of one type, between tensors, and between a tensor and a Rust number"
)]
pub trait Compare<Rhs: ?Sized> {
    /// `bool` for Rust values, a `pred` [`Tensor`] for tensors.
    type Output;
    /// `self < rhs`.
    fn lt(&self, rhs: &Rhs) -> Self::Output;
    /// `self <= rhs`.
    fn le(&self, rhs: &Rhs) -> Self::Output;
    /// `self > rhs`.
    fn gt(&self, rhs: &Rhs) -> Self::Output;
    /// `self >= rhs`.
    fn ge(&self, rhs: &Rhs) -> Self::Output;
    /// `self == rhs`.
    fn eq(&self, rhs: &Rhs) -> Self::Output;
    /// `self != rhs`.
    fn ne(&self, rhs: &Rhs) -> Self::Output;
}

impl<T: PartialOrd<U> + ?Sized, U: ?Sized> Compare<U> for T {
    type Output = bool;
    fn lt(&self, rhs: &U) -> bool {
        self < rhs
    }
    fn le(&self, rhs: &U) -> bool {
        self <= rhs
    }
    fn gt(&self, rhs: &U) -> bool {
        self > rhs
    }
    fn ge(&self, rhs: &U) -> bool {
        self >= rhs
    }
    fn eq(&self, rhs: &U) -> bool {
        self == rhs
    }
    fn ne(&self, rhs: &U) -> bool {
        self != rhs
    }
}

macro_rules! tensor_compare {
    ($lhs:ty, $rhs:ty, |$a:ident, $b:ident| ($x:expr, $y:expr)) => {
        impl Compare<$rhs> for $lhs {
            type Output = Tensor;
            #[track_caller]
            fn lt(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::lt($x, $y)
            }
            #[track_caller]
            fn le(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::le($x, $y)
            }
            #[track_caller]
            fn gt(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::gt($x, $y)
            }
            #[track_caller]
            fn ge(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::ge($x, $y)
            }
            #[track_caller]
            fn eq(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::eq($x, $y)
            }
            #[track_caller]
            fn ne(&self, rhs: &$rhs) -> Tensor {
                let ($a, $b) = (*self, *rhs);
                Tensor::ne($x, $y)
            }
        }
    };
}

tensor_compare!(Tensor, Tensor, |a, b| (a, b));

macro_rules! scalar_compare {
    ($($s:ty),*) => {$(
        tensor_compare!(Tensor, $s, |a, b| (a, b));
        // `2.0 < x` is `x > 2.0`: the scalar takes the tensor's dtype.
        impl Compare<Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn lt(&self, rhs: &Tensor) -> Tensor {
                Tensor::gt(*rhs, *self)
            }
            #[track_caller]
            fn le(&self, rhs: &Tensor) -> Tensor {
                Tensor::ge(*rhs, *self)
            }
            #[track_caller]
            fn gt(&self, rhs: &Tensor) -> Tensor {
                Tensor::lt(*rhs, *self)
            }
            #[track_caller]
            fn ge(&self, rhs: &Tensor) -> Tensor {
                Tensor::le(*rhs, *self)
            }
            #[track_caller]
            fn eq(&self, rhs: &Tensor) -> Tensor {
                Tensor::eq(*rhs, *self)
            }
            #[track_caller]
            fn ne(&self, rhs: &Tensor) -> Tensor {
                Tensor::ne(*rhs, *self)
            }
        }
    )*};
}
scalar_compare!(f32, f64, i32, i64, u32, usize);

/// `a < b` in a kernel body.
#[track_caller]
pub fn lt<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.lt(b)
}
/// `a <= b` in a kernel body.
#[track_caller]
pub fn le<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.le(b)
}
/// `a > b` in a kernel body.
#[track_caller]
pub fn gt<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.gt(b)
}
/// `a >= b` in a kernel body.
#[track_caller]
pub fn ge<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.ge(b)
}
/// `a == b` in a kernel body.
#[track_caller]
pub fn eq<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.eq(b)
}
/// `a != b` in a kernel body.
#[track_caller]
pub fn ne<A: Compare<B> + ?Sized, B: ?Sized>(a: &A, b: &B) -> A::Output {
    a.ne(b)
}

/// The left side of a comparison in a kernel body, which the kernel macros
/// rewrite `a < b` into: `Cmp(&a).cmp_lt(&b)`. A tensor on the left finds the
/// inherent methods below (the right side is a tensor or any Rust number,
/// literals included); anything else finds [`ComparePlain`] (Rust's
/// comparison, or a number compared with a tensor).
pub struct Cmp<'a, T: ?Sized>(pub &'a T);

macro_rules! cmp_inherent {
    ($($m:ident => $f:ident),*) => {
        impl Cmp<'_, Tensor> {$(
            /// The elementwise comparison, giving a `pred` tensor.
            #[track_caller]
            pub fn $m<O: crate::ops::elementwise::Operand>(&self, rhs: &O) -> Tensor {
                Tensor::$f(*self.0, *rhs)
            }
        )*}
    };
}
cmp_inherent!(cmp_lt => lt, cmp_le => le, cmp_gt => gt, cmp_ge => ge, cmp_eq => eq, cmp_ne => ne);

/// Comparisons whose left side is not a tensor (see [`Cmp`]).
pub trait ComparePlain<U: ?Sized> {
    /// `bool`, or a `pred` tensor when the right side is a tensor.
    type Output;
    /// `<`.
    fn cmp_lt(&self, rhs: &U) -> Self::Output;
    /// `<=`.
    fn cmp_le(&self, rhs: &U) -> Self::Output;
    /// `>`.
    fn cmp_gt(&self, rhs: &U) -> Self::Output;
    /// `>=`.
    fn cmp_ge(&self, rhs: &U) -> Self::Output;
    /// `==`.
    fn cmp_eq(&self, rhs: &U) -> Self::Output;
    /// `!=`.
    fn cmp_ne(&self, rhs: &U) -> Self::Output;
}

impl<T: Compare<U> + ?Sized, U: ?Sized> ComparePlain<U> for Cmp<'_, T> {
    type Output = T::Output;
    #[track_caller]
    fn cmp_lt(&self, rhs: &U) -> T::Output {
        self.0.lt(rhs)
    }
    #[track_caller]
    fn cmp_le(&self, rhs: &U) -> T::Output {
        self.0.le(rhs)
    }
    #[track_caller]
    fn cmp_gt(&self, rhs: &U) -> T::Output {
        self.0.gt(rhs)
    }
    #[track_caller]
    fn cmp_ge(&self, rhs: &U) -> T::Output {
        self.0.ge(rhs)
    }
    #[track_caller]
    fn cmp_eq(&self, rhs: &U) -> T::Output {
        self.0.eq(rhs)
    }
    #[track_caller]
    fn cmp_ne(&self, rhs: &U) -> T::Output {
        self.0.ne(rhs)
    }
}

/// `&&` and `||` in a kernel body: short-circuiting on `bool`, elementwise on `pred` tensors.
#[diagnostic::on_unimplemented(
    message = "cannot combine `{Self}` and `{Rhs}` with `&&` / `||` in a kernel",
    label = "expected two `bool`s or two `pred` tensors",
    note = "to combine a tensor with a Rust bool, branch on the bool with a plain `if`"
)]
pub trait Logic<Rhs> {
    /// `bool` or `Tensor`.
    type Output;
    /// `self && rhs()`.
    fn and(self, rhs: impl FnOnce() -> Rhs) -> Self::Output;
    /// `self || rhs()`.
    fn or(self, rhs: impl FnOnce() -> Rhs) -> Self::Output;
}

impl Logic<bool> for bool {
    type Output = bool;
    fn and(self, rhs: impl FnOnce() -> bool) -> bool {
        self && rhs()
    }
    fn or(self, rhs: impl FnOnce() -> bool) -> bool {
        self || rhs()
    }
}

impl Logic<Tensor> for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn and(self, rhs: impl FnOnce() -> Tensor) -> Tensor {
        Tensor::and(self, rhs())
    }
    #[track_caller]
    fn or(self, rhs: impl FnOnce() -> Tensor) -> Tensor {
        Tensor::or(self, rhs())
    }
}

/// `a && b` in a kernel body.
#[track_caller]
pub fn and<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Output {
    a.and(b)
}

/// `a || b` in a kernel body.
#[track_caller]
pub fn or<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Output {
    a.or(b)
}
