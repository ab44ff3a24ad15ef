//! tessel's kernel library, written with tessel's own macros.
//!
//! The macros expand to paths under `::tessel`; inside this crate that name
//! is the DSL crate itself, so the kernels here are written exactly as a
//! user writes theirs.
#![forbid(unsafe_code)]

extern crate tessel_dsl as tessel;

pub mod activation;
pub mod attention;
pub mod einsum;
pub mod fp8;
pub mod gemm;
pub mod grads;
pub mod mixed;
pub mod moe;
pub mod moe_parallel;
pub mod norm;
pub mod optim;
pub mod prelude;
pub mod quantized;
pub mod rope;
pub mod serving;
pub mod softmax;
pub mod sparse;
pub mod train;
