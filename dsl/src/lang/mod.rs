//! What the kernel macros rewrite a kernel body into.
//!
//! A kernel body is ordinary Rust; where Rust's syntax cannot be overloaded
//! for tensors (`<`, `==`, `&&`, `if`, `while`, `for`, `x[i] = v`), the
//! macros call the functions and drivers here, and the *types* of the
//! operands decide what happens: Rust values behave as in Rust, tensors are
//! traced. Nothing here is needed when writing kernels by hand with
//! closures ([`ops::while_loop`](crate::ops::while_loop),
//! [`ops::cond`](crate::ops::cond)).

pub mod compare;
pub mod control;
pub mod for_loop;
pub mod index;

pub use compare::{and, eq, ge, gt, le, lt, ne, or, Cmp, Compare, ComparePlain, Logic};
pub use control::{
    static_condition, Condition, LoopBound, LoopCondition, RangeLoop, SaveRefs, StaticBranch,
    StaticCondition, StaticWhile, TracedBranch, TracedWhile,
};
pub use for_loop::{
    ForSource, LeavesEarly, LoopSource, RustFor, RustForEarly, RustForLoop, TracedFor,
    TracedForEarly, TracedForLoop, TracedLoop,
};
pub use index::{
    ds, AssignPlain, AxisIndex, DynSlice, IndexItem, IndexPlain, Indexed, Target, TensorIndex,
};
