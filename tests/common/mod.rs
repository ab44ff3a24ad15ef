//! Helpers of the workspace-level tests, from the shared `tessel-testing`
//! crate: the device, a plain-Rust matmul reference and closeness against
//! f64 references.

#![allow(dead_code, unused_imports)]

use tessel::prelude::*;
pub use tessel_testing::{dev, matmul_ref};

/// Asserts `got` matches `want` within `tol · (1 + |want|)` elementwise.
#[track_caller]
pub fn assert_close(got: &HostTensor, want: &[f64], tol: f64) {
    tessel_testing::assert_close_tol(got, want, tessel_testing::both(tol), "result");
}
