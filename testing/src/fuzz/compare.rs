//! How the interpreter's results are compared with the plugin's: one
//! tolerance per dtype, written down here and nowhere else (the
//! interpreter's own tests use it too).
//!
//! An element agrees when both are NaN, or both are the same infinity, or
//! they are equal integers (and pred), or, for floats,
//! `|got - want| <= ulps * terms * ulp(dtype, max(|got|, |want|)) + floor`
//! with `(ulps, floor)` from this table:
//!
//! | dtype              | ulps | floor | why |
//! |--------------------|------|-------|-----|
//! | f64, f32           | 4    | 0     | XLA's transcendental functions are its own approximations |
//! | f16, bf16, f8 types | 1   | 0     | an f32 result rounded to the narrow type may land on the other side of a midpoint |
//!
//! The generator counts a transcendental function of f16, bf16 or f8 as 2
//! terms: the plugin computes some in the narrow type (`expm1` of f16
//! 0.1875 gives 0.2064, 2 ulps from the rounded 0.2062; pinned in
//! `dsl/tests/interp_regressions.rs`).
//! | integers, pred     | exact | —    | |
//!
//! `terms` is 0 for a bit-exact result (moves, integer ops, exactly
//! rounded arithmetic: a difference of one ulp is a mismatch), 1 for one
//! inexact op, and the number of accumulated terms for sums and dots
//! (of magnitudes, so that no cancellation makes the error relative to a
//! small result). No floor is needed so far (0 for every dtype): ulps
//! reach down to the subnormals, so a subnormal flushed on one side only
//! is caught.

use tessel_dsl::{DType, HostTensor};

/// `(ulps, floor)` of `dtype` (see the table in the module docs).
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 | DType::F32 => (4.0, 0.0),
        DType::F16 | DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => (1.0, 0.0),
        _ => (0.0, 0.0),
    }
}

/// The distance between `x` and the next value of `dtype` away from zero
/// (0 for integers and pred).
pub fn ulp(dtype: DType, x: f64) -> f64 {
    let (mantissa, min_exp) = match dtype {
        DType::F64 => (52, -1022),
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F8E4M3FN => (3, -6),
        DType::F8E5M2 => (2, -14),
        _ => return 0.0,
    };
    let e = if x == 0.0 {
        min_exp
    } else {
        (x.abs().log2().floor() as i32).max(min_exp)
    };
    2f64.powi(e - mantissa)
}

/// Whether one element of `dtype` agrees (see the module docs).
pub fn agrees(dtype: DType, got: f64, want: f64, terms: usize) -> bool {
    if got.is_nan() || want.is_nan() {
        got.is_nan() && want.is_nan()
    } else if got.is_infinite() || want.is_infinite() || !dtype.is_float() {
        got == want
    } else {
        let (ulps, floor) = tolerance(dtype);
        let scale = ulp(dtype, want.abs().max(got.abs()));
        // Bit-exact results must also agree on the sign of zero.
        let same_zero =
            terms > 0 || got != 0.0 || got.is_sign_negative() == want.is_sign_negative();
        same_zero && (got - want).abs() <= ulps * terms as f64 * scale + floor
    }
}

/// What differs between the interpreter's `got` and the plugin's `want`
/// (a result of up to `terms` terms), or `None` when they agree.
pub fn mismatch(got: &HostTensor, want: &HostTensor, terms: usize) -> Option<String> {
    if got.spec() != want.spec() {
        return Some(format!("interp {}, xla {}", got.spec(), want.spec()));
    }
    let d = want.dtype();
    let g = got.to_f64_vec();
    let w = want.to_f64_vec();
    let bad: Vec<String> = g
        .iter()
        .zip(&w)
        .enumerate()
        .filter(|&(_, (&a, &b))| !agrees(d, a, b, terms))
        .take(6)
        .map(|(i, (a, b))| format!("[{i}] interp {a:e}, xla {b:e}"))
        .collect();
    (!bad.is_empty()).then(|| format!("{} ({terms} terms): {}", want.spec(), bad.join("; ")))
}

/// Asserts the interpreter's `got` matches the plugin's `want`.
#[track_caller]
pub fn assert_same(got: &HostTensor, want: &HostTensor, terms: usize, what: &str) {
    if let Some(m) = mismatch(got, want, terms) {
        panic!("{what}: {m}");
    }
}
