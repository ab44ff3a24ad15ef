//! What the kernel macros' expansions name, and nothing else: the one
//! contract between `tessel-macros` and this crate. Not a public API; its
//! contents change with the macros.

pub use crate::autodiff::value_and_grad;
pub use crate::config::{CheckFamilies, KernelConfig, Platform};
pub use crate::dtype::DType;
pub use crate::error::HostError;
pub use crate::error::{DeviceError, Error, Result};
pub use crate::host::HostTensor;
pub use crate::host::{ffi_function, FfiCall};
pub use crate::ir::tree::{Leaf, PathSegment, Tree, TreeDef, TreePath, TreeValue};
pub use crate::kernel::autotune::{
    call_buffers as autotune_call, run_host as autotune_run_host, tune_arg as autotune_arg,
    TuneRequest, Uploads as AutotuneUploads,
};
pub use crate::kernel::kernel_grad::{kernel_value_and_grad, ParamList};
pub use crate::kernel::moe::{dense_dispatch_layer, grouped_layer, MoeOptions};
pub use crate::kernel::trees::{
    bind_tree as tree_bind, collect_tree as tree_collect, static_field as tree_static_field,
    static_field_key as tree_static_key, static_from_def as tree_static_from_def, tree_primals,
    tree_substitute,
};
pub use crate::kernel::{single_output, ArgCollector, Kernel, KernelOutput, KernelParam};
pub use crate::lang::{
    and, or, static_condition, AssignPlain, Cmp, ComparePlain, Condition, ForSource, IndexPlain,
    LoopCondition, RangeLoop, RustFor, RustForEarly, Target, TracedFor, TracedForEarly,
};
pub use crate::ops::ffi::{
    ffi_arg, ffi_attr_of, ffi_call_with, register as ffi_register, FfiAttrValue, FfiResults,
};
pub use crate::ops::Carry;
pub use crate::ops::Precision;
pub use crate::profile::{Profile, ProfileOptions};
pub use crate::runtime::{Device, DeviceBuffer, Executable};
pub use crate::shape::TensorSpec;
pub use crate::shard::ShardedBuffer;
pub use crate::shard::{Mesh, PartitionSpec, Shardings};
pub use crate::trace::tensor::{trace_error, Tensor};
pub use crate::trace::Outputs;
pub use crate::vmap::vmap;
