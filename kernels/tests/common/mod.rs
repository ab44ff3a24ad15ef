//! Helpers shared by the kernel library's tests: the device, deterministic
//! data, host tensors of any dtype, and comparison against f64 references
//! with per-dtype tolerances.

#![allow(dead_code)]

use tessel_dsl::prelude::*;

/// The CPU device (the plugin is fetched once per machine).
pub fn dev() -> Device {
    Device::cpu().expect("the CPU plugin loads")
}

/// `n` deterministic pseudo-random values in `[lo, hi)` (a 64-bit LCG keyed
/// by `seed`; no dependency on a random crate).
pub fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// A host tensor of `dtype` and `shape` holding `values` rounded to `dtype`.
pub fn host(dtype: DType, shape: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), dtype), |i| values[i])
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
    let t = Tol {
        atol: tol,
        rtol: tol,
    };
    assert_close(got, want, t, "result");
}

/// An elementwise tolerance: `|got - want| <= atol + rtol · |want|`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    /// Absolute part (covers results near zero and subnormals).
    pub atol: f64,
    /// Relative part.
    pub rtol: f64,
}

/// The tolerance of a result computed in f32 (or f64) and rounded once to
/// `dtype`, against an f64 reference on the same (rounded) inputs:
///
/// | dtype | rtol | atol | why |
/// |---|---|---|---|
/// | f64 | 1e-12 | 1e-12 | f64 arithmetic |
/// | f32 | 1e-5 | 1e-5 | f32 arithmetic over rows of a few hundred elements |
/// | bf16 | 4.2e-3 | 1e-5 | one rounding to 8 significant bits: 2⁻⁸ = 3.9e-3 |
/// | f16 | 1e-3 | 1e-4 | one rounding to 11 bits: 2⁻¹¹ = 4.9e-4, plus f32 error |
/// | f8e4m3fn | 6.5e-2 | 2e-3 | 4 bits: 2⁻⁴ = 6.25e-2; subnormal step 2⁻⁹ |
/// | f8e5m2 | 1.3e-1 | 1e-4 | 3 bits: 2⁻³ = 0.125; subnormal step 2⁻¹⁶ |
pub fn tol(dtype: DType) -> Tol {
    let (rtol, atol) = match dtype {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 => (1e-5, 1e-5),
        DType::BF16 => (4.2e-3, 1e-5),
        DType::F16 => (1e-3, 1e-4),
        DType::F8E4M3FN => (6.5e-2, 2e-3),
        DType::F8E5M2 => (1.3e-1, 1e-4),
        _ => (0.0, 0.0),
    };
    Tol { atol, rtol }
}

/// Asserts `got` (any dtype) matches `want` elementwise within `tol`.
#[track_caller]
pub fn assert_close(got: &HostTensor, want: &[f64], tol: Tol, what: &str) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in g.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol.atol + tol.rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w} ({tol:?})");
    }
}

/// The kernel error inside `r`, failing the test if `r` is not one.
#[track_caller]
pub fn kernel_error<T: std::fmt::Debug>(r: Result<T>) -> tessel_dsl::KernelError {
    match r {
        Err(Error::Kernel(k)) => *k,
        other => panic!("expected Error::Kernel, got {other:?}"),
    }
}
