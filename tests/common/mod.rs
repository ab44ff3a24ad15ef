//! Helpers shared by the workspace-level tests: the device, a plain-Rust
//! matmul reference and closeness against f64 references.

#![allow(dead_code)]

use tessel::prelude::*;

/// The CPU device (the plugin is fetched once per machine).
pub fn dev() -> Device {
    Device::cpu().expect("the CPU plugin loads")
}

/// `a · b` for `[M, K] x [K, N]`, in f64 on the stored values.
pub fn matmul_ref(a: &HostTensor, b: &HostTensor) -> Vec<f64> {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    (0..m * n)
        .map(|idx| {
            (0..k)
                .map(|p| av[idx / n * k + p] * bv[p * n + idx % n])
                .sum()
        })
        .collect()
}

/// Asserts `got` matches `want` within `tol · (1 + |want|)` elementwise.
#[track_caller]
pub fn assert_close(got: &HostTensor, want: &[f64], tol: f64) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (x, y)) in g.iter().zip(want).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}
