//! The kernel library tests' helpers, from the shared `tessel-testing` crate:
//! the device, deterministic data, host tensors of any dtype, and comparison
//! against f64 references with per-dtype tolerances
//! ([`kernel_tol`](tessel_testing::kernel_tol) lists them).

#![allow(dead_code, unused_imports)]

use tessel_dsl::prelude::*;
pub use tessel_testing::{
    assert_close_tol as assert_close, both, dev, kernel_error, kernel_tol as tol, lcg_data as data,
    Tol,
};

/// A host tensor of `dtype` and `shape` holding `values` rounded to `dtype`.
pub fn host(dtype: DType, shape: &[usize], values: &[f64]) -> HostTensor {
    tessel_testing::tensor(values, shape, dtype)
}

/// A host tensor of random values in `[lo, hi)`, and those values as the
/// kernel sees them (rounded to `dtype`, as f64) for the reference.
pub fn random(
    dtype: DType,
    shape: &[usize],
    seed: u64,
    lo: f64,
    hi: f64,
) -> (HostTensor, Vec<f64>) {
    let n = shape.iter().product();
    let t = host(dtype, shape, &data(n, seed, lo, hi));
    let v = t.to_f64_vec();
    (t, v)
}

/// A host tensor of `dtype` with random values in `[-scale, scale)`.
pub fn uniform(shape: &[usize], dtype: DType, seed: u64, scale: f64) -> HostTensor {
    random(dtype, shape, seed, -scale, scale).0
}

/// Asserts `got` matches `want` within `tol · (1 + |want|)` elementwise.
#[track_caller]
pub fn close(got: &HostTensor, want: &[f64], tol: f64) {
    assert_close(got, want, both(tol), "result");
}
