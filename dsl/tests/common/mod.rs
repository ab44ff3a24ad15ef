//! Shared harness of the op-level tests: a deterministic PRNG, random host
//! tensors per dtype, reference-side broadcasting and indexing helpers,
//! tolerance-aware comparisons and a runner that builds a [`Kernel`] from a
//! closure and runs it on the XLA CPU device.
//!
//! # Tolerances
//!
//! Every float comparison is `|got - want| <= atol + rtol * |want|`, with the
//! reference computed in `f64` from the inputs *as rounded to their dtype*
//! (so input rounding never counts against an op). NaN matches NaN and an
//! infinity matches the same infinity.
//!
//! | dtype      | [`Class::Simple`] (one rounding: + - * / casts, moves) | [`Class::Transcendental`] (exp, log, tanh, erf, pow, ...) |
//! |------------|---------------------------------------------------------|-----------------------------------------------------------|
//! | f64        | rtol 1e-12, atol 1e-12                                  | rtol 1e-12, atol 1e-12                                    |
//! | f32        | rtol 1e-6, atol 1e-6                                    | rtol 1e-5, atol 1e-5                                      |
//! | f16        | rtol 1e-3, atol 1e-3                                    | rtol 2e-3, atol 2e-3                                      |
//! | bf16       | rtol 1e-2, atol 1e-2                                    | rtol 2e-2, atol 2e-2                                      |
//! | f8e4m3fn   | rtol 7e-2, atol 2e-2                                    | rtol 1.3e-1, atol 4e-2                                    |
//! | f8e5m2     | rtol 1.3e-1, atol 4e-2                                  | rtol 2.5e-1, atol 8e-2                                    |
//! | ints, pred | exact                                                   | exact                                                     |
//!
//! Results that accumulate many terms (reductions, dots) use
//! [`accumulate_tol`]: the table's simple tolerance scaled by the number of
//! terms and the magnitude of the terms, since the absolute error of a sum
//! grows with `n * eps * max|term|` rather than with the result.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::trace::Outputs;
use tessel_dsl::{DType, Error, HostTensor, KernelError, Result, Tensor, TensorSpec};

// ---------------------------------------------------------------------------
// PRNG

/// SplitMix64: tiny, deterministic, good enough for test data.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

// ---------------------------------------------------------------------------
// Host tensors

/// A spec from a slice shape.
pub fn spec(shape: &[usize], dtype: DType) -> TensorSpec {
    TensorSpec::new(shape.to_vec(), dtype)
}

/// Random values of `dtype`: floats uniform in `[lo, hi)` (then rounded to
/// the dtype), integers uniform in `lo..=hi` (clipped to the dtype's range),
/// pred fair coin flips.
pub fn random(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> HostTensor {
    HostTensor::from_fn(spec(shape, dtype), |_| {
        if dtype.is_pred() {
            (rng.next_u64() & 1) as f64
        } else if dtype.is_float() {
            rng.uniform(lo, hi)
        } else {
            let (dlo, dhi) = int_range(dtype);
            rng.int(lo.max(dlo) as i64, hi.min(dhi) as i64) as f64
        }
    })
}

/// The smallest and largest value of an integer dtype.
pub fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::S8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::S32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::S64 => (-(2f64.powi(53)), 2f64.powi(53)),
        _ => (f64::MIN, f64::MAX),
    }
}

/// A tensor of `dtype` holding `values` (rounded to the dtype).
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType) -> HostTensor {
    assert_eq!(values.len(), shape.iter().product::<usize>());
    HostTensor::from_fn(spec(shape, dtype), |i| values[i])
}

/// A rank-0 s32 tensor (for traced indices and bounds).
pub fn s32(v: i32) -> HostTensor {
    HostTensor::scalar(v)
}

/// `values` as they read back after rounding to `dtype`.
pub fn rounded(values: &[f64], dtype: DType) -> Vec<f64> {
    values
        .iter()
        .map(|&v| dtype.decode_f64(&dtype.encode_f64(v)))
        .collect()
}

// ---------------------------------------------------------------------------
// Reference-side shape helpers

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// The flat index of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

/// The numpy broadcast of two shapes (panics if they do not broadcast).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() < r {
                1
            } else {
                a[i + a.len() - r]
            };
            let db = if i + b.len() < r {
                1
            } else {
                b[i + b.len() - r]
            };
            match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => panic!("{a:?} and {b:?} do not broadcast"),
            }
        })
        .collect()
}

/// `data` of `shape` broadcast (numpy rules) to `target`.
pub fn broadcast(data: &[f64], shape: &[usize], target: &[usize]) -> Vec<f64> {
    let off = target.len() - shape.len();
    let n: usize = target.iter().product();
    (0..n)
        .map(|i| {
            let t = unravel(i, target);
            let src: Vec<usize> = (0..shape.len())
                .map(|a| if shape[a] == 1 { 0 } else { t[off + a] })
                .collect();
            data[ravel(&src, shape)]
        })
        .collect()
}

