// Raw bindings to the PJRT C API (API version 0.81).
//
// Generated once with bindgen 0.73.2 from `pjrt_c_api.h` as shipped in the
// `xla-cpu-pjrt` 0.0.1 wheel (member `xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h`),
// and committed so that building tessel needs no libclang:
//
//   bindgen pjrt_c_api.h --allowlist-type 'PJRT_.*' --allowlist-var 'PJRT_.*' \
//       --with-derive-default --no-layout-tests --default-enum-style consts \
//       --no-prepend-enum-name --no-doc-comments -o ffi.rs -- -x c
//
// followed by one edit: a `// SAFETY:` comment above each `unsafe` block that
// bindgen emits in the zero-filling `Default` impls. Enums are plain integer
// constants, so a value the plugin returns that this header does not know is
// still a valid Rust value. Do not edit by hand: regenerate from a newer header
// instead (the runtime checks `struct_size` before using any function pointer).
// The C names are kept as the header spells them, and most of the API is not
// used; clippy has nothing to say about the generated code.
#![allow(
    dead_code,
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case
)]

pub const PJRT_API_MAJOR: u32 = 0;
pub const PJRT_API_MINOR: u32 = 81;
pub const PJRT_Extension_Type_Gpu_Custom_Call: PJRT_Extension_Type = 0;
pub const PJRT_Extension_Type_Profiler: PJRT_Extension_Type = 1;
pub const PJRT_Extension_Type_Custom_Partitioner: PJRT_Extension_Type = 2;
pub const PJRT_Extension_Type_Stream: PJRT_Extension_Type = 3;
pub const PJRT_Extension_Type_Layouts: PJRT_Extension_Type = 4;
pub const PJRT_Extension_Type_FFI: PJRT_Extension_Type = 5;
pub const PJRT_Extension_Type_MemoryDescriptions: PJRT_Extension_Type = 6;
pub const PJRT_Extension_Type_Triton: PJRT_Extension_Type = 7;
pub const PJRT_Extension_Type_RawBuffer: PJRT_Extension_Type = 8;
pub const PJRT_Extension_Type_PhaseCompile: PJRT_Extension_Type = 9;
pub const PJRT_Extension_Type_Example: PJRT_Extension_Type = 10;
pub const PJRT_Extension_Type_Unknown: PJRT_Extension_Type = 11;
pub const PJRT_Extension_Type_CrossHostTransfers: PJRT_Extension_Type = 12;
pub const PJRT_Extension_Type_ExecutableMetadata: PJRT_Extension_Type = 13;
pub const PJRT_Extension_Type_Callback: PJRT_Extension_Type = 14;
pub const PJRT_Extension_Type_HostAllocator: PJRT_Extension_Type = 15;
pub type PJRT_Extension_Type = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: PJRT_Extension_Type,
    pub next: *mut PJRT_Extension_Base,
}
impl Default for PJRT_Extension_Base {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Extension_Base_STRUCT_SIZE: _bindgen_ty_1 = 24;
pub type _bindgen_ty_1 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: ::std::os::raw::c_int,
    pub minor_version: ::std::os::raw::c_int,
}
impl Default for PJRT_Api_Version {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Api_Version_STRUCT_SIZE: _bindgen_ty_2 = 24;
pub type _bindgen_ty_2 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Error {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}
impl Default for PJRT_Error_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Error_Destroy_Args_STRUCT_SIZE: _bindgen_ty_3 = 24;
pub type _bindgen_ty_3 = ::std::os::raw::c_uint;
pub type PJRT_Error_Destroy =
    ::std::option::Option<unsafe extern "C" fn(args: *mut PJRT_Error_Destroy_Args)>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const ::std::os::raw::c_char,
    pub message_size: usize,
}
impl Default for PJRT_Error_Message_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Error_Message_Args_STRUCT_SIZE: _bindgen_ty_4 = 40;
pub type _bindgen_ty_4 = ::std::os::raw::c_uint;
pub type PJRT_Error_Message =
    ::std::option::Option<unsafe extern "C" fn(args: *mut PJRT_Error_Message_Args)>;
pub const PJRT_Error_Code_OK: PJRT_Error_Code = 0;
pub const PJRT_Error_Code_CANCELLED: PJRT_Error_Code = 1;
pub const PJRT_Error_Code_UNKNOWN: PJRT_Error_Code = 2;
pub const PJRT_Error_Code_INVALID_ARGUMENT: PJRT_Error_Code = 3;
pub const PJRT_Error_Code_DEADLINE_EXCEEDED: PJRT_Error_Code = 4;
pub const PJRT_Error_Code_NOT_FOUND: PJRT_Error_Code = 5;
pub const PJRT_Error_Code_ALREADY_EXISTS: PJRT_Error_Code = 6;
pub const PJRT_Error_Code_PERMISSION_DENIED: PJRT_Error_Code = 7;
pub const PJRT_Error_Code_RESOURCE_EXHAUSTED: PJRT_Error_Code = 8;
pub const PJRT_Error_Code_FAILED_PRECONDITION: PJRT_Error_Code = 9;
pub const PJRT_Error_Code_ABORTED: PJRT_Error_Code = 10;
pub const PJRT_Error_Code_OUT_OF_RANGE: PJRT_Error_Code = 11;
pub const PJRT_Error_Code_UNIMPLEMENTED: PJRT_Error_Code = 12;
pub const PJRT_Error_Code_INTERNAL: PJRT_Error_Code = 13;
pub const PJRT_Error_Code_UNAVAILABLE: PJRT_Error_Code = 14;
pub const PJRT_Error_Code_DATA_LOSS: PJRT_Error_Code = 15;
pub const PJRT_Error_Code_UNAUTHENTICATED: PJRT_Error_Code = 16;
pub type PJRT_Error_Code = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: PJRT_Error_Code,
}
impl Default for PJRT_Error_GetCode_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Error_GetCode_Args_STRUCT_SIZE: _bindgen_ty_5 = 28;
pub type _bindgen_ty_5 = ::std::os::raw::c_uint;
pub type PJRT_Error_GetCode = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Error_GetCode_Args) -> *mut PJRT_Error,
>;
pub type PJRT_CallbackError = ::std::option::Option<
    unsafe extern "C" fn(
        code: PJRT_Error_Code,
        message: *const ::std::os::raw::c_char,
        message_size: usize,
    ) -> *mut PJRT_Error,
>;
pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;
pub type PJRT_NamedValue_Type = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Copy, Clone)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const ::std::os::raw::c_char,
    pub name_size: usize,
    pub type_: PJRT_NamedValue_Type,
    pub __bindgen_anon_1: PJRT_NamedValue__bindgen_ty_1,
    pub value_size: usize,
}
#[repr(C)]
#[derive(Copy, Clone)]
pub union PJRT_NamedValue__bindgen_ty_1 {
    pub string_value: *const ::std::os::raw::c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}
impl Default for PJRT_NamedValue__bindgen_ty_1 {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
impl Default for PJRT_NamedValue {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_NamedValue_STRUCT_SIZE: _bindgen_ty_6 = 56;
pub type _bindgen_ty_6 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}
impl Default for PJRT_Plugin_Initialize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Plugin_Initialize_Args_STRUCT_SIZE: _bindgen_ty_7 = 16;
pub type _bindgen_ty_7 = ::std::os::raw::c_uint;
pub type PJRT_Plugin_Initialize = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Plugin_Initialize_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Plugin_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}
impl Default for PJRT_Plugin_Attributes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Plugin_Attributes_Args_STRUCT_SIZE: _bindgen_ty_8 = 32;
pub type _bindgen_ty_8 = ::std::os::raw::c_uint;
pub type PJRT_Plugin_Attributes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Plugin_Attributes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Event {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Event_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Event_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Event_Destroy_Args_STRUCT_SIZE: _bindgen_ty_9 = 24;
pub type _bindgen_ty_9 = ::std::os::raw::c_uint;
pub type PJRT_Event_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Event_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Event_IsReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub is_ready: bool,
}
impl Default for PJRT_Event_IsReady_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Event_IsReady_Args_STRUCT_SIZE: _bindgen_ty_10 = 25;
pub type _bindgen_ty_10 = ::std::os::raw::c_uint;
pub type PJRT_Event_IsReady = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Event_IsReady_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Event_Error_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Event_Error_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Event_Error_Args_STRUCT_SIZE: _bindgen_ty_11 = 24;
pub type _bindgen_ty_11 = ::std::os::raw::c_uint;
pub type PJRT_Event_Error = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Event_Error_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Event_Await_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Event_Await_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Event_Await_Args_STRUCT_SIZE: _bindgen_ty_12 = 24;
pub type _bindgen_ty_12 = ::std::os::raw::c_uint;
pub type PJRT_Event_Await = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Event_Await_Args) -> *mut PJRT_Error,
>;
pub type PJRT_Event_OnReadyCallback = ::std::option::Option<
    unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut ::std::os::raw::c_void),
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Event_OnReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub callback: PJRT_Event_OnReadyCallback,
    pub user_arg: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_Event_OnReady_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Event_OnReady_Args_STRUCT_SIZE: _bindgen_ty_13 = 40;
