//! The op set, grouped by family. Each family adds methods to [`Tensor`]
//! (or free functions); the [`Op`] records they append to the graph are
//! plain data in [`crate::ir`].
//!
//! [`Tensor`]: crate::Tensor

pub mod carry;
pub mod check;
pub mod collective;
pub mod constant;
pub mod control;
pub mod elementwise;
pub mod ffi;
pub mod indexing;
pub mod linalg;
pub mod random;
pub mod reduce;
pub mod scan;
pub mod shape;
pub mod sort;

pub use crate::config::Precision;
pub use crate::ir::{
    BinaryOp, Comparison, DotDims, GatherDims, Op, ReduceKind, ScatterCombine, ScatterDims, UnaryOp,
};
pub use carry::Carry;
pub use collective::axis_index;
pub use control::{
    cond, fori_loop, optimization_barrier, while_loop, CondBuilder, WhileBuilder, MAX_COND_DEPTH,
};
pub use elementwise::Scalar;
pub use indexing::TakeMode;
pub use reduce::split_row_reduce;
pub use scan::{scan, scan_with, ScanOptions};
