//! The comparison of the host interpreter with the XLA CPU plugin, shared
//! by the interpreter's tests and its differential fuzzer: one tolerance
//! per dtype ([`tolerance`]) and runners that evaluate a traced kernel both
//! ways.

#![allow(dead_code)]

use crate::common::*;
use tessel_dsl::interp::{evaluate, Checks, Evaluation};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::trace::Outputs;
use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec};

/// How far the interpreter may be from the plugin, per dtype: `(ulps,
/// floor)`: `|got - want| <= ulps * terms * ulp(dtype, |want|) + floor`,
/// where `terms` is 1 for elementwise ops and the number of accumulated
/// terms for sums and dots. Integers and pred are exact. f32 and f64 allow
/// a few ulps because XLA's transcendental functions are its own
/// approximations; the narrow floats allow one ulp of the dtype, a
/// rounding of an f32 result that lands on the other side of a midpoint.
/// No floor is needed so far (0 for every dtype): ulps reach down to the
/// subnormals, so a subnormal flushed on one side only is caught.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 | DType::F32 => (4.0, 0.0),
        DType::F16 | DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => (1.0, 0.0),
        _ => (0.0, 0.0),
    }
}

/// The distance between `x` and the next value of `dtype` away from zero.
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

/// Asserts the interpreter's `got` matches the plugin's `want`.
#[track_caller]
pub fn assert_same(got: &HostTensor, want: &HostTensor, terms: usize, what: &str) {
    assert_eq!(got.spec(), want.spec(), "{what}: type");
    let d = want.dtype();
    let (ulps, floor) = tolerance(d);
    let bad: Vec<String> = got
        .to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .enumerate()
        .filter(|&(_, (&g, w))| {
            let ok = if g.is_nan() || w.is_nan() {
                g.is_nan() && w.is_nan()
            } else if g.is_infinite() || w.is_infinite() || !d.is_float() {
                g == w
            } else {
                (g - w).abs() <= ulps * terms as f64 * ulp(d, w.abs().max(g.abs())) + floor
            };
            !ok
        })
        .take(6)
        .map(|(i, (g, w))| format!("[{i}] interp {g:e}, xla {w:e}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what} ({}): {}",
        want.spec(),
        bad.join("; ")
    );
}

/// Traces `body` for `args`, evaluates it with the interpreter and runs it
/// on the CPU plugin, compares every output (sums of up to `terms` terms)
/// and returns the evaluation.
#[track_caller]
pub fn both_n<O: Outputs>(
    body: impl Fn(&[Tensor]) -> O,
    args: &[HostTensor],
    terms: usize,
) -> Evaluation {
    let k = Kernel::new(fresh_name("interp"), body);
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let g = k.trace(&specs).expect("the kernel traces");
    let e = evaluate(&g, args, Checks::default()).expect("the interpreter evaluates");
    let refs: Vec<&HostTensor> = args.iter().collect();
    let xla = k.run(&device(), &refs).expect("the plugin runs");
    assert_eq!(e.outputs.len(), xla.len(), "output count");
    for (i, (a, b)) in e.outputs.iter().zip(&xla).enumerate() {
        assert_same(a, b, terms, &format!("output {i}"));
    }
    e
}

/// [`both_n`] for elementwise results.
#[track_caller]
pub fn both<O: Outputs>(body: impl Fn(&[Tensor]) -> O, args: &[HostTensor]) -> Evaluation {
    both_n(body, args, 1)
}
