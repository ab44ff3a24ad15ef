//! GELU (both forms), SiLU, SwiGLU, the fused GELU + dropout, and the
//! softmax kernels against plain-Rust f64 references over shape sweeps
//! (sizes 1, odd, and non-multiples of 8 and 128) in f64, f32, bf16, f16
//! and fp8, with the per-dtype tolerances of `common::tol`; dropout masks
//! reproduced exactly on the host, their statistics, determinism, and bad
//! arguments.

mod common;

use common::{assert_close, dev, kernel_error, random, tol};
use tessel_dsl::ops::random::random_bits_reference;
use tessel_dsl::prelude::*;
use tessel_kernels::activation::{fused_gelu_dropout, gelu, silu, swiglu};
use tessel_kernels::softmax::{log_softmax, softmax};

/// erf in f64 to about 1e-15: `2/√π · e^(−x²) · Σ 2ⁿ x^(2n+1) / (1·3···(2n+1))`
/// (all terms positive, so no cancellation), and ±1 beyond |x| = 6 where
/// erfc < 2e-17.
fn erf(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-17 * sum.abs() {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
}

fn gelu_ref(x: f64, approximate: bool) -> f64 {
    if approximate {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
    } else {
        0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
    }
}

fn silu_ref(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

const SHAPES: [&[usize]; 4] = [&[1], &[7], &[3, 129], &[2, 3, 67]];

#[test]
fn erf_reference_is_accurate() {
    // Tabulated values (Abramowitz & Stegun, table 7.1).
    for (x, want) in [
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.5, 0.999_999_256_901_627_7),
    ] {
        assert!((erf(x) - want).abs() < 1e-14, "erf({x})");
        assert!((erf(-x) + want).abs() < 1e-14);
    }
}

#[test]
fn gelu_and_silu_match_references() {
    let d = dev();
    for dtype in [F32, BF16, F16] {
        for (k, shape) in SHAPES.iter().enumerate() {
            let (x, xv) = random(dtype, shape, k as u64, -5.0, 5.0);
            for approximate in [false, true] {
                let y = gelu::run(&d, &x, approximate).unwrap();
                assert_eq!(y.dtype(), dtype);
                let want: Vec<f64> = xv.iter().map(|&v| gelu_ref(v, approximate)).collect();
                assert_close(
                    &y,
                    &want,
                    tol(dtype),
                    &format!("gelu({approximate}) {dtype} {shape:?}"),
                );
            }
            let want: Vec<f64> = xv.iter().map(|&v| silu_ref(v)).collect();
            assert_close(
                &silu::run(&d, &x).unwrap(),
                &want,
                tol(dtype),
                &format!("silu {dtype} {shape:?}"),
            );
        }
    }
    for dtype in [F64, F8E4M3FN, F8E5M2] {
        let (x, xv) = random(dtype, &[5, 9], 3, -4.0, 4.0);
        let want: Vec<f64> = xv.iter().map(|&v| gelu_ref(v, false)).collect();
        assert_close(
            &gelu::run(&d, &x, false).unwrap(),
            &want,
            tol(dtype),
            &format!("gelu {dtype}"),
        );
        let want: Vec<f64> = xv.iter().map(|&v| silu_ref(v)).collect();
        assert_close(
            &silu::run(&d, &x).unwrap(),
            &want,
            tol(dtype),
            &format!("silu {dtype}"),
        );
    }
    // The two GELU forms differ by less than 5e-4 everywhere.
    let worst = (-800..=800)
        .map(|i| {
            let x = f64::from(i) / 100.0;
            (gelu_ref(x, true) - gelu_ref(x, false)).abs()
        })
        .fold(0.0, f64::max);
    assert!(worst < 5e-4 && worst > 1e-4, "{worst}");
}

#[test]
fn swiglu_matches_reference() {
    let d = dev();
    for dtype in [F32, BF16, F16] {
        for (k, shape) in SHAPES.iter().enumerate() {
            let (g, gv) = random(dtype, shape, 10 + k as u64, -4.0, 4.0);
            let (u, uv) = random(dtype, shape, 20 + k as u64, -2.0, 2.0);
            let y = swiglu::run(&d, &g, &u).unwrap();
            let want: Vec<f64> = gv.iter().zip(&uv).map(|(&a, &b)| silu_ref(a) * b).collect();
            assert_close(&y, &want, tol(dtype), &format!("swiglu {dtype} {shape:?}"));
        }
    }
    let (g, _) = random(F32, &[2, 3], 1, -1.0, 1.0);
    let (u, _) = random(F32, &[3], 2, -1.0, 1.0);
    let e = kernel_error(swiglu::run(&d, &g, &u));
    assert!(e.message.contains("same shape and dtype"), "{}", e.message);
    let e = kernel_error(swiglu::run(&d, &g, &g.cast(BF16)));
    assert!(
        e.message.contains("f32[2,3] and bf16[2,3]"),
        "{}",
        e.message
    );
}

/// Whether dropout keeps element `i` for `seed` and `rate`: the kernel's
/// rule, computed on the host from the counter-based generator.
fn kept(seed: u32, i: usize, rate: f64) -> bool {
    let bits = random_bits_reference(seed, i as u32);
    (bits >> 8) as f32 * 2f32.powi(-24) >= rate as f32
}

#[test]
fn dropout_mask_is_reproducible_on_the_host() {
    let d = dev();
    for (dtype, shape, rate, seed) in [
        (F32, &[1][..], 0.5, 0u32),
        (F32, &[3, 129], 0.1, 7),
        (F32, &[2, 5, 13], 0.9, 123_456_789),
        (BF16, &[4, 33], 0.3, 5),
        (F16, &[4, 33], 0.3, 5),
    ] {
        let (x, xv) = random(dtype, shape, u64::from(seed), -3.0, 3.0);
        for approximate in [false, true] {
            let y =
                fused_gelu_dropout::run(&d, &x, true, rate, &HostTensor::scalar(seed), approximate)
                    .unwrap();
            let scale = 1.0 / (1.0 - rate);
            let want: Vec<f64> = xv
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    if kept(seed, i, rate) {
                        gelu_ref(v, approximate) * scale
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_close(
                &y,
                &want,
                tol(dtype),
                &format!("dropout {dtype} {shape:?} rate {rate}"),
            );
        }
    }
}

#[test]
fn dropout_statistics_and_determinism() {
    let d = dev();
    let n = 1 << 16;
    let x = HostTensor::from_vec(vec![1.0f32; n], [n]).unwrap();
    let g1 = gelu_ref(1.0, false);
    for rate in [0.1, 0.5] {
        let seed = HostTensor::scalar(11u32);
        let y = fused_gelu_dropout::run(&d, &x, true, rate, &seed, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
        let sigma = (rate * (1.0 - rate) / n as f64).sqrt();
        assert!(
            (dropped - rate).abs() < 5.0 * sigma,
            "rate {rate}: dropped {dropped}"
        );
        // Inverted dropout keeps the mean.
        let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
        assert!(
            (mean / g1 - 1.0).abs() < 6.0 * sigma / (1.0 - rate),
            "rate {rate}: mean {mean}"
        );
        // Same seed, same result; another seed, another mask (independent:
        // both keep about (1 - rate)² of the elements).
        let again = fused_gelu_dropout::run(&d, &x, true, rate, &seed, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(y, again);
        let other = fused_gelu_dropout::run(&d, &x, true, rate, &HostTensor::scalar(12u32), false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let both = y
            .iter()
            .zip(&other)
            .filter(|(a, b)| **a != 0.0 && **b != 0.0)
            .count() as f64
            / n as f64;
        let keep = 1.0 - rate;
        assert!(
            (both - keep * keep).abs() < 0.01,
            "rate {rate}: overlap {both}"
        );
    }
    // A new seed reuses the compiled program.
    let before = tessel_dsl::thread_trace_count();
    for s in 100..103u32 {
        fused_gelu_dropout::run(&d, &x, true, 0.1, &HostTensor::scalar(s), false).unwrap();
    }
    assert_eq!(
        tessel_dsl::thread_trace_count(),
        before,
        "no new trace or compile"
    );
    // An s32 seed works too.
    let y = fused_gelu_dropout::run(&d, &x, true, 0.5, &HostTensor::scalar(11i32), false).unwrap();
    let want =
        fused_gelu_dropout::run(&d, &x, true, 0.5, &HostTensor::scalar(11u32), false).unwrap();
    assert_eq!(y, want);
}

#[test]
fn not_training_or_rate_zero_is_plain_gelu() {
    let d = dev();
    let seed = HostTensor::scalar(3u32);
    for dtype in [F32, BF16] {
        let (x, _) = random(dtype, &[3, 129], 4, -4.0, 4.0);
        for approximate in [false, true] {
            let plain = gelu::run(&d, &x, approximate).unwrap();
            assert_eq!(
                fused_gelu_dropout::run(&d, &x, false, 0.5, &seed, approximate).unwrap(),
                plain
            );
            assert_eq!(
                fused_gelu_dropout::run(&d, &x, true, 0.0, &seed, approximate).unwrap(),
                plain
            );
        }
    }
}

#[test]
fn bad_arguments_are_kernel_errors() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1.0f32; 4], [4]).unwrap();
    let ints = HostTensor::from_vec(vec![1i32; 4], [4]).unwrap();
    let seed = HostTensor::scalar(1u32);
    for rate in [1.0, -0.1, f64::NAN] {
        let e = kernel_error(fused_gelu_dropout::run(&d, &x, true, rate, &seed, false));
        assert_eq!(e.op, "fused_gelu_dropout");
        assert!(
            e.message.contains("rate must be in [0, 1)"),
            "{}",
            e.message
        );
    }
    let e = kernel_error(fused_gelu_dropout::run(
        &d,
        &x,
        true,
        0.5,
        &HostTensor::scalar(1.0f32),
        false,
    ));
    assert!(
        e.message.contains("seed must be an integer scalar"),
        "{}",
        e.message
    );
    let e = kernel_error(fused_gelu_dropout::run(&d, &x, true, 0.5, &x, false));
    assert!(e.message.contains("got f32[4]"), "{}", e.message);
    for e in [
        kernel_error(gelu::run(&d, &ints, false)),
        kernel_error(silu::run(&d, &ints)),
        kernel_error(swiglu::run(&d, &ints, &ints)),
        kernel_error(fused_gelu_dropout::run(&d, &ints, true, 0.5, &seed, false)),
    ] {
        assert!(
            e.message.contains("needs a float input, got s32"),
            "{}",
            e.message
        );
    }
}

/// Softmax (or log-softmax) of `x` with `shape` along `axis`, in f64.
fn softmax_ref(x: &[f64], shape: &[usize], axis: usize, log: bool) -> Vec<f64> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * n * inner + k * inner + i;
            let m = (0..n).map(|k| x[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = (0..n).map(|k| (x[at(k)] - m).exp()).sum();
            for k in 0..n {
                let v = x[at(k)] - m;
                out[at(k)] = if log { v - z.ln() } else { v.exp() / z };
            }
        }
    }
    out
}

#[test]
fn softmax_and_log_softmax_match_references_on_every_axis() {
    let d = dev();
    for dtype in [F32, BF16, F16] {
        for (k, shape) in [&[1][..], &[7], &[3, 129], &[2, 3, 67]].iter().enumerate() {
            // Logits up to ±30: exp(30) overflows f16, so only the shifted
            // form works there.
            let (x, xv) = random(dtype, shape, 40 + k as u64, -30.0, 30.0);
            // Negative axes in f32 only (each axis value is its own program).
            let signs: &[bool] = if dtype == F32 {
                &[false, true]
            } else {
                &[false]
            };
            for axis in 0..shape.len() {
                for &negative in signs {
                    let a = if negative {
                        axis as isize - shape.len() as isize
                    } else {
                        axis as isize
                    };
                    let what = format!("{dtype} {shape:?} axis {a}");
                    let y = softmax::run(&d, &x, a).unwrap();
                    assert_eq!(y.dtype(), dtype);
                    assert_close(
                        &y,
                        &softmax_ref(&xv, shape, axis, false),
                        tol(dtype),
                        &format!("softmax {what}"),
                    );
                    let y = log_softmax::run(&d, &x, a).unwrap();
                    assert_close(
                        &y,
                        &softmax_ref(&xv, shape, axis, true),
                        tol(dtype),
                        &format!("log_softmax {what}"),
                    );
                }
            }
        }
    }
    for dtype in [F64, F8E4M3FN] {
        let (x, xv) = random(dtype, &[3, 9], 2, -4.0, 4.0);
        assert_close(
            &softmax::run(&d, &x, -1).unwrap(),
            &softmax_ref(&xv, &[3, 9], 1, false),
            tol(dtype),
            &format!("softmax {dtype}"),
        );
    }
}

#[test]
fn softmax_is_stable_and_handles_masked_entries() {
    let d = dev();
    // Huge logits, and -inf (masked) entries next to finite ones.
    let inf = f64::INFINITY;
    let xv = [1e30, 1e30 - 1e24, -inf, 88.0, 89.0, -inf];
    let x = common::host(F32, &[2, 3], &xv);
    let rounded = x.to_f64_vec();
    let y = softmax::run(&d, &x, -1).unwrap();
    assert_close(
        &y,
        &softmax_ref(&rounded, &[2, 3], 1, false),
        tol(F32),
        "softmax",
    );
    assert_eq!(y.to_f64_vec()[2], 0.0);
    let y = log_softmax::run(&d, &x, -1).unwrap().to_f64_vec();
    assert_eq!((y[2], y[5]), (f64::NEG_INFINITY, f64::NEG_INFINITY));
    assert!(
        (y[4] - (-(1.0 + (-1.0f64).exp()).ln())).abs() < 1e-6,
        "{y:?}"
    );
    // A fully masked row has no distribution: NaN, as in JAX and PyTorch.
    let masked = common::host(F32, &[1, 2], &[-inf, -inf]);
    assert!(softmax::run(&d, &masked, -1)
        .unwrap()
        .to_f64_vec()
        .iter()
        .all(|v| v.is_nan()));
}

#[test]
fn softmax_bad_arguments_are_kernel_errors() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1.0f32; 6], [2, 3]).unwrap();
    for axis in [2, -3] {
        let e = kernel_error(softmax::run(&d, &x, axis));
        assert_eq!(e.op, "softmax");
        assert!(
            e.message
                .contains(&format!("axis {axis} is out of range for rank 2")),
            "{}",
            e.message
        );
    }
    let e = kernel_error(log_softmax::run(
        &d,
        &HostTensor::from_vec(vec![1i32; 3], [3]).unwrap(),
        0,
    ));
    assert_eq!(e.op, "log_softmax");
    assert!(
        e.message.contains("needs a float input, got s32"),
        "{}",
        e.message
    );
}