pub type _bindgen_ty_13 = ::std::os::raw::c_uint;
pub type PJRT_Event_OnReady = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Event_OnReady_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Client {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Device {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Memory {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_DeviceDescription {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TopologyDescription {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Executable {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_LoadedExecutable {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Buffer {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_FulfillAliasBufferCallback {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_AsyncHostToDeviceTransferManager {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_PhaseCompiler {
    _unused: [u8; 0],
}
pub type PJRT_KeyValueGetCallback_ValueDeleter =
    ::std::option::Option<unsafe extern "C" fn(value: *mut ::std::os::raw::c_char)>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_KeyValueGetCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const ::std::os::raw::c_char,
    pub key_size: usize,
    pub timeout_in_ms: ::std::os::raw::c_int,
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut ::std::os::raw::c_void,
    pub value: *mut ::std::os::raw::c_char,
    pub value_size: usize,
    pub value_deleter_callback: PJRT_KeyValueGetCallback_ValueDeleter,
}
impl Default for PJRT_KeyValueGetCallback_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_KeyValueGetCallback_Args_STRUCT_SIZE: _bindgen_ty_14 = 80;
pub type _bindgen_ty_14 = ::std::os::raw::c_uint;
pub type PJRT_KeyValueGetCallback = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_KeyValueGetCallback_Args) -> *mut PJRT_Error,
>;
pub type PJRT_KeyValueTryGetCallback_ValueDeleter =
    ::std::option::Option<unsafe extern "C" fn(value: *mut ::std::os::raw::c_char)>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_KeyValueTryGetCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const ::std::os::raw::c_char,
    pub key_size: usize,
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut ::std::os::raw::c_void,
    pub value: *mut ::std::os::raw::c_char,
    pub value_size: usize,
    pub value_deleter_callback: PJRT_KeyValueTryGetCallback_ValueDeleter,
}
impl Default for PJRT_KeyValueTryGetCallback_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE: _bindgen_ty_15 = 72;
pub type _bindgen_ty_15 = ::std::os::raw::c_uint;
pub type PJRT_KeyValueTryGetCallback = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_KeyValueTryGetCallback_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_KeyValuePutCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const ::std::os::raw::c_char,
    pub key_size: usize,
    pub value: *const ::std::os::raw::c_char,
    pub value_size: usize,
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_KeyValuePutCallback_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_KeyValuePutCallback_Args_STRUCT_SIZE: _bindgen_ty_16 = 64;
pub type _bindgen_ty_16 = ::std::os::raw::c_uint;
pub type PJRT_KeyValuePutCallback = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_KeyValuePutCallback_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: PJRT_KeyValueGetCallback,
    pub kv_get_user_arg: *mut ::std::os::raw::c_void,
    pub kv_put_callback: PJRT_KeyValuePutCallback,
    pub kv_put_user_arg: *mut ::std::os::raw::c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: PJRT_KeyValueTryGetCallback,
    pub kv_try_get_user_arg: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_Client_Create_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_Create_Args_STRUCT_SIZE: _bindgen_ty_17 = 88;
pub type _bindgen_ty_17 = ::std::os::raw::c_uint;
pub type PJRT_Client_Create = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_Create_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}
impl Default for PJRT_Client_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_Destroy_Args_STRUCT_SIZE: _bindgen_ty_18 = 24;
pub type _bindgen_ty_18 = ::std::os::raw::c_uint;
pub type PJRT_Client_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_name: *const ::std::os::raw::c_char,
    pub platform_name_size: usize,
}
impl Default for PJRT_Client_PlatformName_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_PlatformName_Args_STRUCT_SIZE: _bindgen_ty_19 = 40;
pub type _bindgen_ty_19 = ::std::os::raw::c_uint;
pub type PJRT_Client_PlatformName = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_PlatformName_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_ProcessIndex_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub process_index: ::std::os::raw::c_int,
}
impl Default for PJRT_Client_ProcessIndex_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_ProcessIndex_Args_STRUCT_SIZE: _bindgen_ty_20 = 28;
pub type _bindgen_ty_20 = ::std::os::raw::c_uint;
pub type PJRT_Client_ProcessIndex = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_ProcessIndex_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_version: *const ::std::os::raw::c_char,
    pub platform_version_size: usize,
}
impl Default for PJRT_Client_PlatformVersion_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_PlatformVersion_Args_STRUCT_SIZE: _bindgen_ty_21 = 40;
pub type _bindgen_ty_21 = ::std::os::raw::c_uint;
pub type PJRT_Client_PlatformVersion = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_PlatformVersion_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_TopologyDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub topology: *mut PJRT_TopologyDescription,
}
impl Default for PJRT_Client_TopologyDescription_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_TopologyDescription_Args_STRUCT_SIZE: _bindgen_ty_22 = 32;
pub type _bindgen_ty_22 = ::std::os::raw::c_uint;
pub type PJRT_Client_TopologyDescription = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_TopologyDescription_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_Devices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub devices: *const *mut PJRT_Device,
    pub num_devices: usize,
}
impl Default for PJRT_Client_Devices_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_Devices_Args_STRUCT_SIZE: _bindgen_ty_23 = 40;
pub type _bindgen_ty_23 = ::std::os::raw::c_uint;
pub type PJRT_Client_Devices = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_Devices_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}
impl Default for PJRT_Client_AddressableDevices_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_AddressableDevices_Args_STRUCT_SIZE: _bindgen_ty_24 = 40;
pub type _bindgen_ty_24 = ::std::os::raw::c_uint;
pub type PJRT_Client_AddressableDevices = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_AddressableDevices_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_LookupDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub id: ::std::os::raw::c_int,
    pub device: *mut PJRT_Device,
}
impl Default for PJRT_Client_LookupDevice_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_LookupDevice_Args_STRUCT_SIZE: _bindgen_ty_25 = 40;
pub type _bindgen_ty_25 = ::std::os::raw::c_uint;
pub type PJRT_Client_LookupDevice = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_LookupDevice_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_LookupAddressableDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub local_hardware_id: ::std::os::raw::c_int,
    pub addressable_device: *mut PJRT_Device,
}
impl Default for PJRT_Client_LookupAddressableDevice_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_LookupAddressableDevice_Args_STRUCT_SIZE: _bindgen_ty_26 = 40;
pub type _bindgen_ty_26 = ::std::os::raw::c_uint;
pub type PJRT_Client_LookupAddressableDevice = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_LookupAddressableDevice_Args) -> *mut PJRT_Error,
>;
pub const PJRT_ProcessState_kUnspecified: PJRT_ProcessState = 0;
pub const PJRT_ProcessState_kUninitialized: PJRT_ProcessState = 1;
pub const PJRT_ProcessState_kDisconnected: PJRT_ProcessState = 2;
pub const PJRT_ProcessState_kConnected: PJRT_ProcessState = 3;
pub const PJRT_ProcessState_kError: PJRT_ProcessState = 4;
pub type PJRT_ProcessState = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_ProcessInfo {
    pub struct_size: usize,
    pub task_id: ::std::os::raw::c_int,
    pub incarnation_id: u64,
    pub state: PJRT_ProcessState,
    pub error_code: ::std::os::raw::c_int,
    pub error_message: *const ::std::os::raw::c_char,
    pub error_message_size: usize,
}
impl Default for PJRT_ProcessInfo {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_ProcessInfo_STRUCT_SIZE: _bindgen_ty_27 = 48;
pub type _bindgen_ty_27 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_UpdateGlobalProcessInfo_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub process_infos: *mut PJRT_ProcessInfo,
    pub num_process_infos: usize,
}
impl Default for PJRT_Client_UpdateGlobalProcessInfo_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_UpdateGlobalProcessInfo_Args_STRUCT_SIZE: _bindgen_ty_28 = 40;
pub type _bindgen_ty_28 = ::std::os::raw::c_uint;
pub type PJRT_Client_UpdateGlobalProcessInfo = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_UpdateGlobalProcessInfo_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_AddressableMemories_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_memories: *const *mut PJRT_Memory,
    pub num_addressable_memories: usize,
}
impl Default for PJRT_Client_AddressableMemories_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_AddressableMemories_Args_STRUCT_SIZE: _bindgen_ty_29 = 40;
pub type _bindgen_ty_29 = ::std::os::raw::c_uint;
pub type PJRT_Client_AddressableMemories = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_AddressableMemories_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub code: *mut ::std::os::raw::c_char,
    pub code_size: usize,
    pub format: *const ::std::os::raw::c_char,
    pub format_size: usize,
}
impl Default for PJRT_Program {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Program_STRUCT_SIZE: _bindgen_ty_30 = 48;
pub type _bindgen_ty_30 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const ::std::os::raw::c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}
impl Default for PJRT_Client_Compile_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_Compile_Args_STRUCT_SIZE: _bindgen_ty_31 = 56;
pub type _bindgen_ty_31 = ::std::os::raw::c_uint;
pub type PJRT_Client_Compile = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_Compile_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_DefaultDeviceAssignment_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub num_replicas: ::std::os::raw::c_int,
    pub num_partitions: ::std::os::raw::c_int,
    pub default_assignment_size: usize,
    pub default_assignment: *mut ::std::os::raw::c_int,
}
impl Default for PJRT_Client_DefaultDeviceAssignment_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_DefaultDeviceAssignment_Args_STRUCT_SIZE: _bindgen_ty_32 = 48;
pub type _bindgen_ty_32 = ::std::os::raw::c_uint;
pub type PJRT_Client_DefaultDeviceAssignment = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_DefaultDeviceAssignment_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_DmaMap_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *mut ::std::os::raw::c_void,
    pub size: usize,
}
impl Default for PJRT_Client_DmaMap_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_DmaMap_Args_STRUCT_SIZE: _bindgen_ty_33 = 40;
pub type _bindgen_ty_33 = ::std::os::raw::c_uint;
pub type PJRT_Client_DmaMap = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_DmaMap_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_DmaUnmap_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_Client_DmaUnmap_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_DmaUnmap_Args_STRUCT_SIZE: _bindgen_ty_34 = 32;
pub type _bindgen_ty_34 = ::std::os::raw::c_uint;
pub type PJRT_Client_DmaUnmap = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_DmaUnmap_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_Destroy_Args_STRUCT_SIZE: _bindgen_ty_35 = 24;
pub type _bindgen_ty_35 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_Destroy = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_Destroy_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_TransferData_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub buffer_index: ::std::os::raw::c_int,
    pub data: *const ::std::os::raw::c_void,
    pub offset: i64,
    pub transfer_size: i64,
    pub is_last_transfer: bool,
    pub done_with_h2d_transfer: *mut PJRT_Event,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_TransferData_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_TransferData_Args_STRUCT_SIZE: _bindgen_ty_36 = 72;
