//! [`Carry`]: the values a traced loop carries, a branch returns, or a
//! gradient takes (defined with the trace, re-exported here beside the
//! control-flow ops that take it).

pub use crate::trace::carry::{flat, Carry};
