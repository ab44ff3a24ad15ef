//! Layer norm and RMS norm (every variant) against plain-Rust f64
//! references, over shapes with rows of 1, odd and non-multiple-of-8/128
//! lengths, in f64, f32, bf16, f16 and fp8; tolerances per dtype are in
//! `common::tol`. Also: no cancellation for rows with a large mean, bad
//! arguments as kernel errors, and inlining into a user kernel.

extern crate tessel_dsl as tessel;

mod common;

use common::{assert_close, dev, kernel_error, random, tol, Tol};
use tessel::prelude::*;
use tessel_kernels::norm::{
    layer_norm, layer_norm_no_bias, layer_norm_plain, rms_norm, rms_norm_plain,
};

/// Which norm and which learned parameters.
#[derive(Clone, Copy, Debug)]
enum Variant {
    Layer,
    LayerNoBias,
    LayerPlain,
    Rms,
    RmsPlain,
}

const VARIANTS: [Variant; 5] = [
    Variant::Layer,
    Variant::LayerNoBias,
    Variant::LayerPlain,
    Variant::Rms,
    Variant::RmsPlain,
];

/// The f64 reference: each row of `d` elements normalized, then scaled and shifted.
fn reference(v: Variant, x: &[f64], d: usize, scale: &[f64], bias: &[f64], eps: f64) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|row| {
            let n = d as f64;
            let (center, denom) = match v {
                Variant::Rms | Variant::RmsPlain => (
                    0.0,
                    (row.iter().map(|a| a * a).sum::<f64>() / n + eps).sqrt(),
                ),
                _ => {
                    let mean = row.iter().sum::<f64>() / n;
                    let var = row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n;
                    (mean, (var + eps).sqrt())
                }
            };
            row.iter()
                .enumerate()
                .map(move |(j, a)| {
                    let y = (a - center) / denom;
                    match v {
                        Variant::Layer => y * scale[j] + bias[j],
                        Variant::LayerNoBias | Variant::Rms => y * scale[j],
                        Variant::LayerPlain | Variant::RmsPlain => y,
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn run(
    d: &Device,
    v: Variant,
    x: &HostTensor,
    scale: &HostTensor,
    bias: &HostTensor,
    eps: f64,
) -> Result<HostTensor> {
    match v {
        Variant::Layer => layer_norm::run(d, x, scale, bias, eps),
        Variant::LayerNoBias => layer_norm_no_bias::run(d, x, scale, eps),
        Variant::LayerPlain => layer_norm_plain::run(d, x, eps),
        Variant::Rms => rms_norm::run(d, x, scale, eps),
        Variant::RmsPlain => rms_norm_plain::run(d, x, eps),
    }
}

/// Runs variant `v` on random data of `dtype` and `shape` (scale and bias
/// in `param_dtype`) and checks it against the reference within `t`.
fn check(d: &Device, v: Variant, dtype: DType, param_dtype: DType, shape: &[usize], t: Tol) {
    let cols = *shape.last().unwrap();
    let seed = shape.iter().product::<usize>() as u64;
    let (x, xv) = random(dtype, shape, seed, -3.0, 3.0);
    let (scale, sv) = random(param_dtype, &[cols], seed + 1, 0.5, 1.5);
    let (bias, bv) = random(param_dtype, &[cols], seed + 2, -1.0, 1.0);
    let eps = 1e-5;
    let y = run(d, v, &x, &scale, &bias, eps).unwrap();
    assert_eq!(
        (y.dtype(), y.shape()),
        (dtype, shape),
        "{v:?} keeps dtype and shape"
    );
    let want = reference(v, &xv, cols, &sv, &bv, eps);
    assert_close(&y, &want, t, &format!("{v:?} {dtype} {shape:?}"));
}

#[test]
fn every_variant_matches_the_reference_in_f32() {
    let d = dev();
    // Rows of 1 (only the bias survives), odd, non-multiples of 8 and 128.
    for shape in [&[1, 1][..], &[3, 7], &[2, 5, 129], &[1, 200]] {
        for v in VARIANTS {
            check(&d, v, F32, F32, shape, tol(F32));
        }
    }
}

#[test]
fn narrow_dtypes_compute_in_f32_and_round_once() {
    let d = dev();
    for dtype in [BF16, F16] {
        for shape in [&[3, 7][..], &[2, 130]] {
            for v in VARIANTS {
                check(&d, v, dtype, dtype, shape, tol(dtype));
            }
        }
    }
    // Every reduction of the bf16 program runs over f32 values.
    let (x, s) = (TensorSpec::new([2, 3], BF16), TensorSpec::new([3], BF16));
    for text in [
        layer_norm::lower(&x, &s, &s, 1e-5).unwrap(),
        rms_norm::lower(&x, &s, 1e-5).unwrap(),
    ] {
        let reduces: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("}) {dimensions"))
            .collect();
        assert!(!reduces.is_empty());
        assert!(
            reduces.iter().all(|l| l.contains("-> tensor<2xf32>")),
            "{text}"
        );
    }
    // f32 parameters with bf16 activations (the usual mixed-precision setup).
    check(&d, Variant::Layer, BF16, F32, &[4, 33], tol(BF16));
    check(&d, Variant::Rms, BF16, F32, &[4, 33], tol(BF16));
    // f64 stays f64.
    for v in [Variant::Layer, Variant::Rms] {
        check(&d, v, F64, F64, &[3, 65], tol(F64));
    }
    // fp8: the statistics are computed in f32 from the fp8 values, so the
    // only error is the final rounding.
    for dtype in [F8E4M3FN, F8E5M2] {
        for v in [Variant::LayerPlain, Variant::RmsPlain, Variant::Layer] {
            check(&d, v, dtype, F32, &[3, 24], tol(dtype));
        }
    }
}

#[test]
fn rows_with_a_large_mean_do_not_cancel() {
    // Rows of 1000 + U(-1, 1): E[x²] − E[x]² in f32 loses about three
    // digits of the variance here (E[x²] ≈ 1e6, whose f32 ulp is 0.0625,
    // against a variance of 1/3); the centered form keeps f32 accuracy.
    let d = dev();
    let (rows, cols) = (8, 96);
    let (x, xv) = random(F32, &[rows, cols], 7, 999.0, 1001.0);
    let y = layer_norm_plain::run(&d, &x, 0.0).unwrap();
    let want = reference(Variant::LayerPlain, &xv, cols, &[], &[], 0.0);
    let t = Tol {
        atol: 2e-4,
        rtol: 2e-4,
    };
    assert_close(&y, &want, t, "centered variance");
    // The same tolerance rejects the two-moment form evaluated in f32.
    let naive_worst = xv
        .chunks(cols)
        .map(|row| {
            let n = cols as f32;
            let mean = row.iter().map(|&a| a as f32).sum::<f32>() / n;
            let mean_sq = row.iter().map(|&a| (a as f32) * (a as f32)).sum::<f32>() / n;
            let var_naive = f64::from(mean_sq - mean * mean);
            let var = row
                .iter()
                .map(|a| (a - f64::from(mean)).powi(2))
                .sum::<f64>()
                / f64::from(n);
            if var_naive > 0.0 {
                (var / var_naive).sqrt() - 1.0
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0f64, |m, e| m.max(e.abs()));
    assert!(
        naive_worst > 100.0 * t.rtol,
        "the naive form errs by {naive_worst}"
    );
}

#[test]
fn bad_arguments_are_kernel_errors() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1.0f32; 6], [2, 3]).unwrap();
    let s3 = HostTensor::from_vec(vec![1.0f32; 3], [3]).unwrap();
    let s4 = HostTensor::from_vec(vec![1.0f32; 4], [4]).unwrap();
    let ints = HostTensor::from_vec(vec![1i32; 6], [2, 3]).unwrap();

    let e = kernel_error(layer_norm::run(&d, &x, &s4, &s3, 1e-5));
    assert_eq!(
        (e.kernel.as_str(), e.op.as_str()),
        ("layer_norm", "layer_norm")
    );
    assert!(
        e.message.contains("`scale` must be a float vector [3]"),
        "{}",
        e.message
    );
    let e = kernel_error(layer_norm::run(&d, &x, &s3, &x, 1e-5));
    assert!(e.message.contains("`bias` must be"), "{}", e.message);
    let e = kernel_error(rms_norm::run(&d, &ints, &s3, 1e-5));
    assert!(
        e.message.contains("needs a float input, got s32"),
        "{}",
        e.message
    );
    assert_eq!(e.operands, vec!["s32[2,3]"]);
    let e = kernel_error(rms_norm_plain::run(&d, &x, -1.0));
    assert!(
        e.message.contains("eps must be finite and non-negative"),
        "{}",
        e.message
    );
    let e = kernel_error(layer_norm_plain::run(&d, &x, f64::NAN));
    assert!(e.message.contains("eps must be"), "{}", e.message);
    let e = kernel_error(layer_norm_no_bias::run(
        &d,
        &HostTensor::scalar(1.0f32),
        &s3,
        1e-5,
    ));
    assert!(e.message.contains("rank 1 or more"), "{}", e.message);
}

/// A pre-norm residual block: the library kernels inline into a user kernel.
#[cpu_kernel]
fn prenorm(x: Tensor, w: Tensor, scale: Tensor) -> Tensor {
    x + rms_norm(x, scale, 1e-6).matmul(w)
}

/// A user kernel passing a bad scale: the error points at the caller's line.
#[cpu_kernel]
fn misuse(x: Tensor) -> Tensor {
    layer_norm_plain(x, 1e-5) + rms_norm(x, x, 1e-5)
}

#[test]
fn norms_inline_into_user_kernels_and_report_the_callers_line() {
    let d = dev();
    let (x, xv) = random(F32, &[3, 5], 1, -1.0, 1.0);
    let (w, wv) = random(F32, &[5, 5], 2, -1.0, 1.0);
    let (s, sv) = random(F32, &[5], 3, 0.5, 1.5);
    let y = prenorm::run(&d, &x, &w, &s).unwrap();
    let normed = reference(Variant::Rms, &xv, 5, &sv, &[], 1e-6);
    let want: Vec<f64> = (0..15)
        .map(|k| {
            let (i, j) = (k / 5, k % 5);
            xv[k]
                + (0..5)
                    .map(|m| normed[i * 5 + m] * wv[m * 5 + j])
                    .sum::<f64>()
        })
        .collect();
    assert_close(&y, &want, tol(F32), "prenorm");
    let text = prenorm::lower(x.spec(), w.spec(), s.spec()).unwrap();
    assert_eq!(text.matches("func.func").count(), 1, "inlined");

    let e = kernel_error(misuse::run(&d, &x));
    assert_eq!((e.kernel.as_str(), e.op.as_str()), ("misuse", "rms_norm"));
    assert!(e.location.file.ends_with("tests/norm.rs"), "{}", e.location);
}
