//! `PJRT_Error` → [`DeviceError`]: read the code and message, destroy the
//! error exactly once.

use super::api::Api;
use super::args::Args;
use super::ffi;
use crate::error::DeviceError;

/// The `absl::StatusCode` name of a PJRT error code.
pub(crate) fn code_name(code: ffi::PJRT_Error_Code) -> String {
    let name = match code {
        ffi::PJRT_Error_Code_OK => "OK",
        ffi::PJRT_Error_Code_CANCELLED => "CANCELLED",
        ffi::PJRT_Error_Code_UNKNOWN => "UNKNOWN",
        ffi::PJRT_Error_Code_INVALID_ARGUMENT => "INVALID_ARGUMENT",
        ffi::PJRT_Error_Code_DEADLINE_EXCEEDED => "DEADLINE_EXCEEDED",
        ffi::PJRT_Error_Code_NOT_FOUND => "NOT_FOUND",
        ffi::PJRT_Error_Code_ALREADY_EXISTS => "ALREADY_EXISTS",
        ffi::PJRT_Error_Code_PERMISSION_DENIED => "PERMISSION_DENIED",
        ffi::PJRT_Error_Code_RESOURCE_EXHAUSTED => "RESOURCE_EXHAUSTED",
        ffi::PJRT_Error_Code_FAILED_PRECONDITION => "FAILED_PRECONDITION",
        ffi::PJRT_Error_Code_ABORTED => "ABORTED",
        ffi::PJRT_Error_Code_OUT_OF_RANGE => "OUT_OF_RANGE",
        ffi::PJRT_Error_Code_UNIMPLEMENTED => "UNIMPLEMENTED",
        ffi::PJRT_Error_Code_INTERNAL => "INTERNAL",
        ffi::PJRT_Error_Code_UNAVAILABLE => "UNAVAILABLE",
        ffi::PJRT_Error_Code_DATA_LOSS => "DATA_LOSS",
        ffi::PJRT_Error_Code_UNAUTHENTICATED => "UNAUTHENTICATED",
        other => return format!("code {other}"),
    };
    name.to_string()
}

/// A PJRT error, already copied out of the plugin and destroyed.
#[derive(Debug, Clone)]
pub(crate) struct PjrtStatus {
    /// The raw status code.
    pub(crate) code: ffi::PJRT_Error_Code,
    /// The plugin's message.
    pub(crate) message: String,
}

impl PjrtStatus {
    /// Whether the plugin ran out of memory.
    pub(crate) fn is_out_of_memory(&self) -> bool {
        self.code == ffi::PJRT_Error_Code_RESOURCE_EXHAUSTED
    }

    /// The [`DeviceError`] for a failed `call`.
    pub(crate) fn into_device_error(self, call: &'static str) -> DeviceError {
        if self.is_out_of_memory() {
            DeviceError::OutOfMemory {
                call,
                message: self.message,
            }
        } else {
            DeviceError::Pjrt {
                call,
                code: code_name(self.code),
                message: self.message,
            }
        }
    }
}

/// Copies code and message out of `err` and destroys it. `None` for a null
/// error (success).
///
/// # Safety
///
/// `err` must be null or a `PJRT_Error` returned by `api` that has not been
/// destroyed yet; it is destroyed here and must not be used afterwards.
unsafe fn take_status(api: &Api, err: *mut ffi::PJRT_Error) -> Option<PjrtStatus> {
    if err.is_null() {
        return None;
    }
    let fns = api.error_fns();

    let mut code_args = ffi::PJRT_Error_GetCode_Args::new();
    code_args.error = err;
    // SAFETY: `err` is a live error from this plugin (caller contract) and
    // `code_args` is a correctly sized args struct that outlives the call.
    let code_err = unsafe { (fns.get_code)(&mut code_args) };
    let code = if code_err.is_null() {
        code_args.code
    } else {
        // GetCode failing is not expected; destroy its error without recursing.
        destroy(fns.destroy, code_err);
        ffi::PJRT_Error_Code_UNKNOWN
    };

    let mut msg_args = ffi::PJRT_Error_Message_Args::new();
    msg_args.error = err;
    // SAFETY: as above; the message pointer it writes has the lifetime of `err`.
    unsafe { (fns.message)(&mut msg_args) };
    let message = if msg_args.message.is_null() {
        String::new()
    } else {
        // SAFETY: the plugin returned `message_size` bytes at `message`, valid
        // until `err` is destroyed below; they are copied before that.
        let bytes = unsafe {
            std::slice::from_raw_parts(msg_args.message.cast::<u8>(), msg_args.message_size)
        };
        String::from_utf8_lossy(bytes).into_owned()
    };

    destroy(fns.destroy, err);
    Some(PjrtStatus { code, message })
}

fn destroy(f: ErrorDestroyFn, err: *mut ffi::PJRT_Error) {
    let mut args = ffi::PJRT_Error_Destroy_Args::new();
    args.error = err;
    // SAFETY: `err` is a live error from this plugin, destroyed exactly once
    // here (callers never touch it again).
    unsafe { f(&mut args) };
}

/// `PJRT_Error_Destroy`.
pub(crate) type ErrorDestroyFn = unsafe extern "C" fn(*mut ffi::PJRT_Error_Destroy_Args);
/// `PJRT_Error_Message`.
pub(crate) type ErrorMessageFn = unsafe extern "C" fn(*mut ffi::PJRT_Error_Message_Args);
/// `PJRT_Error_GetCode`.
pub(crate) type ErrorGetCodeFn =
    unsafe extern "C" fn(*mut ffi::PJRT_Error_GetCode_Args) -> *mut ffi::PJRT_Error;

/// The three error functions every plugin must have (checked at load).
#[derive(Clone, Copy)]
pub(crate) struct ErrorFns {
    pub(crate) destroy: ErrorDestroyFn,
    pub(crate) message: ErrorMessageFn,
    pub(crate) get_code: ErrorGetCodeFn,
}

/// `Ok(())` for a null error, otherwise the [`DeviceError`] for `call`
/// (`OutOfMemory` for `RESOURCE_EXHAUSTED`, `Pjrt` with the code name otherwise).
///
/// # Safety
///
/// As for [`take_status`].
pub(crate) unsafe fn check(
    api: &Api,
    call: &'static str,
    err: *mut ffi::PJRT_Error,
) -> Result<(), DeviceError> {
    // SAFETY: forwarded caller contract.
    match unsafe { take_status(api, err) } {
        None => Ok(()),
        Some(status) => Err(status.into_device_error(call)),
    }
}