pub type _bindgen_ty_36 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_TransferData = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_TransferData_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub buffer_index: ::std::os::raw::c_int,
    pub buffer_out: *mut PJRT_Buffer,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args_STRUCT_SIZE: _bindgen_ty_37 =
    40;
pub type _bindgen_ty_37 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_Device_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub device_out: *mut PJRT_Device,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_Device_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_Device_Args_STRUCT_SIZE: _bindgen_ty_38 = 32;
pub type _bindgen_ty_38 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_Device = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_Device_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub buffer_count: usize,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args_STRUCT_SIZE: _bindgen_ty_39 = 32;
pub type _bindgen_ty_39 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_BufferCount = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub buffer_index: ::std::os::raw::c_int,
    pub buffer_size: usize,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args_STRUCT_SIZE: _bindgen_ty_40 = 40;
pub type _bindgen_ty_40 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_BufferSize = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub buffer_index: ::std::os::raw::c_int,
    pub error_code: PJRT_Error_Code,
    pub error_message: *const ::std::os::raw::c_char,
    pub error_message_size: usize,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args_STRUCT_SIZE: _bindgen_ty_41 =
    48;
pub type _bindgen_ty_41 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_SetBufferError = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
    pub transfer_metadata: *const PJRT_NamedValue,
    pub num_metadata: usize,
}
impl Default for PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args_STRUCT_SIZE: _bindgen_ty_42 = 40;
pub type _bindgen_ty_42 = ::std::os::raw::c_uint;
pub type PJRT_AsyncHostToDeviceTransferManager_AddMetadata = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args,
    ) -> *mut PJRT_Error,
>;
pub const PJRT_Buffer_Type_INVALID: PJRT_Buffer_Type = 0;
pub const PJRT_Buffer_Type_PRED: PJRT_Buffer_Type = 1;
pub const PJRT_Buffer_Type_S8: PJRT_Buffer_Type = 2;
pub const PJRT_Buffer_Type_S16: PJRT_Buffer_Type = 3;
pub const PJRT_Buffer_Type_S32: PJRT_Buffer_Type = 4;
pub const PJRT_Buffer_Type_S64: PJRT_Buffer_Type = 5;
pub const PJRT_Buffer_Type_U8: PJRT_Buffer_Type = 6;
pub const PJRT_Buffer_Type_U16: PJRT_Buffer_Type = 7;
pub const PJRT_Buffer_Type_U32: PJRT_Buffer_Type = 8;
pub const PJRT_Buffer_Type_U64: PJRT_Buffer_Type = 9;
pub const PJRT_Buffer_Type_F16: PJRT_Buffer_Type = 10;
pub const PJRT_Buffer_Type_F32: PJRT_Buffer_Type = 11;
pub const PJRT_Buffer_Type_F64: PJRT_Buffer_Type = 12;
pub const PJRT_Buffer_Type_BF16: PJRT_Buffer_Type = 13;
pub const PJRT_Buffer_Type_C64: PJRT_Buffer_Type = 14;
pub const PJRT_Buffer_Type_C128: PJRT_Buffer_Type = 15;
pub const PJRT_Buffer_Type_F8E5M2: PJRT_Buffer_Type = 16;
pub const PJRT_Buffer_Type_F8E4M3FN: PJRT_Buffer_Type = 17;
pub const PJRT_Buffer_Type_F8E4M3B11FNUZ: PJRT_Buffer_Type = 18;
pub const PJRT_Buffer_Type_F8E5M2FNUZ: PJRT_Buffer_Type = 19;
pub const PJRT_Buffer_Type_F8E4M3FNUZ: PJRT_Buffer_Type = 20;
pub const PJRT_Buffer_Type_S4: PJRT_Buffer_Type = 21;
pub const PJRT_Buffer_Type_U4: PJRT_Buffer_Type = 22;
pub const PJRT_Buffer_Type_TOKEN: PJRT_Buffer_Type = 23;
pub const PJRT_Buffer_Type_S2: PJRT_Buffer_Type = 24;
pub const PJRT_Buffer_Type_U2: PJRT_Buffer_Type = 25;
pub const PJRT_Buffer_Type_F8E4M3: PJRT_Buffer_Type = 26;
pub const PJRT_Buffer_Type_F8E3M4: PJRT_Buffer_Type = 27;
pub const PJRT_Buffer_Type_F8E8M0FNU: PJRT_Buffer_Type = 28;
pub const PJRT_Buffer_Type_F4E2M1FN: PJRT_Buffer_Type = 29;
pub type PJRT_Buffer_Type = ::std::os::raw::c_uint;
pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;
pub const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: PJRT_HostBufferSemantics = 1;
pub const PJRT_HostBufferSemantics_kImmutableZeroCopy: PJRT_HostBufferSemantics = 2;
pub const PJRT_HostBufferSemantics_kMutableZeroCopy: PJRT_HostBufferSemantics = 3;
pub type PJRT_HostBufferSemantics = ::std::os::raw::c_uint;
pub const PJRT_Buffer_MemoryLayout_Type_Tiled: PJRT_Buffer_MemoryLayout_Type = 0;
pub const PJRT_Buffer_MemoryLayout_Type_Strides: PJRT_Buffer_MemoryLayout_Type = 1;
pub type PJRT_Buffer_MemoryLayout_Type = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_MemoryLayout_Tiled {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub minor_to_major: *const i64,
    pub minor_to_major_size: usize,
    pub tile_dims: *const i64,
    pub tile_dim_sizes: *const usize,
    pub num_tiles: usize,
}
impl Default for PJRT_Buffer_MemoryLayout_Tiled {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE: _bindgen_ty_43 = 56;
pub type _bindgen_ty_43 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_MemoryLayout_Strides {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
}
impl Default for PJRT_Buffer_MemoryLayout_Strides {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_MemoryLayout_Strides_STRUCT_SIZE: _bindgen_ty_44 = 32;
pub type _bindgen_ty_44 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Copy, Clone)]
pub struct PJRT_Buffer_MemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub __bindgen_anon_1: PJRT_Buffer_MemoryLayout__bindgen_ty_1,
    pub type_: PJRT_Buffer_MemoryLayout_Type,
}
#[repr(C)]
#[derive(Copy, Clone)]
pub union PJRT_Buffer_MemoryLayout__bindgen_ty_1 {
    pub tiled: PJRT_Buffer_MemoryLayout_Tiled,
    pub strides: PJRT_Buffer_MemoryLayout_Strides,
}
impl Default for PJRT_Buffer_MemoryLayout__bindgen_ty_1 {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
impl Default for PJRT_Buffer_MemoryLayout {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_MemoryLayout_STRUCT_SIZE: _bindgen_ty_45 = 76;
pub type _bindgen_ty_45 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_CreateUninitializedBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub shape_dims: *const i64,
    pub shape_num_dims: usize,
    pub shape_element_type: PJRT_Buffer_Type,
    pub shape_layout: *mut PJRT_Buffer_MemoryLayout,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Client_CreateUninitializedBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_CreateUninitializedBuffer_Args_STRUCT_SIZE: _bindgen_ty_46 = 80;
pub type _bindgen_ty_46 = ::std::os::raw::c_uint;
pub type PJRT_Client_CreateUninitializedBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_CreateUninitializedBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_CreateAliasBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub memory: *mut PJRT_Memory,
    pub shape_dims: *const i64,
    pub shape_num_dims: usize,
    pub shape_element_type: PJRT_Buffer_Type,
    pub shape_layout: *mut PJRT_Buffer_MemoryLayout,
    pub alias_buffer: *mut PJRT_Buffer,
    pub fulfill_alias_buffer_cb: *mut PJRT_FulfillAliasBufferCallback,
}
impl Default for PJRT_Client_CreateAliasBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_CreateAliasBuffer_Args_STRUCT_SIZE: _bindgen_ty_47 = 80;
pub type _bindgen_ty_47 = ::std::os::raw::c_uint;
pub type PJRT_Client_CreateAliasBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_CreateAliasBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_FulfillAliasBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub buffer: *mut PJRT_Buffer,
    pub status_code: PJRT_Error_Code,
    pub error_message: *const ::std::os::raw::c_char,
    pub error_message_size: usize,
    pub fulfill_alias_buffer_cb: *mut PJRT_FulfillAliasBufferCallback,
}
impl Default for PJRT_Client_FulfillAliasBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_FulfillAliasBuffer_Args_STRUCT_SIZE: _bindgen_ty_48 = 64;
pub type _bindgen_ty_48 = ::std::os::raw::c_uint;
pub type PJRT_Client_FulfillAliasBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_FulfillAliasBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const ::std::os::raw::c_void,
    pub type_: PJRT_Buffer_Type,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: PJRT_HostBufferSemantics,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut PJRT_Buffer_MemoryLayout,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Client_BufferFromHostBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE: _bindgen_ty_49 = 120;
