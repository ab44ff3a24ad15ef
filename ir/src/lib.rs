//! tessel-ir: the data every layer of tessel shares, and nothing that
//! traces, compiles or runs.
//!
//! - [`dtype`]: element types and their host encodings;
//! - [`shape`]: shapes, tensor specs and their size limits;
//! - [`config`]: a kernel's configuration (precision, blocks, donation, checks);
//! - [`host`]: host tensors and `.npy` files;
//! - [`ir`]: the traced graph (values, nodes, regions, the op set, checks,
//!   shardings) and the data of parameter trees (structures and paths);
//! - [`error`]: the error types of every layer, one [`Error`] for users.
//!
//! Programs use these through the `tessel` facade (or `tessel-dsl`), which
//! re-exports every module at the same path.
#![forbid(unsafe_code)]

/// The `half` crate (`bf16`, `f16`) host tensors convert from and to.
pub use half;

/// The `float8` crate (`F8E4M3`, `F8E5M2`) host tensors convert from and to.
pub use float8;

/// The `ndarray` crate host tensors convert from and to (the `ndarray` feature).
#[cfg(feature = "ndarray")]
pub use ndarray;

pub mod config;
pub mod dtype;
pub mod error;
pub mod host;
pub mod ir;
pub mod shape;

pub use dtype::{
    DType, Element, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S16, S32, S64, S8, U16, U32, U64,
    U8,
};
pub use error::{
    CheckError, DeviceError, Error, HostError, InterpError, KernelError, Location, Result,
};
pub use host::HostTensor;
pub use shape::{Shape, TensorSpec};
