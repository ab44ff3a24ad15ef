//! The PJRT C API binding: the generated declarations (`ffi`), loading a plugin and its
//! function table (`api`), argument structs (`args`), the one checked call (`call`) and its errors (`error`).

pub(super) mod api;
pub(super) mod args;
pub(super) mod call;
pub(super) mod error;
pub(super) mod ffi;
