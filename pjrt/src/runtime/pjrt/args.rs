//! Construction of PJRT argument structs: every field zeroed and
//! `struct_size` set from the header's `*_STRUCT_SIZE` constant.
//!
//! A plugin refuses an args struct whose `struct_size` is smaller than its
//! own, and reads only the fields a smaller (older) plugin knows about, so
//! the size must be the header's own value, never `size_of` (which includes
//! trailing padding that a newer plugin could read as a field).
//!
//! Every struct the binding uses is also checked at compile time against
//! its header size: `struct_size` comes first, and the Rust struct is that
//! many bytes rounded up to its alignment (the header's size ends at the
//! last field). A regenerated `ffi.rs` whose layouts drift from its own
//! `*_STRUCT_SIZE` constants, or a struct edited by hand, fails to build.

use std::mem::{align_of, offset_of, size_of};

use super::ffi;

/// Compile-time check that `ffi::$ty` agrees with `ffi::$size` (see the
/// module documentation).
macro_rules! assert_layout {
    ($($ty:ident => $size:ident),* $(,)?) => {
        $(
            const _: () = assert!(
                offset_of!(ffi::$ty, struct_size) == 0
                    && size_of::<ffi::$ty>()
                        == (ffi::$size as usize).next_multiple_of(align_of::<ffi::$ty>()),
                concat!(
                    "ffi::", stringify!($ty), " does not match ffi::", stringify!($size),
                    ": regenerate ffi.rs with scripts/regen-ffi.sh"
                )
            );
        )*
    };
}

// Structs the runtime reads from the plugin but never builds.
assert_layout! {
    PJRT_Api => PJRT_Api_STRUCT_SIZE,
    PJRT_Api_Version => PJRT_Api_Version_STRUCT_SIZE,
}

/// A PJRT args struct with a header-defined size.
pub(crate) trait Args: Default {
    /// A zeroed struct with `struct_size` set.
    fn new() -> Self;
}

macro_rules! args {
    ($($ty:ident => $size:ident),* $(,)?) => {
        assert_layout! { $($ty => $size),* }
        $(
            impl Args for ffi::$ty {
                fn new() -> Self {
                    ffi::$ty {
                        struct_size: ffi::$size as usize,
                        ..Default::default()
                    }
                }
            }
        )*
    };
}

args! {
    PJRT_Error_Destroy_Args => PJRT_Error_Destroy_Args_STRUCT_SIZE,
    PJRT_Error_Message_Args => PJRT_Error_Message_Args_STRUCT_SIZE,
    PJRT_Error_GetCode_Args => PJRT_Error_GetCode_Args_STRUCT_SIZE,
    PJRT_NamedValue => PJRT_NamedValue_STRUCT_SIZE,
    PJRT_Plugin_Initialize_Args => PJRT_Plugin_Initialize_Args_STRUCT_SIZE,
    PJRT_Plugin_Attributes_Args => PJRT_Plugin_Attributes_Args_STRUCT_SIZE,
    PJRT_Event_Destroy_Args => PJRT_Event_Destroy_Args_STRUCT_SIZE,
    PJRT_Event_Await_Args => PJRT_Event_Await_Args_STRUCT_SIZE,
    PJRT_Client_Create_Args => PJRT_Client_Create_Args_STRUCT_SIZE,
    PJRT_Client_Destroy_Args => PJRT_Client_Destroy_Args_STRUCT_SIZE,
    PJRT_Client_PlatformName_Args => PJRT_Client_PlatformName_Args_STRUCT_SIZE,
    PJRT_Client_PlatformVersion_Args => PJRT_Client_PlatformVersion_Args_STRUCT_SIZE,
    PJRT_Client_AddressableDevices_Args => PJRT_Client_AddressableDevices_Args_STRUCT_SIZE,
    PJRT_Client_Compile_Args => PJRT_Client_Compile_Args_STRUCT_SIZE,
    PJRT_Client_BufferFromHostBuffer_Args => PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
    PJRT_Program => PJRT_Program_STRUCT_SIZE,
    PJRT_LoadedExecutable_Destroy_Args => PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_GetExecutable_Args => PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_AddressableDevices_Args => PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_Execute_Args => PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
    PJRT_ExecuteOptions => PJRT_ExecuteOptions_STRUCT_SIZE,
    PJRT_Executable_Destroy_Args => PJRT_Executable_Destroy_Args_STRUCT_SIZE,
    PJRT_Executable_NumOutputs_Args => PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
    PJRT_Executable_OutputElementTypes_Args => PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE,
    PJRT_Executable_OutputDimensions_Args => PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE,
    PJRT_Executable_GetCostAnalysis_Args => PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE,
    PJRT_Executable_GetCompiledMemoryStats_Args => PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE,
    PJRT_Executable_Fingerprint_Args => PJRT_Executable_Fingerprint_Args_STRUCT_SIZE,
    PJRT_Executable_Serialize_Args => PJRT_Executable_Serialize_Args_STRUCT_SIZE,
    PJRT_Executable_DeserializeAndLoad_Args => PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE,
    PJRT_Buffer_Destroy_Args => PJRT_Buffer_Destroy_Args_STRUCT_SIZE,
    PJRT_Buffer_ReadyEvent_Args => PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE,
    PJRT_Buffer_IsDeleted_Args => PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE,
    PJRT_Buffer_ElementType_Args => PJRT_Buffer_ElementType_Args_STRUCT_SIZE,
    PJRT_Buffer_Dimensions_Args => PJRT_Buffer_Dimensions_Args_STRUCT_SIZE,
    PJRT_Buffer_Device_Args => PJRT_Buffer_Device_Args_STRUCT_SIZE,
    PJRT_Buffer_ToHostBuffer_Args => PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
    PJRT_Buffer_MemoryLayout => PJRT_Buffer_MemoryLayout_STRUCT_SIZE,
    PJRT_Buffer_MemoryLayout_Tiled => PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_from_the_header() {
        let a = ffi::PJRT_Client_Create_Args::new();
        assert_eq!(a.struct_size, 88);
        assert!(a.client.is_null());
        let p = ffi::PJRT_Program::new();
        assert_eq!(p.struct_size, 48);
        assert!(std::mem::size_of::<ffi::PJRT_Program>() >= p.struct_size);
    }
}