/// `f` applied elementwise to `a` and `b` after broadcasting them together;
/// returns the result and its shape.
pub fn zip_broadcast(
    a: &HostTensor,
    b: &HostTensor,
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let shape = broadcast_shape(a.shape(), b.shape());
    let x = broadcast(&a.to_f64_vec(), a.shape(), &shape);
    let y = broadcast(&b.to_f64_vec(), b.shape(), &shape);
    (x.iter().zip(&y).map(|(&p, &q)| f(p, q)).collect(), shape)
}

// ---------------------------------------------------------------------------
// Tolerances and comparisons

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

// ---------------------------------------------------------------------------
// Sweeps and integer helpers shared by the elementwise tests

/// The full shape sweep: rank 0, size 1, odd and non-block-multiple extents.
/// f32 and s32 run it; other dtypes run [`SHORT_SHAPES`] to keep the number
/// of compiled ops down (XLA:CPU compiles each op separately, ~10 ms apiece).
pub const SHAPES: &[&[usize]] = &[&[], &[1], &[7], &[3, 5], &[2, 1, 33], &[129]];
/// The shorter sweep of the other dtypes.
pub const SHORT_SHAPES: &[&[usize]] = &[&[], &[2, 1, 33], &[129]];

/// The shape sweep `dtype` runs.
pub fn shapes_for(dtype: DType) -> &'static [&'static [usize]] {
    if dtype == DType::F32 || dtype == DType::S32 {
        SHAPES
    } else {
        SHORT_SHAPES
    }
}

/// The float dtypes of the elementwise sweeps.
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::BF16, DType::F16];
/// The integer dtypes of the elementwise sweeps.
pub const INTS: [DType; 4] = [DType::S32, DType::U32, DType::S8, DType::U8];

/// An integer result wrapped into `dtype`'s range (two's complement).
pub fn wrap(v: i128, dtype: DType) -> f64 {
    match dtype {
        DType::S8 => v as i8 as f64,
        DType::U8 => v as u8 as f64,
        DType::S32 => v as i32 as f64,
        DType::U32 => v as u32 as f64,
        _ => v as i64 as f64,
    }
}

/// The width of an integer dtype in bits.
pub fn bits(dtype: DType) -> u32 {
    (dtype.size_in_bytes() * 8) as u32
}

/// The two's complement bit pattern of an integer value, zero-extended.
pub fn to_bits(v: f64, dtype: DType) -> u64 {
    (v as i64 as u64) & (u64::MAX >> (64 - bits(dtype)))
}

/// A bit pattern read back as a value of `dtype`.
pub fn from_bits(b: u64, dtype: DType) -> f64 {
    wrap(b as i128, dtype)
}

/// Random floats with `|x|` in `[0.5, 4)` and a random sign (safe divisors).
pub fn away_from_zero(rng: &mut Rng, shape: &[usize], dtype: DType) -> HostTensor {
    HostTensor::from_fn(spec(shape, dtype), |_| {
        let m = rng.uniform(0.5, 4.0);
        if rng.next_u64() & 1 == 0 {
            m
        } else {
            -m
        }
    })
}

// ---------------------------------------------------------------------------
// Running kernels

/// The process-wide XLA CPU device (all tests share it and its compile cache).
pub fn device() -> Device {
    Device::cpu().expect("the XLA CPU plugin should be available")
}

/// A kernel name no other kernel of this test binary uses (the compile cache
/// is keyed by kernel name and argument specs).
pub fn fresh_name(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Traces, compiles and runs `body` on `args`.
#[track_caller]
pub fn try_run<O: Outputs>(
    body: impl Fn(&[Tensor]) -> O,
    args: &[&HostTensor],
) -> Result<Vec<HostTensor>> {
    Kernel::new(fresh_name("k"), body).run(&device(), args)
}

/// Runs `body` on `args` and returns all its results (panics on any error).
#[track_caller]
pub fn run<O: Outputs>(body: impl Fn(&[Tensor]) -> O, args: &[&HostTensor]) -> Vec<HostTensor> {
    match try_run(body, args) {
        Ok(v) => v,
        Err(e) => panic!("kernel failed: {e}"),
    }
}

/// Runs a one-result `body` on `args`.
#[track_caller]
pub fn run1(body: impl Fn(&[Tensor]) -> Tensor, args: &[&HostTensor]) -> HostTensor {
    run(body, args).remove(0)
}

/// Traces `body` for arguments of `specs` and returns its kernel error
/// (panics if tracing succeeds or fails otherwise).
#[track_caller]
pub fn trace_error<O: Outputs>(body: impl Fn(&[Tensor]) -> O, specs: &[TensorSpec]) -> KernelError {
    match Kernel::new(fresh_name("bad"), body).trace(specs) {
        Ok(_) => panic!("tracing should have failed"),
        Err(Error::Kernel(k)) => *k,
        Err(e) => panic!("expected a kernel error, got {e}"),
    }
}

/// The StableHLO text of `body` for arguments of `specs`.
#[track_caller]
pub fn lower<O: Outputs>(body: impl Fn(&[Tensor]) -> O, specs: &[TensorSpec]) -> String {
    match Kernel::new(fresh_name("l"), body).lower(specs) {
        Ok(t) => t,
        Err(e) => panic!("lowering failed: {e}"),
    }
}
