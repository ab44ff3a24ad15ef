//! # tessel: write TPU kernels in Rust
//!
//! A kernel is an ordinary Rust function over [`Tensor`] handles, marked with
//! [`tpu_kernel`], [`gpu_kernel`] or [`cpu_kernel`]. The macro keeps the
//! function (it stays callable, and is inlined, inside other kernels) and
//! generates a companion of the same name: `run` (host tensors in
//! and out), `call` (device buffers), `lower` (the StableHLO text),
//! `compile` and `CONFIG`. Running traces the body once per argument
//! shapes, dtypes and static arguments, lowers it to StableHLO, compiles it
//! with a PJRT plugin (the XLA CPU plugin by default, CUDA or libtpu
//! elsewhere) and caches the executable.
//!
//! ```no_run
//! use tessel::prelude::*;
//!
//! #[tpu_kernel(precision = "highest")]
//! fn scaled_softmax(x: Tensor, scale: f32) -> Tensor {
//!     (x * scale).softmax(-1)
//! }
//!
//! fn main() -> tessel::Result<()> {
//!     let dev = Device::cpu()?;
//!     let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
//!     let y = scaled_softmax::run(&dev, &x, 0.5)?;
//!     println!("{:?}", y.to_vec::<f32>()?);
//!     println!("{}", scaled_softmax::lower(x.spec(), 0.5)?);
//!     Ok(())
//! }
//! ```
//!
//! The layers are separate crates, re-exported here: `tessel-dsl` (tensors,
//! ops, tracing, lowering, the PJRT runtime), `tessel-macros` (the
//! attributes) and `tessel-kernels` (the kernel library).
#![forbid(unsafe_code)]

// The macros expand to `::tessel::..` paths, which inside this crate name the crate itself.
extern crate self as tessel;

pub mod guide;

/// The README's Rust blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use tessel_dsl::*;
pub use tessel_macros::{cpu_kernel, expert_kernel, gpu_kernel, sparse_kernel, tpu_kernel};

/// The kernel library, written with tessel's own macros.
pub use tessel_kernels as kernels;

/// The `half` crate tessel's f16/bf16 host data uses (`half::bf16`,
/// `half::f16`), re-exported so a program needs no second, version-matched
/// dependency.
pub use tessel_dsl::half;

/// The `float8` crate tessel's fp8 host data uses (`float8::F8E4M3`,
/// `float8::F8E5M2`), re-exported likewise.
pub use tessel_dsl::float8;

/// The `ndarray` crate the `ndarray` feature converts to and from.
#[cfg(feature = "ndarray")]
pub use tessel_dsl::ndarray;
