//! The one FFI handler tessel registers with a plugin: it reads the called
//! function's name from the call's `tessel_fn` attribute, copies the
//! argument buffers into host tensors, calls the registered Rust function
//! (`tessel_ir::host::call_ffi`) and copies its results into the result
//! buffers. A failure becomes an XLA FFI error naming the function, which
//! the run that called it returns; a panic in the function is caught.

use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tessel_ir::dtype::DType;
use tessel_ir::host::{call_ffi, FfiAttr, FfiCall, HostTensor, FFI_NAME_ATTR};
use tessel_ir::shape::TensorSpec;

use super::xla;

/// `XLA_FFI_Scalar`.
#[repr(C)]
struct Scalar {
    dtype: c_int,
    value: *mut c_void,
}

/// XLA's `PrimitiveType` number of `d`, and back.
const DTYPES: [(DType, c_int); 15] = [
    (DType::Pred, 1),
    (DType::S8, 2),
    (DType::S16, 3),
    (DType::S32, 4),
    (DType::S64, 5),
    (DType::U8, 6),
    (DType::U16, 7),
    (DType::U32, 8),
    (DType::U64, 9),
    (DType::F16, 10),
    (DType::F32, 11),
    (DType::F64, 12),
    (DType::BF16, 16),
    (DType::F8E5M2, 19),
    (DType::F8E4M3FN, 20),
];

fn dtype_of(code: c_int) -> Result<DType, String> {
    DTYPES
        .iter()
        .find(|(_, c)| *c == code)
        .map(|(d, _)| *d)
        .ok_or_else(|| format!("a buffer of XLA element type {code}, which tessel does not read"))
}

/// The handler registered under `tessel_ir::host::FFI_TARGET`.
///
/// # Safety
///
/// Called by XLA with a call frame laid out as `xla::CallFrame` (checked by
/// its `struct_size`), valid for the call.
pub(crate) unsafe extern "C" fn handler(frame: *mut xla::CallFrame) -> *mut c_void {
    if frame.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract; the frame is only read (and its
    // result buffers written) during this call.
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { handle(&mut *frame) }));
    let message = match outcome {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(m)) => m,
        Err(_) => "the native function panicked".to_string(),
    };
    // SAFETY: as above.
    unsafe { error(&*frame, &message) }
}

