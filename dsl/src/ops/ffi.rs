//! Native Rust code inside a kernel (XLA's typed FFI): a function
//! registered by name ([`register`]) and called from traced code
//! ([`ffi_call`]) runs on the device's own thread when the program runs —
//! on the CPU plugin through its FFI extension, on the interpreter directly
//! — with its arguments and results as host tensors.
//!
//! ```
//! use tessel_dsl::ops::ffi::{ffi_call, register};
//! use tessel_dsl::prelude::*;
//! use tessel_dsl::kernel::Kernel;
//! // Rust code XLA cannot express: a running maximum.
//! register("running_max", |call| {
//!     let x = call.args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
//!     let y: Vec<f32> = x.iter().scan(f32::MIN, |m, &v| { *m = m.max(v); Some(*m) }).collect();
//!     Ok(vec![HostTensor::from_vec(y, [x.len()]).map_err(|e| e.to_string())?])
//! });
//! let k = Kernel::new("running", |a: &[Tensor]| {
//!     ffi_call("running_max", &[a[0] * 2.0], &[a[0].spec()])[0] + 1.0
//! });
//! let x = HostTensor::from_vec(vec![1.0f32, 3.0, 2.0, 5.0], [4])?;
//! for dev in [Device::cpu()?, Device::interpreter()] {
//!     let y = k.run(&dev, &[&x])?;
//!     assert_eq!(y[0].to_vec::<f32>()?, vec![3.0, 7.0, 7.0, 11.0]);
//! }
//! # Ok::<(), tessel_dsl::Error>(())
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::dtype::Element;
use crate::error::Location;
use crate::host::{ffi_function, register_ffi, valid_ffi_name, HostTensor};
use crate::ir::Op;
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::Tensor;

pub use crate::host::{FfiAttr, FfiCall};

/// Registers `f` as the native function `name` (ASCII letters, digits,
/// `_`, `.`, `-`, `:`), replacing one registered under that name. `f` gets the
/// call's arguments as host tensors and its attributes, and returns its
/// results, whose types must be those the call declares, or a message:
/// the run that called it fails with that message, naming the function.
///
/// # Panics
///
/// If `name` is not a valid name (a programming error, like a malformed
/// format string).
pub fn register(
    name: &str,
    f: impl Fn(&FfiCall<'_>) -> Result<Vec<HostTensor>, String> + Send + Sync + 'static,
) {
    assert!(
        valid_ffi_name(name),
        "`{name}` cannot name a native function: use ASCII letters, digits, `_`, `.`, `-` and `:`"
    );
    register_ffi(name, Arc::new(f));
}

/// Calls the native function `name` on `args`; its results have the types
/// `results` (JAX's `jax.ffi.ffi_call`). An unregistered name, an invalid
/// one or no result is a kernel error at this line. The call has no
/// gradient: give it one with [`custom_vjp`](crate::autodiff::custom_vjp).
/// Under [`vmap`](crate::vmap::vmap) the function is called once per
/// example.
#[track_caller]
pub fn ffi_call(name: &str, args: &[Tensor], results: &[TensorSpec]) -> Vec<Tensor> {
    ffi_call_at(name, args, results, &[], Location::caller())
}

/// [`ffi_call`] with static attributes the function reads by name
/// ([`FfiCall::f64`], [`FfiCall::i64`], [`FfiCall::attr`]).
#[track_caller]
pub fn ffi_call_with(
    name: &str,
    args: &[Tensor],
    results: &[TensorSpec],
    attrs: &[(&str, FfiAttr)],
) -> Vec<Tensor> {
    ffi_call_at(name, args, results, attrs, Location::caller())
}

/// Whether `name` can name an attribute: an identifier (ASCII letters,
/// digits and `_`, not starting with a digit), as the program text needs.
fn valid_attr_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn ffi_call_at(
    name: &str,
    args: &[Tensor],
    results: &[TensorSpec],
    attrs: &[(&str, FfiAttr)],
    loc: Location,
) -> Vec<Tensor> {
    let n = results.len().max(1);
    let problem = if !valid_ffi_name(name) {
        Some(format!("`{name}` cannot name a native function"))
    } else if ffi_function(name).is_none() {
        Some(format!(
            "no native function `{name}` is registered (tessel::ops::ffi::register it before tracing)"
        ))
    } else if results.is_empty() {
        Some("a native call needs at least one result".to_string())
    } else {
        attrs
            .iter()
            .find(|(a, _)| !valid_attr_name(a) || *a == crate::host::FFI_NAME_ATTR)
            .map(|(a, _)| format!("`{a}` cannot name an attribute of a native call"))
    };
    let mut sorted: Vec<(String, FfiAttr)> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let (target, specs) = (name.to_string(), results.to_vec());
    build("ffi_call", args, loc, n, move |_| match problem {
        Some(m) => Err(m),
        None => Ok((
            Op::CustomCall {
                target,
                attrs: sorted,
            },
            specs,
        )),
    })
}

/// Calls the Rust closure `f` from traced code (JAX's `jax.pure_callback`):
/// registered under a name of its own, then called as [`ffi_call`]. `f`
/// must be pure — the same results for the same arguments — since XLA may
/// run it any number of times, or not at all if its results are unused.
#[track_caller]
pub fn pure_callback(
    f: impl Fn(&[HostTensor]) -> Result<Vec<HostTensor>, String> + Send + Sync + 'static,
    args: &[Tensor],
    results: &[TensorSpec],
) -> Vec<Tensor> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("pure_callback.{}", NEXT.fetch_add(1, Ordering::Relaxed));
    register(&name, move |call| f(call.args));
    ffi_call_at(&name, args, results, &[], Location::caller())
}