pub type _bindgen_ty_49 = ::std::os::raw::c_uint;
pub type PJRT_Client_BufferFromHostBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_BufferFromHostBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_CreateViewOfDeviceBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub device_buffer_ptr: *mut ::std::os::raw::c_void,
    pub dims: *const i64,
    pub num_dims: usize,
    pub element_type: PJRT_Buffer_Type,
    pub layout: *mut PJRT_Buffer_MemoryLayout,
    pub device: *mut PJRT_Device,
    pub on_delete_callback: ::std::option::Option<
        unsafe extern "C" fn(
            device_buffer_ptr: *mut ::std::os::raw::c_void,
            user_arg: *mut ::std::os::raw::c_void,
        ),
    >,
    pub on_delete_callback_arg: *mut ::std::os::raw::c_void,
    pub stream: isize,
    pub buffer: *mut PJRT_Buffer,
    pub memory: *mut PJRT_Memory,
}
impl Default for PJRT_Client_CreateViewOfDeviceBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE: _bindgen_ty_50 = 112;
pub type _bindgen_ty_50 = ::std::os::raw::c_uint;
pub type PJRT_Client_CreateViewOfDeviceBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Client_CreateViewOfDeviceBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_ShapeSpec {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub dims: *const i64,
    pub num_dims: usize,
    pub element_type: PJRT_Buffer_Type,
}
impl Default for PJRT_ShapeSpec {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_ShapeSpec_STRUCT_SIZE: _bindgen_ty_51 = 36;
pub type _bindgen_ty_51 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Client_CreateBuffersForAsyncHostToDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub shape_specs: *mut PJRT_ShapeSpec,
    pub num_shape_specs: usize,
    pub device_layouts: *mut *mut PJRT_Buffer_MemoryLayout,
    pub num_device_layouts: usize,
    pub memory: *mut PJRT_Memory,
    pub transfer_manager: *mut PJRT_AsyncHostToDeviceTransferManager,
}
impl Default for PJRT_Client_CreateBuffersForAsyncHostToDevice_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Client_CreateBuffersForAsyncHostToDevice_Args_STRUCT_SIZE: _bindgen_ty_52 = 72;
pub type _bindgen_ty_52 = ::std::os::raw::c_uint;
pub type PJRT_Client_CreateBuffersForAsyncHostToDevice = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_Client_CreateBuffersForAsyncHostToDevice_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub id: ::std::os::raw::c_int,
}
impl Default for PJRT_DeviceDescription_Id_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_Id_Args_STRUCT_SIZE: _bindgen_ty_53 = 28;
pub type _bindgen_ty_53 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_Id = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_Id_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_ProcessIndex_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub process_index: ::std::os::raw::c_int,
}
impl Default for PJRT_DeviceDescription_ProcessIndex_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE: _bindgen_ty_54 = 28;
pub type _bindgen_ty_54 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_ProcessIndex = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_ProcessIndex_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub num_attributes: usize,
    pub attributes: *const PJRT_NamedValue,
}
impl Default for PJRT_DeviceDescription_Attributes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE: _bindgen_ty_55 = 40;
pub type _bindgen_ty_55 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_Attributes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_Attributes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub device_kind: *const ::std::os::raw::c_char,
    pub device_kind_size: usize,
}
impl Default for PJRT_DeviceDescription_Kind_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE: _bindgen_ty_56 = 40;
pub type _bindgen_ty_56 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_Kind = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_Kind_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_DebugString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub debug_string: *const ::std::os::raw::c_char,
    pub debug_string_size: usize,
}
impl Default for PJRT_DeviceDescription_DebugString_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE: _bindgen_ty_57 = 40;
pub type _bindgen_ty_57 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_DebugString = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_DebugString_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_DeviceDescription_ToString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub to_string: *const ::std::os::raw::c_char,
    pub to_string_size: usize,
}
impl Default for PJRT_DeviceDescription_ToString_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_DeviceDescription_ToString_Args_STRUCT_SIZE: _bindgen_ty_58 = 40;
pub type _bindgen_ty_58 = ::std::os::raw::c_uint;
pub type PJRT_DeviceDescription_ToString = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_DeviceDescription_ToString_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}
impl Default for PJRT_Device_GetDescription_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_GetDescription_Args_STRUCT_SIZE: _bindgen_ty_59 = 32;
pub type _bindgen_ty_59 = ::std::os::raw::c_uint;
pub type PJRT_Device_GetDescription = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_GetDescription_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_IsAddressable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub is_addressable: bool,
}
impl Default for PJRT_Device_IsAddressable_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_IsAddressable_Args_STRUCT_SIZE: _bindgen_ty_60 = 25;
pub type _bindgen_ty_60 = ::std::os::raw::c_uint;
pub type PJRT_Device_IsAddressable = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_IsAddressable_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_LocalHardwareId_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub local_hardware_id: ::std::os::raw::c_int,
}
impl Default for PJRT_Device_LocalHardwareId_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_LocalHardwareId_Args_STRUCT_SIZE: _bindgen_ty_61 = 28;
pub type _bindgen_ty_61 = ::std::os::raw::c_uint;
pub type PJRT_Device_LocalHardwareId = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_LocalHardwareId_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_AddressableMemories_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub memories: *const *mut PJRT_Memory,
    pub num_memories: usize,
}
impl Default for PJRT_Device_AddressableMemories_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_AddressableMemories_Args_STRUCT_SIZE: _bindgen_ty_62 = 40;
pub type _bindgen_ty_62 = ::std::os::raw::c_uint;
pub type PJRT_Device_AddressableMemories = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_AddressableMemories_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_DefaultMemory_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
}
impl Default for PJRT_Device_DefaultMemory_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_DefaultMemory_Args_STRUCT_SIZE: _bindgen_ty_63 = 32;
pub type _bindgen_ty_63 = ::std::os::raw::c_uint;
pub type PJRT_Device_DefaultMemory = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_DefaultMemory_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Device_MemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub peak_bytes_in_use_is_set: bool,
    pub num_allocs: i64,
    pub num_allocs_is_set: bool,
    pub largest_alloc_size: i64,
    pub largest_alloc_size_is_set: bool,
    pub bytes_limit: i64,
    pub bytes_limit_is_set: bool,
    pub bytes_reserved: i64,
    pub bytes_reserved_is_set: bool,
    pub peak_bytes_reserved: i64,
    pub peak_bytes_reserved_is_set: bool,
    pub bytes_reservable_limit: i64,
    pub bytes_reservable_limit_is_set: bool,
    pub largest_free_block_bytes: i64,
    pub largest_free_block_bytes_is_set: bool,
    pub pool_bytes: i64,
    pub pool_bytes_is_set: bool,
    pub peak_pool_bytes: i64,
    pub peak_pool_bytes_is_set: bool,
}
impl Default for PJRT_Device_MemoryStats_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Device_MemoryStats_Args_STRUCT_SIZE: _bindgen_ty_64 = 185;
pub type _bindgen_ty_64 = ::std::os::raw::c_uint;
pub type PJRT_Device_MemoryStats = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Device_MemoryStats_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub id: ::std::os::raw::c_int,
}
impl Default for PJRT_Memory_Id_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_Id_Args_STRUCT_SIZE: _bindgen_ty_65 = 28;
pub type _bindgen_ty_65 = ::std::os::raw::c_uint;
pub type PJRT_Memory_Id =
    ::std::option::Option<unsafe extern "C" fn(args: *mut PJRT_Memory_Id_Args) -> *mut PJRT_Error>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub kind: *const ::std::os::raw::c_char,
    pub kind_size: usize,
}
impl Default for PJRT_Memory_Kind_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_Kind_Args_STRUCT_SIZE: _bindgen_ty_66 = 40;
pub type _bindgen_ty_66 = ::std::os::raw::c_uint;
pub type PJRT_Memory_Kind = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Memory_Kind_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_Kind_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub kind_id: ::std::os::raw::c_int,
}
impl Default for PJRT_Memory_Kind_Id_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_Kind_Id_Args_STRUCT_SIZE: _bindgen_ty_67 = 28;
pub type _bindgen_ty_67 = ::std::os::raw::c_uint;
pub type PJRT_Memory_Kind_Id = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Memory_Kind_Id_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_DebugString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub debug_string: *const ::std::os::raw::c_char,
    pub debug_string_size: usize,
}
impl Default for PJRT_Memory_DebugString_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_DebugString_Args_STRUCT_SIZE: _bindgen_ty_68 = 40;
pub type _bindgen_ty_68 = ::std::os::raw::c_uint;
pub type PJRT_Memory_DebugString = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Memory_DebugString_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_ToString_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub to_string: *const ::std::os::raw::c_char,
    pub to_string_size: usize,
}
impl Default for PJRT_Memory_ToString_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_ToString_Args_STRUCT_SIZE: _bindgen_ty_69 = 40;
pub type _bindgen_ty_69 = ::std::os::raw::c_uint;
pub type PJRT_Memory_ToString = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Memory_ToString_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Memory_AddressableByDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub memory: *mut PJRT_Memory,
    pub devices: *const *mut PJRT_Device,
    pub num_devices: usize,
}
impl Default for PJRT_Memory_AddressableByDevices_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Memory_AddressableByDevices_Args_STRUCT_SIZE: _bindgen_ty_70 = 40;
pub type _bindgen_ty_70 = ::std::os::raw::c_uint;
pub type PJRT_Memory_AddressableByDevices = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Memory_AddressableByDevices_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_ExecuteContext {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_ExecuteContext_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub context: *mut PJRT_ExecuteContext,
}
impl Default for PJRT_ExecuteContext_Create_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_ExecuteContext_Create_Args_STRUCT_SIZE: _bindgen_ty_71 = 24;
pub type _bindgen_ty_71 = ::std::os::raw::c_uint;
pub type PJRT_ExecuteContext_Create = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_ExecuteContext_Create_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_ExecuteContext_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub context: *mut PJRT_ExecuteContext,
}
impl Default for PJRT_ExecuteContext_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_ExecuteContext_Destroy_Args_STRUCT_SIZE: _bindgen_ty_72 = 24;
pub type _bindgen_ty_72 = ::std::os::raw::c_uint;
pub type PJRT_ExecuteContext_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_ExecuteContext_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
}
impl Default for PJRT_Executable_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_Destroy_Args_STRUCT_SIZE: _bindgen_ty_73 = 24;
pub type _bindgen_ty_73 = ::std::os::raw::c_uint;
pub type PJRT_Executable_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}
impl Default for PJRT_LoadedExecutable_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE: _bindgen_ty_74 = 24;
pub type _bindgen_ty_74 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_GetExecutable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub executable: *mut PJRT_Executable,
}
impl Default for PJRT_LoadedExecutable_GetExecutable_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE: _bindgen_ty_75 = 32;
pub type _bindgen_ty_75 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_GetExecutable = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_GetExecutable_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_DeviceAssignmentSerialized {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_GetDeviceAssignment_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub serialized_bytes: *const ::std::os::raw::c_char,
    pub serialized_bytes_size: usize,
    pub serialized_device_assignment: *mut PJRT_DeviceAssignmentSerialized,
    pub serialized_device_assignment_deleter:
        ::std::option::Option<unsafe extern "C" fn(da: *mut PJRT_DeviceAssignmentSerialized)>,
}
impl Default for PJRT_LoadedExecutable_GetDeviceAssignment_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_GetDeviceAssignment_Args_STRUCT_SIZE: _bindgen_ty_76 = 56;
pub type _bindgen_ty_76 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_GetDeviceAssignment = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_LoadedExecutable_GetDeviceAssignment_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_Name_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub executable_name: *const ::std::os::raw::c_char,
    pub executable_name_size: usize,
}
impl Default for PJRT_Executable_Name_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_Name_Args_STRUCT_SIZE: _bindgen_ty_77 = 40;
pub type _bindgen_ty_77 = ::std::os::raw::c_uint;
pub type PJRT_Executable_Name = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_Name_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_NumReplicas_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_replicas: usize,
}
impl Default for PJRT_Executable_NumReplicas_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_NumReplicas_Args_STRUCT_SIZE: _bindgen_ty_78 = 32;
pub type _bindgen_ty_78 = ::std::os::raw::c_uint;
pub type PJRT_Executable_NumReplicas = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_NumReplicas_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_NumPartitions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_partitions: usize,
}
impl Default for PJRT_Executable_NumPartitions_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_NumPartitions_Args_STRUCT_SIZE: _bindgen_ty_79 = 32;
pub type _bindgen_ty_79 = ::std::os::raw::c_uint;
pub type PJRT_Executable_NumPartitions = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_NumPartitions_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}
impl Default for PJRT_LoadedExecutable_AddressableDevices_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE: _bindgen_ty_80 = 40;
pub type _bindgen_ty_80 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_AddressableDevices = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_LoadedExecutable_AddressableDevices_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_OptimizedProgram_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub program: *mut PJRT_Program,
}
impl Default for PJRT_Executable_OptimizedProgram_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE: _bindgen_ty_81 = 32;
pub type _bindgen_ty_81 = ::std::os::raw::c_uint;
pub type PJRT_Executable_OptimizedProgram = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_OptimizedProgram_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_Delete_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}
impl Default for PJRT_LoadedExecutable_Delete_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_Delete_Args_STRUCT_SIZE: _bindgen_ty_82 = 24;
pub type _bindgen_ty_82 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_Delete = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_Delete_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_IsDeleted_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub is_deleted: bool,
}
impl Default for PJRT_LoadedExecutable_IsDeleted_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_IsDeleted_Args_STRUCT_SIZE: _bindgen_ty_83 = 25;
pub type _bindgen_ty_83 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_IsDeleted = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_IsDeleted_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Chunk {
    pub data: *mut ::std::os::raw::c_void,
    pub size: usize,
    pub deleter: ::std::option::Option<
        unsafe extern "C" fn(
            data: *mut ::std::os::raw::c_void,
            deleter_arg: *mut ::std::os::raw::c_void,
        ),
    >,
    pub deleter_arg: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_Chunk {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_CopyToDeviceStream {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_TransferMetadata {
    _unused: [u8; 0],
}
pub type PJRT_SendCallback = ::std::option::Option<
    unsafe extern "C" fn(
        chunk: *mut PJRT_Chunk,
        callback_error: *mut PJRT_CallbackError,
        total_size_in_bytes: usize,
        done: bool,
        user_arg: *mut ::std::os::raw::c_void,
    ) -> *mut PJRT_Error,
>;
pub type PJRT_RecvCallback = ::std::option::Option<
    unsafe extern "C" fn(
        stream: *mut PJRT_CopyToDeviceStream,
        user_arg: *mut ::std::os::raw::c_void,
    ),
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_SendCallbackInfo {
    pub channel_id: i64,
    pub user_arg: *mut ::std::os::raw::c_void,
    pub send_callback: PJRT_SendCallback,
}
impl Default for PJRT_SendCallbackInfo {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_SendCallbackInfo_STRUCT_SIZE: _bindgen_ty_84 = 24;
pub type _bindgen_ty_84 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_RecvCallbackInfo {
    pub channel_id: i64,
    pub user_arg: *mut ::std::os::raw::c_void,
    pub recv_callback: PJRT_RecvCallback,
}
impl Default for PJRT_RecvCallbackInfo {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_RecvCallbackInfo_STRUCT_SIZE: _bindgen_ty_85 = 24;
pub type _bindgen_ty_85 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub send_callbacks: *mut *mut PJRT_SendCallbackInfo,
    pub recv_callbacks: *mut *mut PJRT_RecvCallbackInfo,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: ::std::os::raw::c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PJRT_ExecuteContext,
    pub call_location: *const ::std::os::raw::c_char,
    pub num_tasks: usize,
    pub task_ids: *mut ::std::os::raw::c_int,
    pub incarnation_ids: *mut i64,
}
impl Default for PJRT_ExecuteOptions {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_ExecuteOptions_STRUCT_SIZE: _bindgen_ty_86 = 112;
pub type _bindgen_ty_86 = ::std::os::raw::c_uint;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_Execute_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub options: *mut PJRT_ExecuteOptions,
    pub argument_lists: *const *const *mut PJRT_Buffer,
    pub num_devices: usize,
    pub num_args: usize,
    pub output_lists: *const *mut *mut PJRT_Buffer,
    pub device_complete_events: *mut *mut PJRT_Event,
    pub execute_device: *mut PJRT_Device,
}
impl Default for PJRT_LoadedExecutable_Execute_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE: _bindgen_ty_87 = 80;
pub type _bindgen_ty_87 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_Execute = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_Execute_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_NumOutputs_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
}
impl Default for PJRT_Executable_NumOutputs_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_NumOutputs_Args_STRUCT_SIZE: _bindgen_ty_88 = 32;
pub type _bindgen_ty_88 = ::std::os::raw::c_uint;
pub type PJRT_Executable_NumOutputs = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_NumOutputs_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub size_in_bytes: i64,
}
impl Default for PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_SizeOfGeneratedCodeInBytes_Args_STRUCT_SIZE: _bindgen_ty_89 = 32;
pub type _bindgen_ty_89 = ::std::os::raw::c_uint;
pub type PJRT_Executable_SizeOfGeneratedCodeInBytes = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_Executable_SizeOfGeneratedCodeInBytes_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_Fingerprint_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub executable_fingerprint: *const ::std::os::raw::c_char,
    pub executable_fingerprint_size: usize,
}
impl Default for PJRT_Executable_Fingerprint_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_Fingerprint_Args_STRUCT_SIZE: _bindgen_ty_90 = 40;
pub type _bindgen_ty_90 = ::std::os::raw::c_uint;
pub type PJRT_Executable_Fingerprint = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_Fingerprint_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_GetCostAnalysis_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_properties: usize,
    pub properties: *const PJRT_NamedValue,
}
impl Default for PJRT_Executable_GetCostAnalysis_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE: _bindgen_ty_91 = 40;
pub type _bindgen_ty_91 = ::std::os::raw::c_uint;
pub type PJRT_Executable_GetCostAnalysis = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_GetCostAnalysis_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_GetCompiledMemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
}
impl Default for PJRT_Executable_GetCompiledMemoryStats_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE: _bindgen_ty_92 = 112;
pub type _bindgen_ty_92 = ::std::os::raw::c_uint;
pub type PJRT_Executable_GetCompiledMemoryStats = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_GetCompiledMemoryStats_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_OutputElementTypes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub output_types: *mut PJRT_Buffer_Type,
    pub num_output_types: usize,
}
impl Default for PJRT_Executable_OutputElementTypes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE: _bindgen_ty_93 = 40;
pub type _bindgen_ty_93 = ::std::os::raw::c_uint;
pub type PJRT_Executable_OutputElementTypes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_OutputElementTypes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_OutputDimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
    pub dims: *const i64,
    pub dim_sizes: *const usize,
}
impl Default for PJRT_Executable_OutputDimensions_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE: _bindgen_ty_94 = 48;
pub type _bindgen_ty_94 = ::std::os::raw::c_uint;
pub type PJRT_Executable_OutputDimensions = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_OutputDimensions_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_OutputMemoryKinds_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
    pub memory_kinds: *const *const ::std::os::raw::c_char,
    pub memory_kind_sizes: *const usize,
}
impl Default for PJRT_Executable_OutputMemoryKinds_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_OutputMemoryKinds_Args_STRUCT_SIZE: _bindgen_ty_95 = 48;
pub type _bindgen_ty_95 = ::std::os::raw::c_uint;
pub type PJRT_Executable_OutputMemoryKinds = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_OutputMemoryKinds_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_SerializedExecutable {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *const PJRT_Executable,
    pub serialized_bytes: *const ::std::os::raw::c_char,
    pub serialized_bytes_size: usize,
    pub serialized_executable: *mut PJRT_SerializedExecutable,
    pub serialized_executable_deleter:
        ::std::option::Option<unsafe extern "C" fn(exec: *mut PJRT_SerializedExecutable)>,
}
impl Default for PJRT_Executable_Serialize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_Serialize_Args_STRUCT_SIZE: _bindgen_ty_96 = 56;
pub type _bindgen_ty_96 = ::std::os::raw::c_uint;
pub type PJRT_Executable_Serialize = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_Serialize_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Executable_DeserializeAndLoad_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub serialized_executable: *const ::std::os::raw::c_char,
    pub serialized_executable_size: usize,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub overridden_serialized_compile_options: *const ::std::os::raw::c_char,
    pub overridden_serialized_compile_options_size: usize,
}
impl Default for PJRT_Executable_DeserializeAndLoad_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE: _bindgen_ty_97 = 64;
pub type _bindgen_ty_97 = ::std::os::raw::c_uint;
pub type PJRT_Executable_DeserializeAndLoad = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Executable_DeserializeAndLoad_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_LoadedExecutable_Fingerprint_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub executable_fingerprint: *const ::std::os::raw::c_char,
    pub executable_fingerprint_size: usize,
}
impl Default for PJRT_LoadedExecutable_Fingerprint_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_LoadedExecutable_Fingerprint_Args_STRUCT_SIZE: _bindgen_ty_98 = 40;
pub type _bindgen_ty_98 = ::std::os::raw::c_uint;
pub type PJRT_LoadedExecutable_Fingerprint = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_LoadedExecutable_Fingerprint_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_Destroy_Args_STRUCT_SIZE: _bindgen_ty_99 = 24;
pub type _bindgen_ty_99 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_ElementType_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub type_: PJRT_Buffer_Type,
}
impl Default for PJRT_Buffer_ElementType_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_ElementType_Args_STRUCT_SIZE: _bindgen_ty_100 = 28;
pub type _bindgen_ty_100 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_ElementType = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_ElementType_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_Dimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dims: *const i64,
    pub num_dims: usize,
}
impl Default for PJRT_Buffer_Dimensions_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_Dimensions_Args_STRUCT_SIZE: _bindgen_ty_101 = 40;
pub type _bindgen_ty_101 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_Dimensions = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_Dimensions_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_UnpaddedDimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub unpadded_dims: *const i64,
    pub num_dims: usize,
}
impl Default for PJRT_Buffer_UnpaddedDimensions_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_UnpaddedDimensions_Args_STRUCT_SIZE: _bindgen_ty_102 = 40;
pub type _bindgen_ty_102 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_UnpaddedDimensions = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_UnpaddedDimensions_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_DynamicDimensionIndices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dynamic_dim_indices: *const usize,
    pub num_dynamic_dims: usize,
}
impl Default for PJRT_Buffer_DynamicDimensionIndices_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_DynamicDimensionIndices_Args_STRUCT_SIZE: _bindgen_ty_103 = 40;
pub type _bindgen_ty_103 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_DynamicDimensionIndices = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_DynamicDimensionIndices_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Copy, Clone)]
pub struct PJRT_Buffer_GetMemoryLayout_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub layout: PJRT_Buffer_MemoryLayout,
}
impl Default for PJRT_Buffer_GetMemoryLayout_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE: _bindgen_ty_104 = 104;
pub type _bindgen_ty_104 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_GetMemoryLayout = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_GetMemoryLayout_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_ToHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub src: *mut PJRT_Buffer,
    pub host_layout: *mut PJRT_Buffer_MemoryLayout,
    pub dst: *mut ::std::os::raw::c_void,
    pub dst_size: usize,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Buffer_ToHostBuffer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE: _bindgen_ty_105 = 56;
