//! tessel-dsl: everything tessel's kernel macros expand into.
//!
//! A kernel is traced (Rust code runs and appends ops to a graph), lowered to
//! StableHLO text, compiled by a PJRT plugin and executed. See the `tessel`
//! facade crate for the user-facing documentation.
#![warn(missing_docs)]

pub mod dtype;
pub mod error;
pub mod graph;
pub mod host;
pub mod kernel;
pub mod lang;
pub mod lower;
pub mod ops;
pub mod profile;
pub mod runtime;
pub mod shape;
pub mod tensor;
pub mod tile;
pub mod trace;

pub use dtype::{
    DType, Element, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S32, S64, S8, U32, U8,
};
pub use error::{DeviceError, Error, HostError, KernelError, Location, Result};
pub use graph::Graph;
pub use host::HostTensor;
pub use ops::shape::concat;
pub use ops::{cond, fori_loop, optimization_barrier, while_loop, Carry, DotDims, Precision};
pub use shape::{Shape, TensorSpec};
pub use tensor::Tensor;
pub use trace::{thread_trace_count, trace, trace_count, TraceOptions};
