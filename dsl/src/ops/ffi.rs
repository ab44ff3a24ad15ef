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

use crate::error::Location;
use crate::host::{ffi_function, register_ffi, valid_ffi_name, HostTensor};
use crate::ir::Op;
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::Tensor;

pub use crate::host::{FfiAttr, FfiCall};

/// Registers `f` as the native function `name` (ASCII letters, digits,
/// `_`, `.`, `-`), replacing one registered under that name. `f` gets the
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
        "`{name}` cannot name a native function: use ASCII letters, digits, `_`, `.` and `-`"
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
            .find(|(a, _)| !valid_ffi_name(a) || *a == crate::host::FFI_NAME_ATTR)
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