pub type _bindgen_ty_105 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_ToHostBuffer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_ToHostBuffer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub on_device_size_in_bytes: usize,
}
impl Default for PJRT_Buffer_OnDeviceSizeInBytes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE: _bindgen_ty_106 = 32;
pub type _bindgen_ty_106 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_OnDeviceSizeInBytes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_OnDeviceSizeInBytes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_Delete_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_Delete_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_Delete_Args_STRUCT_SIZE: _bindgen_ty_107 = 24;
pub type _bindgen_ty_107 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_Delete = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_Delete_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_IsDeleted_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub is_deleted: bool,
}
impl Default for PJRT_Buffer_IsDeleted_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE: _bindgen_ty_108 = 25;
pub type _bindgen_ty_108 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_IsDeleted = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_IsDeleted_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_CopyRawToHost_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dst: *mut ::std::os::raw::c_void,
    pub offset: i64,
    pub transfer_size: i64,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Buffer_CopyRawToHost_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_CopyRawToHost_Args_STRUCT_SIZE: _bindgen_ty_109 = 56;
pub type _bindgen_ty_109 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_CopyRawToHost = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_CopyRawToHost_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_CopyToDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dst_device: *mut PJRT_Device,
    pub dst_buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_CopyToDevice_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE: _bindgen_ty_110 = 40;
