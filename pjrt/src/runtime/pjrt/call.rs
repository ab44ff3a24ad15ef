//! The one checked PJRT call: look the function up in the plugin's table,
//! call it with its args struct, and turn the `PJRT_Error*` it returns into a
//! [`DeviceError`], destroying the error.
//!
//! Every PJRT function the runtime calls goes through [`pjrt_call!`], except
//! the three error functions themselves (`PJRT_Error_GetCode`,
//! `PJRT_Error_Message`, `PJRT_Error_Destroy`), which `super::error` calls
//! directly to take an error apart. So the ownership argument for returned
//! errors is written once, in [`call`], and each call site's `unsafe` block
//! only has to say why its args struct meets that function's preconditions.

use super::api::Api;
use super::args::Args;
use super::error;
use super::ffi;
use crate::error::DeviceError;

/// A PJRT API function: takes a pointer to its args struct and returns NULL
/// on success or an error that the caller owns.
pub(crate) type PjrtFn<A> = unsafe extern "C" fn(*mut A) -> *mut ffi::PJRT_Error;

/// Calls `f`, the PJRT function `name` of `api`'s plugin, with `args`; a
/// returned error becomes the [`DeviceError`] for `name` (see
/// `PjrtStatus::into_device_error`) and is destroyed.
///
/// The type parameter ties the args struct to the function: `f` comes from
/// the plugin's table with its bindgen signature, so `args` can only be the
/// struct that function takes.
///
/// # Safety
///
/// `f` must be a function of the plugin behind `api`, and `args` must meet
/// that function's preconditions as the PJRT C API states them: every handle
/// in it live and created by this plugin, every pointer in it valid for what
/// the function reads or writes through it for as long as it does so (the
/// call, or until an event the call returns has completed), and every field
/// the caller does not set left zeroed as [`Args::new`] makes it.
pub(crate) unsafe fn call<A: Args>(
    api: &Api,
    name: &'static str,
    f: PjrtFn<A>,
    args: &mut A,
) -> Result<(), DeviceError> {
    // SAFETY: the caller's contract above. `args` is an exclusive reference,
    // so the pointer is valid, aligned and unaliased for the whole call.
    let err = unsafe { f(args) };
    // SAFETY: the ownership argument for every PJRT error the runtime sees.
    // A PJRT function returns either NULL (success) or a pointer to a new
    // `PJRT_Error` that the caller owns and must destroy exactly once. `err`
    // was just returned by a function of `api`'s plugin and nothing else has
    // seen it; `error::check` copies its code and message, then destroys it,
    // and it is not used again.
    unsafe { error::check(api, name, err) }
}

/// `pjrt_call!(api, PJRT_Function_Name, &mut args)`: looks up
/// `PJRT_Api::PJRT_Function_Name` (an `Incompatible` [`DeviceError`] when the
/// plugin's table is too short for it or the pointer is NULL), then runs
/// [`call`]. Evaluates to `Result<(), DeviceError>`.
///
/// `pjrt_call!(api, PJRT_Event_Await, &mut args, reported_as: call)` reports
/// a failure as a failure of `call` (a `&'static str`) instead: an event
/// carries the error of the call that returned it.
///
/// It expands to a call of the unsafe [`call`], so it must stand inside an
/// `unsafe` block whose safety comment says why `args` meets the
/// function's preconditions (handles live, pointers valid for the call).
macro_rules! pjrt_call {
    ($api:expr, $name:ident, $args:expr) => {
        $crate::runtime::pjrt::call::pjrt_call!($api, $name, $args, reported_as: ::std::stringify!($name))
    };
    ($api:expr, $name:ident, $args:expr, reported_as: $call:expr) => {{
        let api: &$crate::runtime::pjrt::api::Api = $api;
        match $crate::runtime::pjrt::api::pjrt_fn!(api, $name) {
            ::std::result::Result::Ok(f) => $crate::runtime::pjrt::call::call(api, $call, f, $args),
            ::std::result::Result::Err(e) => ::std::result::Result::Err(e),
        }
    }};
}
pub(crate) use pjrt_call;
