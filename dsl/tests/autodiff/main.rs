//! Reverse-mode autodiff: every op's gradient rule against central finite
//! differences in f64 (tolerances in `fd.rs`), loops and branches with
//! data-dependent trip counts and predicates, custom gradients,
//! checkpointing, forward mode, and the errors of what has no gradient.

// Test inputs read best as `&[x.clone()]` next to `&[x.clone(), y]`.
#![allow(clippy::cloned_ref_to_slice_refs)]

mod control;
mod custom;
mod elementwise;
mod errors;
mod fd;
mod indexing;
mod linalg;
mod shape;
