//! tessel-pjrt: the PJRT runtime, the only tessel crate with `unsafe` code.
//!
//! [`runtime`] loads a PJRT plugin (the XLA CPU plugin, found, fetched and
//! verified by SHA-256; the CUDA plugin; libtpu), makes clients and
//! devices, moves buffers, compiles and runs programs, keeps compiled
//! executables on disk, runs graphs on the interpreter device, and serves
//! several processes through a coordinator. It knows programs, never
//! kernels; `tessel-dsl` re-exports it at `tessel::runtime`.
//!
//! Every `unsafe` block carries its own written safety argument (workspace
//! lints); the crate's other dependencies are tessel-ir's data and
//! tessel-lower's lowering and interpreter.

// tessel-ir's and tessel-lower's modules under the names the runtime uses.
use tessel_ir::error::{Error, Result};
use tessel_ir::{config, dtype, error, host, ir, shape};
use tessel_lower::{interp, lower};

pub mod runtime;
