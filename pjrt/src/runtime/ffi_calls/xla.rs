//! The layouts of XLA's typed FFI (`xla/ffi/api/c_api.h`, API major 0)
//! that a handler reads, written by hand: the header is not in the plugin
//! wheels. Every struct starts with its `struct_size`, which a handler
//! checks before reading a field past the common prefix.

#![allow(dead_code)]

use std::os::raw::{c_char, c_int, c_void};

/// `XLA_FFI_Extension_Base`.
#[repr(C)]
pub(crate) struct ExtensionBase {
    pub(crate) struct_size: usize,
    pub(crate) type_: c_int,
    pub(crate) next: *mut ExtensionBase,
}

/// `XLA_FFI_Extension_Metadata`: the extension type of a metadata query.
pub(crate) const EXTENSION_METADATA: c_int = 1;

/// `XLA_FFI_Api_Version`.
#[repr(C)]
pub(crate) struct ApiVersion {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) major: c_int,
    pub(crate) minor: c_int,
}

/// `XLA_FFI_Metadata` (its first fields; later versions append more).
#[repr(C)]
pub(crate) struct Metadata {
    pub(crate) struct_size: usize,
    pub(crate) api_version: ApiVersion,
    pub(crate) traits: u32,
}

/// `XLA_FFI_Metadata_Extension`.
#[repr(C)]
pub(crate) struct MetadataExtension {
    pub(crate) base: ExtensionBase,
    pub(crate) metadata: *mut Metadata,
}

/// `XLA_FFI_ByteSpan`.
#[repr(C)]
pub(crate) struct ByteSpan {
    pub(crate) ptr: *const c_char,
    pub(crate) len: usize,
}

/// `XLA_FFI_Buffer`.
#[repr(C)]
pub(crate) struct Buffer {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) dtype: c_int,
    pub(crate) data: *mut c_void,
    pub(crate) rank: i64,
    pub(crate) dims: *mut i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (same layout).
#[repr(C)]
pub(crate) struct List {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) size: i64,
    pub(crate) types: *mut c_int,
    pub(crate) items: *mut *mut c_void,
}

/// `XLA_FFI_Attrs`.
#[repr(C)]
pub(crate) struct Attrs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) size: i64,
    pub(crate) types: *mut c_int,
    pub(crate) names: *mut *mut ByteSpan,
    pub(crate) attrs: *mut *mut c_void,
}

/// `XLA_FFI_AttrType_STRING`.
pub(crate) const ATTR_STRING: c_int = 4;
/// `XLA_FFI_ArgType_BUFFER` / `XLA_FFI_RetType_BUFFER`.
pub(crate) const BUFFER: c_int = 1;
/// `XLA_FFI_ExecutionStage_EXECUTE`.
pub(crate) const STAGE_EXECUTE: c_int = 3;

/// `XLA_FFI_CallFrame`.
#[repr(C)]
pub(crate) struct CallFrame {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) api: *const Api,
    pub(crate) ctx: *mut c_void,
    pub(crate) stage: c_int,
    pub(crate) args: List,
    pub(crate) rets: List,
    pub(crate) attrs: Attrs,
}

/// `XLA_FFI_Error_Create_Args`.
#[repr(C)]
pub(crate) struct ErrorCreateArgs {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) message: *const c_char,
    pub(crate) errc: c_int,
}

/// `XLA_FFI_Error_Code_INVALID_ARGUMENT`.
pub(crate) const ERROR_INVALID_ARGUMENT: c_int = 3;

/// `XLA_FFI_Api`, up to `XLA_FFI_Error_Create`.
#[repr(C)]
pub(crate) struct Api {
    pub(crate) struct_size: usize,
    pub(crate) extension_start: *mut ExtensionBase,
    pub(crate) api_version: ApiVersion,
    pub(crate) internal_api: *mut c_void,
    pub(crate) error_create: Option<unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut c_void>,
}

/// An FFI handler: `XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)`.
pub(crate) type Handler = unsafe extern "C" fn(*mut CallFrame) -> *mut c_void;

/// `PJRT_FFI_Register_Handler_Args` as newer plugins lay it out (traits
/// last, no API version): `struct_size` 52.
#[repr(C)]
pub(crate) struct RegisterArgs {
    pub(crate) struct_size: usize,
    pub(crate) target_name: *const c_char,
    pub(crate) target_name_size: usize,
    pub(crate) handler: *mut c_void,
    pub(crate) platform_name: *const c_char,
    pub(crate) platform_name_size: usize,
    pub(crate) traits: u32,
}

/// `PJRT_FFI_Register_Handler_Args` with the handler's API version (0
/// untyped, 1 typed) before the handler: `struct_size` 60.
#[repr(C)]
pub(crate) struct RegisterArgsVersioned {
    pub(crate) struct_size: usize,
    pub(crate) target_name: *const c_char,
    pub(crate) target_name_size: usize,
    pub(crate) api_version: c_int,
    pub(crate) handler: *mut c_void,
    pub(crate) platform_name: *const c_char,
    pub(crate) platform_name_size: usize,
    pub(crate) traits: u32,
}

/// The PJRT FFI extension (`PJRT_FFI_Extension`) with its three functions.
#[repr(C)]
pub(crate) struct PjrtFfiExtension {
    pub(crate) base: crate::runtime::pjrt::ffi::PJRT_Extension_Base,
    pub(crate) type_id_register: *mut c_void,
    pub(crate) user_data_add: *mut c_void,
    pub(crate) register_handler: *mut c_void,
}