/// An XLA FFI error carrying `message`, made by the frame's API (null when
/// the API is too old to make one).
///
/// # Safety
///
/// `frame` is the handler's call frame.
unsafe fn error(frame: &xla::CallFrame, message: &str) -> *mut c_void {
    let api = frame.api;
    if api.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: XLA's API struct lives for the process; its size says
    // whether `error_create` is there.
    let create = unsafe {
        if (*api).struct_size < std::mem::size_of::<xla::Api>() {
            return std::ptr::null_mut();
        }
        (*api).error_create
    };
    let Some(create) = create else {
        return std::ptr::null_mut();
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = xla::ErrorCreateArgs {
        struct_size: 28,
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        errc: xla::ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: `XLA_FFI_Error_Create` copies the message; `args` lives for
    // the call.
    unsafe { create(&mut args) }
}

/// The work of [`handler`], its failures as messages.
///
/// # Safety
///
/// `frame` is the handler's call frame.
unsafe fn handle(frame: &mut xla::CallFrame) -> Result<(), String> {
    if frame.struct_size < std::mem::size_of::<xla::CallFrame>() {
        return Err(format!(
            "an XLA FFI call frame of {} bytes, too old",
            frame.struct_size
        ));
    }
    if !frame.extension_start.is_null() {
        // SAFETY: an extension chain starts with its base.
        let base = unsafe { &*frame.extension_start };
        if base.type_ == xla::EXTENSION_METADATA {
            // SAFETY: a metadata query's extension and metadata, each
            // written only within its declared size.
            unsafe { answer_metadata(frame.extension_start.cast()) };
            return Ok(());
        }
    }
    if frame.stage != xla::STAGE_EXECUTE {
        return Ok(());
    }
    // SAFETY: the frame's lists are as XLA documents them: `size` entries.
    let (name, attrs) = unsafe { attributes(&frame.attrs) }?;
    let name =
        name.ok_or_else(|| format!("a native call without its `{FFI_NAME_ATTR}` attribute"))?;
    let fail = |m: String| format!("native function `{name}`: {m}");
    // SAFETY: as above, for the arguments.
    let args = unsafe { buffers(&frame.args) }.map_err(fail)?;
    // SAFETY: as above, for the results.
    let rets = unsafe { buffers(&frame.rets) }.map_err(fail)?;
    let mut inputs = Vec::with_capacity(args.len());
    for (b, spec) in &args {
        let n = spec.check_size().map_err(|e| fail(e.to_string()))?;
        // SAFETY: an argument buffer holds its elements, `n` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(b.data as *const u8, n) }.to_vec();
        inputs.push(HostTensor::from_bytes(spec.clone(), bytes).map_err(|e| fail(e.to_string()))?);
    }
    let specs: Vec<TensorSpec> = rets.iter().map(|(_, s)| s.clone()).collect();
    let call = FfiCall {
        args: &inputs,
        attrs: &attrs,
    };
    let outs = call_ffi(&name, &call, &specs).map_err(fail)?;
    for ((b, _), out) in rets.iter().zip(&outs) {
        let bytes = out.as_bytes();
        // SAFETY: a result buffer of the declared type holds as many bytes
        // as the result (checked equal by `call_ffi`).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), b.data as *mut u8, bytes.len()) };
    }
    Ok(())
}

/// Fills a metadata query: the FFI API version this handler reads (0.1)
/// and no traits.
///
/// # Safety
///
/// `ext` is XLA's metadata extension.
unsafe fn answer_metadata(ext: *mut xla::MetadataExtension) {
    // SAFETY: the caller's contract; each struct's size is checked before
    // a field past its prefix is written.
    unsafe {
        if (*ext).base.struct_size < std::mem::size_of::<xla::MetadataExtension>() {
            return;
        }
        let md = (*ext).metadata;
        if md.is_null() || (*md).struct_size < std::mem::size_of::<xla::ApiVersion>() + 12 {
            return;
        }
        (*md).api_version.major = 0;
        (*md).api_version.minor = 1;
        (*md).traits = 0;
    }
}

/// The buffers of an argument or result list, with their types.
///
/// # Safety
///
/// `list` is a call frame's argument or result list.
unsafe fn buffers(list: &xla::List) -> Result<Vec<(&xla::Buffer, TensorSpec)>, String> {
    let n = usize::try_from(list.size).unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `size` entries in each array.
        let (ty, item) = unsafe { (*list.types.add(i), *list.items.add(i)) };
        if ty != xla::BUFFER || item.is_null() {
            return Err(format!("entry {i} is not a buffer"));
        }
        // SAFETY: a buffer entry points at an `XLA_FFI_Buffer`.
        let b = unsafe { &*(item as *const xla::Buffer) };
        let rank = usize::try_from(b.rank).unwrap_or(0);
        let dims: Vec<usize> = match rank {
            0 => Vec::new(),
            // SAFETY: `rank` dimensions.
            _ => unsafe { std::slice::from_raw_parts(b.dims, rank) }
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(0))
                .collect(),
        };
        out.push((b, TensorSpec::new(dims, dtype_of(b.dtype)?)));
    }
    Ok(out)
}

/// A call's function name (its `tessel_fn` attribute) and its other
/// attributes.
type Decoded = (Option<String>, Vec<(String, FfiAttr)>);

/// The call's function name and its other attributes, sorted by name.
///
/// # Safety
///
/// `attrs` is a call frame's attribute list.
unsafe fn attributes(attrs: &xla::Attrs) -> Result<Decoded, String> {
    let n = usize::try_from(attrs.size).unwrap_or(0);
    let (mut name, mut out) = (None, Vec::with_capacity(n));
    for i in 0..n {
        // SAFETY: `size` entries in each array; names are byte spans.
        let (ty, span, value) = unsafe {
            (
                *attrs.types.add(i),
                &**attrs.names.add(i),
                *attrs.attrs.add(i),
            )
        };
        // SAFETY: a byte span of `len` bytes.
        let key = unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) };
        let key = String::from_utf8_lossy(key).into_owned();
        let attr = match ty {
            xla::ATTR_STRING => {
                // SAFETY: a string attribute is a byte span.
                let s = unsafe { &*(value as *const xla::ByteSpan) };
                // SAFETY: of `len` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(s.ptr as *const u8, s.len) };
                FfiAttr::Str(String::from_utf8_lossy(bytes).into_owned())
            }
            3 => {
                // SAFETY: a scalar attribute is an `XLA_FFI_Scalar`.
                let s = unsafe { &*(value as *const Scalar) };
                match s.dtype {
                    // SAFETY: the value of the scalar's type.
                    12 => FfiAttr::F64(unsafe { *(s.value as *const f64) }),
                    // SAFETY: as above.
                    5 => FfiAttr::I64(unsafe { *(s.value as *const i64) }),
                    other => return Err(format!("attribute `{key}` of XLA element type {other}")),
                }
            }
            other => return Err(format!("attribute `{key}` of XLA attribute type {other}")),
        };
        match (key == FFI_NAME_ATTR, attr) {
            (true, FfiAttr::Str(s)) => name = Some(s),
            (_, a) => out.push((key, a)),
        }
    }
    Ok((name, out))
}
