//! tessel-dsl: everything tessel's kernel macros expand into.
//!
//! A kernel is traced (Rust code runs and appends ops to a graph), lowered to
//! StableHLO text, compiled by a PJRT plugin and executed. See the `tessel`
//! facade crate for the user-facing documentation.
#![warn(missing_docs)]

pub mod config;
pub mod dtype;
pub mod error;
pub mod host;
pub mod ir;
pub mod kernel;
pub mod lang;
pub mod lower;
pub mod ops;
pub mod profile;
pub mod report;
pub mod runtime;
pub mod shape;
pub mod shard;
pub mod tile;
pub mod trace;

pub use dtype::{
    DType, Element, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S32, S64, S8, U32, U8,
};
pub use error::{DeviceError, Error, HostError, KernelError, Location, Result};
pub use host::HostTensor;
pub use ir::Graph;
pub use kernel::moe;
pub use ops::shape::concat;
pub use ops::{cond, fori_loop, optimization_barrier, while_loop, Carry, DotDims, Precision};
pub use shape::{Shape, TensorSpec};
pub use tile::{blocks, blocks_of, grid};
pub use trace::tensor;
pub use trace::tensor::Tensor;
pub use trace::{thread_trace_count, trace, trace_count};

/// Everything a kernel file usually needs: `use tessel::prelude::*;`.
pub mod prelude {
    pub use crate::config::{KernelConfig, Platform};
    pub use crate::kernel::{StaticArg, StaticKey};
    pub use crate::lang::ds;
    pub use crate::ops::random::{random_bits, uniform};
    pub use crate::runtime::{Device, DeviceBuffer, Executable};
    pub use crate::tile::{blocks, blocks_of, grid, BlockSparse, HostBlockSparse, Mask};
    pub use crate::{
        concat, cond, fori_loop, optimization_barrier, while_loop, DType, Error, HostTensor,
        Precision, Result, Tensor, TensorSpec, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S32,
        S64, S8, U32, U8,
    };
    pub use tessel_macros::{cpu_kernel, expert_kernel, gpu_kernel, sparse_kernel, tpu_kernel};
}