/// One buffer of a native function written with
/// [`#[ffi_function]`](crate::ffi_function): its shape and its elements, row
/// major, of the host type `T` (`f32`, `i32`, `half::bf16`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct FfiBuffer<T> {
    /// The extents, outermost first.
    pub shape: Vec<usize>,
    /// The elements, row major.
    pub data: Vec<T>,
}

impl<T: Element> FfiBuffer<T> {
    /// A buffer of `shape` holding `data`.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<T>) -> Self {
        FfiBuffer {
            shape: shape.into(),
            data,
        }
    }
}

/// A parameter type of an `#[ffi_function]`: read from one argument.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an argument of a native function",
    label = "not an `FfiBuffer<T>`",
    note = "arguments are `FfiBuffer<T>` for an element type `T` (f32, f64, i32, u8, half::bf16, ...); \
            static values are attributes: mark them `#[attr]`"
)]
pub trait FfiArg: Sized {
    /// The argument as this type.
    ///
    /// # Errors
    ///
    /// A message when its element type is another.
    fn from_arg(t: &HostTensor) -> Result<Self, String>;
}

impl<T: Element> FfiArg for FfiBuffer<T> {
    fn from_arg(t: &HostTensor) -> Result<Self, String> {
        let data = t.to_vec::<T>().map_err(|e| e.to_string())?;
        Ok(FfiBuffer {
            shape: t.shape().to_vec(),
            data,
        })
    }
}

/// An `#[attr]` parameter type of an `#[ffi_function]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an attribute of a native function",
    label = "not f64, i64, bool or String",
    note = "attributes are f64, f32, i64, i32, usize, bool or String"
)]
pub trait FfiAttrValue: Sized {
    /// The attribute as stored in the call.
    fn to_attr(&self) -> FfiAttr;
    /// The attribute read back.
    ///
    /// # Errors
    ///
    /// A message when the call's attribute has another type.
    fn from_attr(a: &FfiAttr) -> Result<Self, String>;
}

macro_rules! number_attr {
    ($($t:ty => $variant:ident as $raw:ty;)*) => {$(
        impl FfiAttrValue for $t {
            fn to_attr(&self) -> FfiAttr {
                FfiAttr::$variant(*self as $raw)
            }
            fn from_attr(a: &FfiAttr) -> Result<Self, String> {
                match a {
                    FfiAttr::$variant(v) => Ok(*v as $t),
                    other => Err(format!("expected a {}, got {other:?}", stringify!($t))),
                }
            }
        }
    )*};
}
number_attr! {
    f64 => F64 as f64;
    f32 => F64 as f64;
    i64 => I64 as i64;
    i32 => I64 as i64;
    usize => I64 as i64;
}

impl FfiAttrValue for bool {
    fn to_attr(&self) -> FfiAttr {
        FfiAttr::I64(i64::from(*self))
    }
    fn from_attr(a: &FfiAttr) -> Result<Self, String> {
        match a {
            FfiAttr::I64(v) => Ok(*v != 0),
            other => Err(format!("expected a bool, got {other:?}")),
        }
    }
}

impl FfiAttrValue for String {
    fn to_attr(&self) -> FfiAttr {
        FfiAttr::Str(self.clone())
    }
    fn from_attr(a: &FfiAttr) -> Result<Self, String> {
        match a {
            FfiAttr::Str(s) => Ok(s.clone()),
            other => Err(format!("expected a string, got {other:?}")),
        }
    }
}

/// What an `#[ffi_function]` returns on success: one [`FfiBuffer`] or a
/// tuple of them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the results of a native function",
    label = "not an `FfiBuffer<T>` or a tuple of them",
    note = "a native function returns `Result<FfiBuffer<T>, String>` or `Result<(FfiBuffer<A>, FfiBuffer<B>, ..), String>`"
)]
pub trait FfiResults {
    /// The results as host tensors.
    ///
    /// # Errors
    ///
    /// A message when a buffer's elements do not fill its shape.
    fn into_results(self) -> Result<Vec<HostTensor>, String>;
}

impl<T: Element> FfiResults for FfiBuffer<T> {
    fn into_results(self) -> Result<Vec<HostTensor>, String> {
        Ok(vec![
            HostTensor::from_vec(self.data, self.shape).map_err(|e| e.to_string())?
        ])
    }
}

macro_rules! tuple_results {
    ($(($($n:ident $i:tt),*))*) => {$(
        impl<$($n: FfiResults),*> FfiResults for ($($n,)*) {
            fn into_results(self) -> Result<Vec<HostTensor>, String> {
                let mut out = Vec::new();
                $(out.extend(self.$i.into_results()?);)*
                Ok(out)
            }
        }
    )*};
}
tuple_results! {
    (A 0)
    (A 0, B 1)
    (A 0, B 1, C 2)
    (A 0, B 1, C 2, D 3)
}

/// The argument `i` of a call of the native function `name`, as `T` (what
/// `#[ffi_function]`'s registration reads).
#[doc(hidden)]
pub fn ffi_arg<T: FfiArg>(name: &str, call: &FfiCall<'_>, i: usize) -> Result<T, String> {
    let t = call.args.get(i).ok_or_else(|| {
        format!(
            "`{name}` takes more arguments than the {} given",
            call.args.len()
        )
    })?;
    T::from_arg(t).map_err(|m| format!("argument {i} ({}): {m}", t.spec()))
}

/// The attribute `key` of a call, as `T` (what `#[ffi_function]`'s
/// registration reads).
#[doc(hidden)]
pub fn ffi_attr_of<T: FfiAttrValue>(call: &FfiCall<'_>, key: &str) -> Result<T, String> {
    let a = call
        .attr(key)
        .ok_or_else(|| format!("the call has no attribute `{key}`"))?;
    T::from_attr(a).map_err(|m| format!("attribute `{key}`: {m}"))
}
