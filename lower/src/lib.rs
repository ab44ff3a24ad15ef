//! tessel-lower: what a traced graph becomes without a device.
//!
//! - [`lower`]: the graph as StableHLO text for a PJRT plugin (each op
//!   located at the user's source line), and the compile hints and the
//!   graph rewrites the CPU plugin is given;
//! - [`interp`]: an interpreter of the graph on host tensors with the XLA CPU
//!   plugin's semantics, and its checks (NaNs made from finite operands,
//!   indices XLA would clamp).
//!
//! Both read only the data of tessel-ir; `tessel-dsl` re-exports them at
//! `tessel::lower` and `tessel::interp`.
#![forbid(unsafe_code)]

// tessel-ir's modules under the names the two modules use for them.
use tessel_ir::{dtype, error, host, ir, shape};

pub mod interp;
pub mod lower;
