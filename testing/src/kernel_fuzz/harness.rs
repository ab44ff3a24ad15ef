//! Running a generated kernel on two devices and comparing the results.

use tessel_dsl::runtime::{Device, InterpreterOptions, OnFinding};
use tessel_dsl::{DType, HostTensor, Result, TensorSpec};

use crate::Rng;

/// A tensor argument of a generated kernel: its shape and the values the
/// harness fills it with.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// f32 multiples of 1/8 in `[-4, 4]`.
    F32(&'static [usize]),
    /// s32 in `lo..=hi`.
    S32(&'static [usize], i32, i32),
    /// pred, fair coin flips.
    Pred(&'static [usize]),
}

/// A generated kernel, as the harness runs it.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The kernel's name.
    pub name: &'static str,
    /// Its tensor arguments, in order (static arguments are fixed in `run`).
    pub args: &'static [Arg],
    /// Per result, the number of terms its inexact ops accumulate: 0 for a
    /// result both devices must compute exactly, 1 for a transcendental
    /// function, `n` for a mean of `n` terms.
    pub outputs: &'static [usize],
    /// Runs the kernel's companion (`kernel::run`) on a device.
    pub run: fn(&Device, &[HostTensor]) -> Result<Vec<HostTensor>>,
}

/// The two devices the fuzzer compares: the XLA CPU plugin, and the
/// interpreter with its checks collecting what they find silently (the
/// generated kernels read out of range on purpose, where XLA clamps).
pub fn devices() -> Result<(Device, Device)> {
    let interpreter = Device::interpreter_with(InterpreterOptions {
        on_finding: OnFinding::Collect,
        ..InterpreterOptions::default()
    });
    Ok((Device::cpu()?, interpreter))
}

/// The arguments of `case` drawn from `seed`.
pub fn arguments(case: &Case, seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng::new(seed);
    case.args
        .iter()
        .map(|a| match *a {
            Arg::F32(shape) => {
                HostTensor::from_fn(TensorSpec::new(shape.to_vec(), DType::F32), |_| {
                    rng.int(-32, 32) as f64 / 8.0
                })
            }
            Arg::S32(shape, lo, hi) => {
                HostTensor::from_fn(TensorSpec::new(shape.to_vec(), DType::S32), |_| {
                    rng.int(i64::from(lo), i64::from(hi)) as f64
                })
            }
            Arg::Pred(shape) => {
                HostTensor::from_fn(TensorSpec::new(shape.to_vec(), DType::Pred), |_| {
                    (rng.next_u64() & 1) as f64
                })
            }
        })
        .collect()
}

/// The distance from `x` to the next f32 away from zero (normal range).
fn ulp_f32(x: f64) -> f64 {
    let e = if x == 0.0 {
        -126
    } else {
        (x.abs().log2().floor() as i32).max(-126)
    };
    2f64.powi(e - 23)
}

/// Whether `got` matches `want` for a result accumulating `terms` inexact
/// terms: exactly for 0 (NaN matching NaN), else within `4 * terms` ulps
/// (the interpreter's tolerance against XLA's own transcendental functions
/// and summation order).
fn same(got: f64, want: f64, terms: usize) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if terms == 0 || got.is_infinite() || want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= 4.0 * terms as f64 * ulp_f32(got.abs().max(want.abs()))
}

/// Compares two runs' results; the first difference found.
pub fn compare_outputs(
    case: &Case,
    first: &[HostTensor],
    second: &[HostTensor],
) -> std::result::Result<(), String> {
    if first.len() != second.len() {
        return Err(format!("{} results against {}", first.len(), second.len()));
    }
    for (i, (a, b)) in first.iter().zip(second).enumerate() {
        if a.spec() != b.spec() {
            return Err(format!("result {i}: {} against {}", a.spec(), b.spec()));
        }
        let terms = case.outputs.get(i).copied().unwrap_or(0);
        let bad: Vec<String> = a
            .to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .enumerate()
            .filter(|&(_, (&x, y))| !same(x, y, terms))
            .take(4)
            .map(|(j, (x, y))| format!("[{j}] {x:e} against {y:e}"))
            .collect();
        if !bad.is_empty() {
            return Err(format!("result {i} ({}): {}", a.spec(), bad.join("; ")));
        }
    }
    Ok(())
}

/// Runs `case` on arguments drawn from `seed` on both devices and compares
/// the results; a failure on either device is a mismatch too (every
/// generated kernel is meant to compile, trace and run).
pub fn compare(
    case: &Case,
    seed: u64,
    first: &Device,
    second: &Device,
) -> std::result::Result<(), String> {
    let args = arguments(case, seed);
    let a = (case.run)(first, &args);
    let b = (case.run)(second, &args);
    let (na, nb) = (first.platform_name(), second.platform_name());
    match (a, b) {
        (Ok(a), Ok(b)) => compare_outputs(case, &a, &b)
            .map_err(|m| format!("{} ({na} against {nb}): {m}", case.name)),
        (Err(e), Ok(_)) => Err(format!("{}: fails on {na} only: {e}", case.name)),
        (Ok(_), Err(e)) => Err(format!("{}: fails on {nb} only: {e}", case.name)),
        (Err(e), Err(f)) => Err(format!("{}: fails on both: {e} / {f}", case.name)),
    }
}
