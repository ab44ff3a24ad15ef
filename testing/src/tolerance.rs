//! Tolerances per dtype and closeness assertions (see the crate docs).

use tessel_dsl::{DType, HostTensor};

/// How many roundings stand between an op's exact result and what it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Bit-exact: data movement, integer ops, comparisons.
    Exact,
    /// One rounding (arithmetic, casts).
    Simple,
    /// Library-approximated functions (exp, log, tanh, erf, pow, ...).
    Transcendental,
}

/// An absolute plus relative tolerance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// Relative part.
    pub rtol: f64,
    /// Absolute part.
    pub atol: f64,
}

/// The tolerance of the table in the module docs.
pub fn tol(dtype: DType, class: Class) -> Tol {
    let (rtol, atol) = match (dtype, class) {
        (_, Class::Exact) => (0.0, 0.0),
        (d, _) if !d.is_float() => (0.0, 0.0),
        (DType::F64, _) => (1e-12, 1e-12),
        (DType::F32, Class::Simple) => (1e-6, 1e-6),
        (DType::F32, _) => (1e-5, 1e-5),
        (DType::F16, Class::Simple) => (1e-3, 1e-3),
        (DType::F16, _) => (2e-3, 2e-3),
        (DType::BF16, Class::Simple) => (1e-2, 1e-2),
        (DType::BF16, _) => (2e-2, 2e-2),
        (DType::F8E4M3FN, Class::Simple) => (7e-2, 2e-2),
        (DType::F8E4M3FN, _) => (1.3e-1, 4e-2),
        (DType::F8E5M2, Class::Simple) => (1.3e-1, 4e-2),
        (_, _) => (2.5e-1, 8e-2),
    };
    Tol { rtol, atol }
}

/// The tolerance of a result accumulated from `terms` terms of magnitude up
/// to `scale` (sums, means, dots): the simple tolerance, with its absolute
/// part scaled by `terms * scale`.
pub fn accumulate_tol(dtype: DType, terms: usize, scale: f64) -> Tol {
    let t = tol(dtype, Class::Simple);
    let n = terms.max(1) as f64;
    Tol {
        rtol: t.rtol * 4.0,
        atol: t.atol * n * scale.max(1.0),
    }
}

/// Whether `got` is within `t` of `want`.
pub fn close(got: f64, want: f64, t: Tol) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= t.atol + t.rtol * want.abs()
}

/// Asserts that `got` holds `want` (same element count) within `t`.
#[track_caller]
pub fn assert_close_tol(got: &HostTensor, want: &[f64], t: Tol, what: &str) {
    let g = got.to_f64_vec();
    assert_eq!(
        g.len(),
        want.len(),
        "{what}: {} elements, expected {}",
        g.len(),
        want.len()
    );
    let bad: Vec<String> = g
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (&a, &b))| !close(a, b, t))
        .take(5)
        .map(|(i, (a, b))| format!("[{i}] got {a:e}, want {b:e}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what} ({}, tol {t:?}): {}",
        got.spec(),
        bad.join("; ")
    );
}

/// Asserts `got` holds `want` within the table's tolerance of `class` for its dtype.
#[track_caller]
pub fn assert_close(got: &HostTensor, want: &[f64], class: Class, what: &str) {
    assert_close_tol(got, want, tol(got.dtype(), class), what)
}

/// Asserts `got` has `dtype` and `shape` and holds `want` within `class`.
#[track_caller]
pub fn check(
    got: &HostTensor,
    dtype: DType,
    shape: &[usize],
    want: &[f64],
    class: Class,
    what: &str,
) {
    assert_eq!(got.dtype(), dtype, "{what}: dtype");
    assert_eq!(got.shape(), shape, "{what}: shape");
    assert_close(got, want, class, what);
}

/// The tolerance of a library kernel's result computed in f32 (or f64) and
/// rounded once to `dtype`, against an f64 reference on the same (rounded)
/// inputs:
///
/// | dtype | rtol | atol | why |
/// |---|---|---|---|
/// | f64 | 1e-12 | 1e-12 | f64 arithmetic |
/// | f32 | 1e-5 | 1e-5 | f32 arithmetic over rows of a few hundred elements |
/// | bf16 | 4.2e-3 | 1e-5 | one rounding to 8 significant bits: 2⁻⁸ = 3.9e-3 |
/// | f16 | 1e-3 | 1e-4 | one rounding to 11 bits: 2⁻¹¹ = 4.9e-4, plus f32 error |
/// | f8e4m3fn | 6.5e-2 | 2e-3 | 4 bits: 2⁻⁴ = 6.25e-2; subnormal step 2⁻⁹ |
/// | f8e5m2 | 1.3e-1 | 1e-4 | 3 bits: 2⁻³ = 0.125; subnormal step 2⁻¹⁶ |
pub fn kernel_tol(dtype: DType) -> Tol {
    let (rtol, atol) = match dtype {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 => (1e-5, 1e-5),
        DType::BF16 => (4.2e-3, 1e-5),
        DType::F16 => (1e-3, 1e-4),
        DType::F8E4M3FN => (6.5e-2, 2e-3),
        DType::F8E5M2 => (1.3e-1, 1e-4),
        _ => (0.0, 0.0),
    };
    Tol { rtol, atol }
}

/// A tolerance of `t` both relative and absolute.
pub fn both(t: f64) -> Tol {
    Tol { rtol: t, atol: t }
}

/// Asserts f32 values `got` match `want` within `tol · (1 + |want|)` elementwise.
#[track_caller]
pub fn close_f32(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            close(f64::from(g), w, both(tol)),
            "element {i}: got {g}, want {w}"
        );
    }
}
