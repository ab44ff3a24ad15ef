//! Host tensors, from tessel-ir (`HostTensor`, `.npy` files), and
//! safetensors [`checkpoint`]s, which this crate keeps beside the trees they
//! save.

pub mod checkpoint;

pub use tessel_ir::host::*;
