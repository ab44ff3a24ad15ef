//! tessel: write TPU kernels in Rust.
pub use tessel_dsl::*;