pub type _bindgen_ty_110 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_CopyToDevice = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_CopyToDevice_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_CopyToMemory_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dst_memory: *mut PJRT_Memory,
    pub dst_buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_CopyToMemory_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_CopyToMemory_Args_STRUCT_SIZE: _bindgen_ty_111 = 40;
pub type _bindgen_ty_111 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_CopyToMemory = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_CopyToMemory_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_IsOnCpu_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub is_on_cpu: bool,
}
impl Default for PJRT_Buffer_IsOnCpu_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE: _bindgen_ty_112 = 25;
pub type _bindgen_ty_112 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_IsOnCpu = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_IsOnCpu_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_Device_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub device: *mut PJRT_Device,
}
impl Default for PJRT_Buffer_Device_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_Device_Args_STRUCT_SIZE: _bindgen_ty_113 = 32;
pub type _bindgen_ty_113 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_Device = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_Device_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_Memory_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub memory: *mut PJRT_Memory,
}
impl Default for PJRT_Buffer_Memory_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_Memory_Args_STRUCT_SIZE: _bindgen_ty_114 = 32;
pub type _bindgen_ty_114 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_Memory = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_Memory_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_ReadyEvent_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub event: *mut PJRT_Event,
}
impl Default for PJRT_Buffer_ReadyEvent_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE: _bindgen_ty_115 = 32;
pub type _bindgen_ty_115 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_ReadyEvent = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_ReadyEvent_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_UnsafePointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub buffer_pointer: usize,
}
impl Default for PJRT_Buffer_UnsafePointer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE: _bindgen_ty_116 = 32;
pub type _bindgen_ty_116 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_UnsafePointer = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_Buffer_UnsafePointer_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_IncreaseExternalReferenceCount_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_IncreaseExternalReferenceCount_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_IncreaseExternalReferenceCount_Args_STRUCT_SIZE: _bindgen_ty_117 = 24;
pub type _bindgen_ty_117 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_IncreaseExternalReferenceCount = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_Buffer_IncreaseExternalReferenceCount_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_DecreaseExternalReferenceCount_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}
impl Default for PJRT_Buffer_DecreaseExternalReferenceCount_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_DecreaseExternalReferenceCount_Args_STRUCT_SIZE: _bindgen_ty_118 = 24;
pub type _bindgen_ty_118 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_DecreaseExternalReferenceCount = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_Buffer_DecreaseExternalReferenceCount_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub device_memory_ptr: *mut ::std::os::raw::c_void,
}
impl Default for PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args_STRUCT_SIZE: _bindgen_ty_119 = 32;
pub type _bindgen_ty_119 = ::std::os::raw::c_uint;
pub type PJRT_Buffer_OpaqueDeviceMemoryDataPointer = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_CopyToDeviceStream_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub stream: *mut PJRT_CopyToDeviceStream,
}
impl Default for PJRT_CopyToDeviceStream_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_CopyToDeviceStream_Destroy_Args_STRUCT_SIZE: _bindgen_ty_120 = 24;
pub type _bindgen_ty_120 = ::std::os::raw::c_uint;
pub type PJRT_CopyToDeviceStream_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_CopyToDeviceStream_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_CopyToDeviceStream_AddChunk_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub stream: *mut PJRT_CopyToDeviceStream,
    pub chunk: *mut PJRT_Chunk,
    pub transfer_complete: *mut PJRT_Event,
}
impl Default for PJRT_CopyToDeviceStream_AddChunk_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_CopyToDeviceStream_AddChunk_Args_STRUCT_SIZE: _bindgen_ty_121 = 40;
pub type _bindgen_ty_121 = ::std::os::raw::c_uint;
pub type PJRT_CopyToDeviceStream_AddChunk = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_CopyToDeviceStream_AddChunk_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_CopyToDeviceStream_TotalBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub stream: *mut PJRT_CopyToDeviceStream,
    pub total_bytes: i64,
}
impl Default for PJRT_CopyToDeviceStream_TotalBytes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_CopyToDeviceStream_TotalBytes_Args_STRUCT_SIZE: _bindgen_ty_122 = 32;
pub type _bindgen_ty_122 = ::std::os::raw::c_uint;
pub type PJRT_CopyToDeviceStream_TotalBytes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_CopyToDeviceStream_TotalBytes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_CopyToDeviceStream_GranuleSize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub stream: *mut PJRT_CopyToDeviceStream,
    pub granule_size_in_bytes: i64,
}
impl Default for PJRT_CopyToDeviceStream_GranuleSize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_CopyToDeviceStream_GranuleSize_Args_STRUCT_SIZE: _bindgen_ty_123 = 32;
pub type _bindgen_ty_123 = ::std::os::raw::c_uint;
pub type PJRT_CopyToDeviceStream_GranuleSize = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_CopyToDeviceStream_GranuleSize_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_CopyToDeviceStream_CurrentBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub stream: *mut PJRT_CopyToDeviceStream,
    pub current_bytes: i64,
}
impl Default for PJRT_CopyToDeviceStream_CurrentBytes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_CopyToDeviceStream_CurrentBytes_Args_STRUCT_SIZE: _bindgen_ty_124 = 32;
pub type _bindgen_ty_124 = ::std::os::raw::c_uint;
pub type PJRT_CopyToDeviceStream_CurrentBytes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_CopyToDeviceStream_CurrentBytes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology_name: *const ::std::os::raw::c_char,
    pub topology_name_size: usize,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub topology: *mut PJRT_TopologyDescription,
}
impl Default for PJRT_TopologyDescription_Create_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_Create_Args_STRUCT_SIZE: _bindgen_ty_125 = 56;
pub type _bindgen_ty_125 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_Create = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_Create_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
}
impl Default for PJRT_TopologyDescription_Destroy_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE: _bindgen_ty_126 = 24;
pub type _bindgen_ty_126 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_Destroy = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_Destroy_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub platform_version: *const ::std::os::raw::c_char,
    pub platform_version_size: usize,
}
impl Default for PJRT_TopologyDescription_PlatformVersion_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_PlatformVersion_Args_STRUCT_SIZE: _bindgen_ty_127 = 40;
pub type _bindgen_ty_127 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_PlatformVersion = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_TopologyDescription_PlatformVersion_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *const PJRT_TopologyDescription,
    pub platform_name: *const ::std::os::raw::c_char,
    pub platform_name_size: usize,
}
impl Default for PJRT_TopologyDescription_PlatformName_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_PlatformName_Args_STRUCT_SIZE: _bindgen_ty_128 = 40;
pub type _bindgen_ty_128 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_PlatformName = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_PlatformName_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *const PJRT_TopologyDescription,
    pub descriptions: *const *mut PJRT_DeviceDescription,
    pub num_descriptions: usize,
}
impl Default for PJRT_TopologyDescription_GetDeviceDescriptions_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_GetDeviceDescriptions_Args_STRUCT_SIZE: _bindgen_ty_129 = 40;
pub type _bindgen_ty_129 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_GetDeviceDescriptions = ::std::option::Option<
    unsafe extern "C" fn(
        args: *mut PJRT_TopologyDescription_GetDeviceDescriptions_Args,
    ) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_SerializedTopology {
    _unused: [u8; 0],
}
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub serialized_bytes: *const ::std::os::raw::c_char,
    pub serialized_bytes_size: usize,
    pub serialized_topology: *mut PJRT_SerializedTopology,
    pub serialized_topology_deleter: ::std::option::Option<
        unsafe extern "C" fn(serialized_topology: *mut PJRT_SerializedTopology),
    >,
}
impl Default for PJRT_TopologyDescription_Serialize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_Serialize_Args_STRUCT_SIZE: _bindgen_ty_130 = 56;
pub type _bindgen_ty_130 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_Serialize = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_Serialize_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_Deserialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub serialized_topology: *const ::std::os::raw::c_char,
    pub serialized_topology_size: usize,
    pub topology: *mut PJRT_TopologyDescription,
}
impl Default for PJRT_TopologyDescription_Deserialize_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_Deserialize_Args_STRUCT_SIZE: _bindgen_ty_131 = 40;
pub type _bindgen_ty_131 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_Deserialize = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_Deserialize_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_TopologyDescription_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}
impl Default for PJRT_TopologyDescription_Attributes_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_TopologyDescription_Attributes_Args_STRUCT_SIZE: _bindgen_ty_132 = 40;
pub type _bindgen_ty_132 = ::std::os::raw::c_uint;
pub type PJRT_TopologyDescription_Attributes = ::std::option::Option<
    unsafe extern "C" fn(args: *mut PJRT_TopologyDescription_Attributes_Args) -> *mut PJRT_Error,
