//! tessel-dsl: everything tessel's kernel macros expand into.
//!
//! A kernel is traced (Rust code runs and appends ops to a graph), lowered to
//! StableHLO text, compiled by a PJRT plugin and executed. See the `tessel`
//! facade crate for the user-facing documentation.
#![warn(missing_docs)]
// No unsafe code: the PJRT binding is the tessel-pjrt crate, re-exported
// as `runtime`.
#![forbid(unsafe_code)]

/// The `half` crate (`bf16`, `f16`) host tensors convert from and to.
pub use half;

/// The `float8` crate (`F8E4M3`, `F8E5M2`) host tensors convert from and to.
pub use tessel_ir::float8;

/// The `ndarray` crate host tensors convert from and to (the `ndarray` feature).
#[cfg(feature = "ndarray")]
pub use tessel_ir::ndarray;

pub mod autodiff;
pub use tessel_ir::config;
pub use tessel_ir::dtype;
pub use tessel_ir::error;
pub mod host;
pub use tessel_lower::interp;
pub mod ir;
pub mod kernel;
pub mod lang;
pub use tessel_lower::lower;
pub mod ops;
pub mod profile;
pub mod report;
pub use tessel_ir::shape;
pub use tessel_pjrt::runtime;
pub mod shard;
pub mod tile;
pub mod trace;
pub mod vmap;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use dtype::{
    DType, Element, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S16, S32, S64, S8, U16, U32, U64,
    U8,
};
pub use error::{
    CheckError, DeviceError, Error, HostError, InterpError, KernelError, Location, Result,
};
pub use host::checkpoint;
pub use host::HostTensor;
pub use ir::tree::{Tree, TreeValue};
pub use ir::Graph;
pub use kernel::moe;
pub use ops::check::check;
pub use ops::ffi;
pub use ops::shape::concat;
pub use ops::{
    axis_index, cond, fori_loop, optimization_barrier, scan, scan_with, while_loop, Carry, DotDims,
    Precision, ScanOptions, TakeMode,
};
pub use shape::{Shape, TensorSpec};
pub use tessel_macros::ffi_function;
/// `#[derive(Tree)]`: see [`tree`].
pub use tessel_macros::Tree;
pub use tile::{blocks, blocks_of, grid};
pub use trace::tensor;
pub use trace::tensor::Tensor;
pub use trace::{thread_trace_count, trace, trace_count};

/// Trees of tensors (JAX's pytrees): one structure, written once generic
/// over its leaf, that holds traced `Tensor`s inside a kernel,
/// `DeviceBuffer`s between calls and `HostTensor`s on the host.
///
/// ```
/// # extern crate tessel_dsl as tessel;
/// use tessel::{tree, Tensor, Tree, TreeValue, HostTensor, TensorSpec, F32};
///
/// #[derive(Tree)]
/// struct Layer<T = Tensor> {
///     w: T,
///     b: T,
/// }
///
/// #[derive(Tree)]
/// struct Params<T = Tensor> {
///     layers: Vec<Layer<T>>,
///     head: T,
/// }
///
/// let zeros = |n: usize| HostTensor::zeros(TensorSpec::new([n], F32));
/// let p = Params { layers: vec![Layer { w: zeros(4), b: zeros(4) }], head: zeros(2) };
/// assert_eq!(p.leaf_paths(), ["layers.0.w", "layers.0.b", "head"]);
/// let specs = tree::specs(&p);
/// assert_eq!(specs.head.to_string(), "f32[2]");
/// ```
pub mod tree {
    pub use crate::ir::tree::{
        assemble_all, Leaf, PathSegment, StaticValue, Tree, TreeDef, TreePath, TreeValue,
    };
    pub use crate::kernel::trees::{specs, to_device, to_host, ArgLeaf};
    pub use crate::kernel::{
        load_tree as load, save_tree as save, save_tree_with_metadata as save_with_metadata,
    };
}

/// Everything a kernel file usually needs: `use tessel::prelude::*;` — the
/// kernel attributes, `Tensor` and the control-flow ops, dtypes, devices,
/// and for models `#[derive(Tree)]`, the [`tree`] functions,
/// `value_and_grad` and `vmap`.
pub mod prelude {
    pub use crate::autodiff::{grad, value_and_grad, vjp};
    pub use crate::config::{KernelConfig, Platform};
    pub use crate::ir::tree::{Tree, TreeValue};
    pub use crate::kernel::{DeviceCache, StaticArg, StaticKey};
    pub use crate::lang::ds;
    pub use crate::ops::random::{random_bits, uniform};
    pub use crate::runtime::{Device, DeviceBuffer, Executable};
    pub use crate::tile::{blocks, blocks_of, grid, BlockSparse, HostBlockSparse, Mask};
    pub use crate::tree;
    pub use crate::vmap::{vmap, vmap_with};
    pub use crate::{
        axis_index, check, concat, cond, fori_loop, optimization_barrier, scan, scan_with,
        while_loop, DType, Error, HostTensor, Precision, Result, ScanOptions, TakeMode, Tensor,
        TensorSpec, BF16, F16, F32, F64, F8E4M3FN, F8E5M2, PRED, S16, S32, S64, S8, U16, U32, U64,
        U8,
    };
    pub use tessel_macros::Tree;
    pub use tessel_macros::{cpu_kernel, expert_kernel, gpu_kernel, sparse_kernel, tpu_kernel};
}