>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *const PJRT_TopologyDescription,
    pub program: *const PJRT_Program,
    pub compile_options: *const ::std::os::raw::c_char,
    pub compile_options_size: usize,
    pub client: *mut PJRT_Client,
    pub executable: *mut PJRT_Executable,
}
impl Default for PJRT_Compile_Args {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Compile_Args_STRUCT_SIZE: _bindgen_ty_133 = 64;
pub type _bindgen_ty_133 = ::std::os::raw::c_uint;
pub type PJRT_Compile =
    ::std::option::Option<unsafe extern "C" fn(args: *mut PJRT_Compile_Args) -> *mut PJRT_Error>;
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,
    pub PJRT_Error_Destroy: PJRT_Error_Destroy,
    pub PJRT_Error_Message: PJRT_Error_Message,
    pub PJRT_Error_GetCode: PJRT_Error_GetCode,
    pub PJRT_Plugin_Initialize: PJRT_Plugin_Initialize,
    pub PJRT_Plugin_Attributes: PJRT_Plugin_Attributes,
    pub PJRT_Event_Destroy: PJRT_Event_Destroy,
    pub PJRT_Event_IsReady: PJRT_Event_IsReady,
    pub PJRT_Event_Error: PJRT_Event_Error,
    pub PJRT_Event_Await: PJRT_Event_Await,
    pub PJRT_Event_OnReady: PJRT_Event_OnReady,
    pub PJRT_Client_Create: PJRT_Client_Create,
    pub PJRT_Client_Destroy: PJRT_Client_Destroy,
    pub PJRT_Client_PlatformName: PJRT_Client_PlatformName,
    pub PJRT_Client_ProcessIndex: PJRT_Client_ProcessIndex,
    pub PJRT_Client_PlatformVersion: PJRT_Client_PlatformVersion,
    pub PJRT_Client_Devices: PJRT_Client_Devices,
    pub PJRT_Client_AddressableDevices: PJRT_Client_AddressableDevices,
    pub PJRT_Client_LookupDevice: PJRT_Client_LookupDevice,
    pub PJRT_Client_LookupAddressableDevice: PJRT_Client_LookupAddressableDevice,
    pub PJRT_Client_AddressableMemories: PJRT_Client_AddressableMemories,
    pub PJRT_Client_Compile: PJRT_Client_Compile,
    pub PJRT_Client_DefaultDeviceAssignment: PJRT_Client_DefaultDeviceAssignment,
    pub PJRT_Client_BufferFromHostBuffer: PJRT_Client_BufferFromHostBuffer,
    pub PJRT_DeviceDescription_Id: PJRT_DeviceDescription_Id,
    pub PJRT_DeviceDescription_ProcessIndex: PJRT_DeviceDescription_ProcessIndex,
    pub PJRT_DeviceDescription_Attributes: PJRT_DeviceDescription_Attributes,
    pub PJRT_DeviceDescription_Kind: PJRT_DeviceDescription_Kind,
    pub PJRT_DeviceDescription_DebugString: PJRT_DeviceDescription_DebugString,
    pub PJRT_DeviceDescription_ToString: PJRT_DeviceDescription_ToString,
    pub PJRT_Device_GetDescription: PJRT_Device_GetDescription,
    pub PJRT_Device_IsAddressable: PJRT_Device_IsAddressable,
    pub PJRT_Device_LocalHardwareId: PJRT_Device_LocalHardwareId,
    pub PJRT_Device_AddressableMemories: PJRT_Device_AddressableMemories,
    pub PJRT_Device_DefaultMemory: PJRT_Device_DefaultMemory,
    pub PJRT_Device_MemoryStats: PJRT_Device_MemoryStats,
    pub PJRT_Memory_Id: PJRT_Memory_Id,
    pub PJRT_Memory_Kind: PJRT_Memory_Kind,
    pub PJRT_Memory_DebugString: PJRT_Memory_DebugString,
    pub PJRT_Memory_ToString: PJRT_Memory_ToString,
    pub PJRT_Memory_AddressableByDevices: PJRT_Memory_AddressableByDevices,
    pub PJRT_Executable_Destroy: PJRT_Executable_Destroy,
    pub PJRT_Executable_Name: PJRT_Executable_Name,
    pub PJRT_Executable_NumReplicas: PJRT_Executable_NumReplicas,
    pub PJRT_Executable_NumPartitions: PJRT_Executable_NumPartitions,
    pub PJRT_Executable_NumOutputs: PJRT_Executable_NumOutputs,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: PJRT_Executable_SizeOfGeneratedCodeInBytes,
    pub PJRT_Executable_GetCostAnalysis: PJRT_Executable_GetCostAnalysis,
    pub PJRT_Executable_OutputMemoryKinds: PJRT_Executable_OutputMemoryKinds,
    pub PJRT_Executable_OptimizedProgram: PJRT_Executable_OptimizedProgram,
    pub PJRT_Executable_Serialize: PJRT_Executable_Serialize,
    pub PJRT_LoadedExecutable_Destroy: PJRT_LoadedExecutable_Destroy,
    pub PJRT_LoadedExecutable_GetExecutable: PJRT_LoadedExecutable_GetExecutable,
    pub PJRT_LoadedExecutable_AddressableDevices: PJRT_LoadedExecutable_AddressableDevices,
    pub PJRT_LoadedExecutable_Delete: PJRT_LoadedExecutable_Delete,
    pub PJRT_LoadedExecutable_IsDeleted: PJRT_LoadedExecutable_IsDeleted,
    pub PJRT_LoadedExecutable_Execute: PJRT_LoadedExecutable_Execute,
    pub PJRT_Executable_DeserializeAndLoad: PJRT_Executable_DeserializeAndLoad,
    pub PJRT_LoadedExecutable_Fingerprint: PJRT_LoadedExecutable_Fingerprint,
    pub PJRT_Buffer_Destroy: PJRT_Buffer_Destroy,
    pub PJRT_Buffer_ElementType: PJRT_Buffer_ElementType,
    pub PJRT_Buffer_Dimensions: PJRT_Buffer_Dimensions,
    pub PJRT_Buffer_UnpaddedDimensions: PJRT_Buffer_UnpaddedDimensions,
    pub PJRT_Buffer_DynamicDimensionIndices: PJRT_Buffer_DynamicDimensionIndices,
    pub PJRT_Buffer_GetMemoryLayout: PJRT_Buffer_GetMemoryLayout,
    pub PJRT_Buffer_OnDeviceSizeInBytes: PJRT_Buffer_OnDeviceSizeInBytes,
    pub PJRT_Buffer_Device: PJRT_Buffer_Device,
    pub PJRT_Buffer_Memory: PJRT_Buffer_Memory,
    pub PJRT_Buffer_Delete: PJRT_Buffer_Delete,
    pub PJRT_Buffer_IsDeleted: PJRT_Buffer_IsDeleted,
    pub PJRT_Buffer_CopyToDevice: PJRT_Buffer_CopyToDevice,
    pub PJRT_Buffer_ToHostBuffer: PJRT_Buffer_ToHostBuffer,
    pub PJRT_Buffer_IsOnCpu: PJRT_Buffer_IsOnCpu,
    pub PJRT_Buffer_ReadyEvent: PJRT_Buffer_ReadyEvent,
    pub PJRT_Buffer_UnsafePointer: PJRT_Buffer_UnsafePointer,
    pub PJRT_Buffer_IncreaseExternalReferenceCount: PJRT_Buffer_IncreaseExternalReferenceCount,
    pub PJRT_Buffer_DecreaseExternalReferenceCount: PJRT_Buffer_DecreaseExternalReferenceCount,
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
    pub PJRT_CopyToDeviceStream_Destroy: PJRT_CopyToDeviceStream_Destroy,
    pub PJRT_CopyToDeviceStream_AddChunk: PJRT_CopyToDeviceStream_AddChunk,
    pub PJRT_CopyToDeviceStream_TotalBytes: PJRT_CopyToDeviceStream_TotalBytes,
    pub PJRT_CopyToDeviceStream_GranuleSize: PJRT_CopyToDeviceStream_GranuleSize,
    pub PJRT_CopyToDeviceStream_CurrentBytes: PJRT_CopyToDeviceStream_CurrentBytes,
    pub PJRT_TopologyDescription_Create: PJRT_TopologyDescription_Create,
    pub PJRT_TopologyDescription_Destroy: PJRT_TopologyDescription_Destroy,
    pub PJRT_TopologyDescription_PlatformName: PJRT_TopologyDescription_PlatformName,
    pub PJRT_TopologyDescription_PlatformVersion: PJRT_TopologyDescription_PlatformVersion,
    pub PJRT_TopologyDescription_GetDeviceDescriptions:
        PJRT_TopologyDescription_GetDeviceDescriptions,
    pub PJRT_TopologyDescription_Serialize: PJRT_TopologyDescription_Serialize,
    pub PJRT_TopologyDescription_Attributes: PJRT_TopologyDescription_Attributes,
    pub PJRT_Compile: PJRT_Compile,
    pub PJRT_Executable_OutputElementTypes: PJRT_Executable_OutputElementTypes,
    pub PJRT_Executable_OutputDimensions: PJRT_Executable_OutputDimensions,
    pub PJRT_Buffer_CopyToMemory: PJRT_Buffer_CopyToMemory,
    pub PJRT_Client_CreateViewOfDeviceBuffer: PJRT_Client_CreateViewOfDeviceBuffer,
    pub PJRT_Executable_Fingerprint: PJRT_Executable_Fingerprint,
    pub PJRT_Client_TopologyDescription: PJRT_Client_TopologyDescription,
    pub PJRT_Executable_GetCompiledMemoryStats: PJRT_Executable_GetCompiledMemoryStats,
    pub PJRT_Memory_Kind_Id: PJRT_Memory_Kind_Id,
    pub PJRT_ExecuteContext_Create: PJRT_ExecuteContext_Create,
    pub PJRT_ExecuteContext_Destroy: PJRT_ExecuteContext_Destroy,
    pub PJRT_Buffer_CopyRawToHost: PJRT_Buffer_CopyRawToHost,
    pub PJRT_AsyncHostToDeviceTransferManager_Destroy:
        PJRT_AsyncHostToDeviceTransferManager_Destroy,
    pub PJRT_AsyncHostToDeviceTransferManager_TransferData:
        PJRT_AsyncHostToDeviceTransferManager_TransferData,
    pub PJRT_Client_CreateBuffersForAsyncHostToDevice:
        PJRT_Client_CreateBuffersForAsyncHostToDevice,
    pub PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer:
        PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer,
    pub PJRT_AsyncHostToDeviceTransferManager_Device: PJRT_AsyncHostToDeviceTransferManager_Device,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferCount:
        PJRT_AsyncHostToDeviceTransferManager_BufferCount,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferSize:
        PJRT_AsyncHostToDeviceTransferManager_BufferSize,
    pub PJRT_AsyncHostToDeviceTransferManager_SetBufferError:
        PJRT_AsyncHostToDeviceTransferManager_SetBufferError,
    pub PJRT_AsyncHostToDeviceTransferManager_AddMetadata:
        PJRT_AsyncHostToDeviceTransferManager_AddMetadata,
    pub PJRT_Client_DmaMap: PJRT_Client_DmaMap,
    pub PJRT_Client_DmaUnmap: PJRT_Client_DmaUnmap,
    pub PJRT_Client_CreateUninitializedBuffer: PJRT_Client_CreateUninitializedBuffer,
    pub PJRT_Client_UpdateGlobalProcessInfo: PJRT_Client_UpdateGlobalProcessInfo,
    pub PJRT_TopologyDescription_Deserialize: PJRT_TopologyDescription_Deserialize,
    pub PJRT_Client_CreateAliasBuffer: PJRT_Client_CreateAliasBuffer,
    pub PJRT_Client_FulfillAliasBuffer: PJRT_Client_FulfillAliasBuffer,
    pub PJRT_LoadedExecutable_GetDeviceAssignment: PJRT_LoadedExecutable_GetDeviceAssignment,
}
impl Default for PJRT_Api {
    fn default() -> Self {
        let mut s = ::std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: every field of this C struct is an integer, a bool, a float, a raw
        // pointer or an `Option` of a function pointer, all valid when all bits are zero.
        unsafe {
            ::std::ptr::write_bytes(s.as_mut_ptr(), 0, 1);
            s.assume_init()
        }
    }
}
pub const PJRT_Api_STRUCT_SIZE: _bindgen_ty_134 = 984;
pub type _bindgen_ty_134 = ::std::os::raw::c_uint;
