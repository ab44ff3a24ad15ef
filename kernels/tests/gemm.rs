//! GEMM and quantized matmuls against f64 plain-Rust references.
//!
//! Tolerances (relative to 1 + |reference|): f32 operands 1e-5 · K; bf16 and
//! f16 operands are compared with the reference computed on the rounded
//! operands (the kernel accumulates in f32), 1e-5 · K; fp8 likewise; int8
//! operands exact before scaling; quantization round trips within one
//! quantization step (scale / 2 for int8, the fp8 spacing at the value).

mod common;

extern crate tessel_dsl as tessel;

use common::{close, dev, uniform};
use tessel_dsl::prelude::*;
use tessel_kernels::gemm::{gemm, gemm_bias, Activation, GemmOptions};
use tessel_kernels::quantized::{
    dequantize, quantize, quantize_rows, quantized_matmul, quantized_matmul_both,
};

/// `[.., M, K] x [.., K, N]` with equal batch axes, in f64 on the stored values.
fn mm(a: &HostTensor, b: &HostTensor, ta: bool, tb: bool) -> (Vec<f64>, Vec<usize>) {
    let (sa, sb) = (a.shape(), b.shape());
    let r = sa.len();
    let batch: usize = sa[..r - 2].iter().product();
    let (am, ak) = (sa[r - 2], sa[r - 1]);
    let (bk, bn) = (sb[r - 2], sb[r - 1]);
    let (m, k) = if ta { (ak, am) } else { (am, ak) };
    let n = if tb { bk } else { bn };
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| {
                        let x = if ta {
                            av[bi * am * ak + p * ak + i]
                        } else {
                            av[bi * am * ak + i * ak + p]
                        };
                        let y = if tb {
                            bv[bi * bk * bn + j * bn + p]
                        } else {
                            bv[bi * bk * bn + p * bn + j]
                        };
                        x * y
                    })
                    .sum();
                out.push(s);
            }
        }
    }
    let mut shape = sa[..r - 2].to_vec();
    shape.extend([m, n]);
    (out, shape)
}

#[test]
fn gemm_shapes_transposes_and_batches() {
    let d = dev();
    for (i, &(m, k, n)) in [(1, 1, 1), (7, 13, 5), (33, 17, 9), (64, 130, 3)]
        .iter()
        .enumerate()
    {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = uniform(&if ta { [k, m] } else { [m, k] }, F32, i as u64, 1.0);
            let b = uniform(&if tb { [n, k] } else { [k, n] }, F32, 50 + i as u64, 1.0);
            let opts = GemmOptions {
                transpose_a: ta,
                transpose_b: tb,
                ..GemmOptions::default()
            };
            let (want, shape) = mm(&a, &b, ta, tb);
            let y = gemm::run(&d, &a, &b, opts).unwrap();
            assert_eq!(y.shape(), &shape[..]);
            close(&y, &want, 1e-5 * k as f64);
        }
    }
    let a = uniform(&[3, 5, 7], F32, 1, 1.0);
    let b = uniform(&[3, 7, 4], F32, 2, 1.0);
    let (want, _) = mm(&a, &b, false, false);
    close(
        &gemm::run(&d, &a, &b, GemmOptions::default()).unwrap(),
        &want,
        1e-4,
    );
}

#[test]
fn gemm_blocked_k_equals_single_dot() {
    let d = dev();
    let a = uniform(&[9, 300], F32, 3, 1.0);
    let b = uniform(&[300, 11], F32, 4, 1.0);
    let (want, _) = mm(&a, &b, false, false);
    // Blocks longer than K are all of K (the last once overflowed s32 while tracing).
    for bk in [128, 256, 4096, 1 << 40] {
        let opts = GemmOptions {
            block_k: Some(bk),
            ..GemmOptions::default()
        };
        close(&gemm::run(&d, &a, &b, opts).unwrap(), &want, 1e-5 * 300.0);
    }
    // K blocks of 8 break the TPU rule on the minor axis; under CPU rules they are fine.
    let opts = GemmOptions {
        block_k: Some(8),
        ..GemmOptions::default()
    };
    let err = gemm::run(&d, &a, &b, opts).unwrap_err();
    assert!(err.to_string().contains("multiple of 128"), "{err}");
    // Reported by the kernel's own check, before any block is read.
    let e = err.as_kernel_error().expect("a kernel error");
    assert_eq!(e.op, "gemm", "{e}");
    assert!(
        e.message.contains("block_k = 8 does not tile K = 300"),
        "{e}"
    );
    let cpu = KernelConfig {
        platform: Platform::Cpu,
        ..gemm::CONFIG
    };
    close(
        &gemm::run_with(&cpu, &d, &a, &b, opts).unwrap(),
        &want,
        1e-5 * 300.0,
    );
    let text = gemm::lower(a.spec(), b.spec(), GemmOptions::default()).unwrap();
    assert_eq!(text.matches("stablehlo.dot_general").count(), 1);
}

#[test]
fn gemm_low_precision_inputs_accumulate_in_f32() {
    let d = dev();
    for dtype in [BF16, F16, F8E4M3FN, F8E5M2] {
        let a = uniform(&[6, 40], dtype, 5, 1.0);
        let b = uniform(&[40, 3], dtype, 6, 1.0);
        let (want, _) = mm(&a, &b, false, false);
        let opts = GemmOptions {
            out_dtype: Some(F32),
            ..GemmOptions::default()
        };
        let y = gemm::run(&d, &a, &b, opts).unwrap();
        assert_eq!(y.dtype(), F32, "{dtype}");
        close(&y, &want, 1e-5 * 40.0);
        // Default output dtype: the input's for 16-bit floats, f32 for fp8.
        let y = gemm::run(&d, &a, &b, GemmOptions::default()).unwrap();
        let expect = if dtype == F8E4M3FN || dtype == F8E5M2 {
            F32
        } else {
            dtype
        };
        assert_eq!(y.dtype(), expect);
    }
}

/// 8-bit integers (`dtype` s8 or u8) of `shape`, covering the whole range.
fn ints(shape: &[usize], dtype: DType, salt: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), move |i| {
        let v = ((i * 131 + salt * 17) ^ (i >> 3)) % 256;
        if dtype == U8 {
            v as f64
        } else {
            v as f64 - 128.0
        }
    })
    .cast(dtype)
}

/// 8-bit integer products accumulate exactly in s32 (on CPU they run in
/// YNNPACK's integer GEMM): odd and non-block-multiple shapes, both
/// signednesses, transposed operands, against an i64 reference.
#[test]
fn int8_gemm_is_exact() {
    let d = dev();
    let opts = GemmOptions {
        out_dtype: Some(S32),
        ..GemmOptions::default()
    };
    for (m, k, n) in [(1, 1, 1), (3, 17, 5), (67, 1031, 45), (128, 256, 64)] {
        for dtype in [S8, U8] {
            let (a, b) = (ints(&[m, k], dtype, m), ints(&[k, n], dtype, n));
            let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
            let want: Vec<i32> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    (0..k)
                        .map(|j| av[r * k + j] as i64 * bv[j * n + c] as i64)
                        .sum::<i64>() as i32
                })
                .collect();
            let y = gemm::run(&d, &a, &b, opts).unwrap();
            assert_eq!(y.to_vec::<i32>().unwrap(), want, "{dtype} {m}x{k}x{n}");
            let bt = {
                let t: Vec<f64> = (0..n * k).map(|i| bv[(i % k) * n + i / k]).collect();
                HostTensor::from_fn(TensorSpec::new([n, k], F32), |i| t[i]).cast(dtype)
            };
            let transposed = GemmOptions {
                transpose_b: true,
                ..opts
            };
            let y = gemm::run(&d, &a, &bt, transposed).unwrap();
            assert_eq!(y.to_vec::<i32>().unwrap(), want, "{dtype} {m}x{k}x{n} bT");
        }
    }
}

#[test]
fn gemm_bias_and_activation_epilogues() {
    let d = dev();
    let a = uniform(&[5, 8], F32, 7, 1.0);
    let b = uniform(&[8, 4], F32, 8, 1.0);
    let bias = uniform(&[4], F32, 9, 1.0);
    let (prod, _) = mm(&a, &b, false, false);
    let bv = bias.to_f64_vec();
    let erf = |x: f64| {
        // Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7).
        let t = 1.0 / (1.0 + 0.3275911 * x.abs());
        let y = 1.0
            - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
                + 0.254829592)
                * t
                * (-x * x).exp();
        y.copysign(x)
    };
    type Act = Box<dyn Fn(f64) -> f64>;
    let acts: [(Activation, Act); 5] = [
        (Activation::Identity, Box::new(|x| x)),
        (Activation::Relu, Box::new(|x: f64| x.max(0.0))),
        (
            Activation::Gelu,
            Box::new(move |x: f64| 0.5 * x * (1.0 + erf(x / 2f64.sqrt()))),
        ),
        (
            Activation::GeluTanh,
            Box::new(|x: f64| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
            }),
        ),
        (Activation::Silu, Box::new(|x: f64| x / (1.0 + (-x).exp()))),
    ];
    for (act, f) in acts {
        let opts = GemmOptions {
            activation: act,
            ..GemmOptions::default()
        };
        let want: Vec<f64> = prod
            .iter()
            .enumerate()
            .map(|(i, &p)| f(p + bv[i % 4]))
            .collect();
        close(
            &gemm_bias::run(&d, &a, &b, &bias, opts).unwrap(),
            &want,
            1e-5,
        );
        let want: Vec<f64> = prod.iter().map(|&p| f(p)).collect();
        close(&gemm::run(&d, &a, &b, opts).unwrap(), &want, 1e-5);
    }
}

#[test]
fn gemm_with_too_many_k_blocks_is_an_error_before_any_work() {
    // K = 2^40 in blocks of 8 would unroll 2^37 products while tracing.
    let k = 1usize << 40;
    let spec = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    for bk in [8, 0] {
        let opts = GemmOptions {
            block_k: Some(bk),
            ..GemmOptions::default()
        };
        let t = std::time::Instant::now();
        let err = gemm::lower(&spec(&[1, k]), &spec(&[k, 1]), opts).unwrap_err();
        assert!(
            err.to_string().contains("K / block_k at most 4096"),
            "{err}"
        );
        assert!(t.elapsed().as_secs() < 10);
    }
}

/// User kernels that misuse the products: each error names the kernel and
/// the line below that called it.
#[cpu_kernel]
fn misuse_gemm(a: Tensor, b: Tensor) -> Tensor {
    gemm(a, b, GemmOptions::default())
}

#[cpu_kernel]
fn misuse_gemm_bias(a: Tensor, b: Tensor, bias: Tensor) -> Tensor {
    gemm_bias(a, b, bias, GemmOptions::default())
}

#[cpu_kernel]
fn misuse_quantized(x: Tensor, w_q: Tensor, w_scales: Tensor) -> Tensor {
    quantized_matmul(x, w_q, w_scales, Some(4))
}

#[test]
fn misused_products_name_the_kernel_and_the_callers_line() {
    let spec = |s: &[usize], dt: DType| TensorSpec::new(s.to_vec(), dt);
    let f = |s: &[usize]| spec(s, F32);
    let cases = [
        (
            misuse_gemm::lower(&f(&[2, 3]), &f(&[4, 5])),
            "gemm",
            "K = 3",
        ),
        (
            misuse_gemm::lower(&f(&[2, 3]), &spec(&[3, 5], F64)),
            "gemm",
            "one numeric dtype",
        ),
        (
            misuse_gemm::lower(&f(&[2, 2, 3]), &f(&[3, 3, 5])),
            "gemm",
            "do not broadcast",
        ),
        (
            misuse_gemm_bias::lower(&f(&[2, 3]), &f(&[3, 5]), &f(&[4])),
            "gemm_bias",
            "does not broadcast to the product's shape [2, 5]",
        ),
        (
            misuse_quantized::lower(&f(&[2, 8]), &spec(&[8, 3], S8), &f(&[3])),
            "quantized_matmul",
            "`w_scales` must be [2, 3]",
        ),
        (
            misuse_quantized::lower(&f(&[2, 8]), &spec(&[7, 3], S8), &f(&[2, 3])),
            "quantized_matmul",
            "`w_q` must be [8, 3]",
        ),
    ];
    for (result, op, needle) in cases {
        let err = result.expect_err(op);
        let e = err.as_kernel_error().expect("a kernel error");
        assert_eq!(e.op, op, "{e}");
        assert!(e.message.contains(needle), "{e}");
        assert!(e.location.file.ends_with("tests/gemm.rs"), "{e}");
    }
}

#[test]
fn gemm_bad_shapes_are_kernel_errors() {
    let d = dev();
    let run_line = line!() + 1;
    let err = gemm::run(
        &d,
        &uniform(&[2, 3], F32, 1, 1.0),
        &uniform(&[4, 5], F32, 2, 1.0),
        GemmOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.is_kernel_error() && err.to_string().contains("contracting"),
        "{err}"
    );
    // The check is a line of the library; the error also names the call
    // that traced it, the `run` above (and `lower`, the same way).
    let e = err.as_kernel_error().unwrap();
    assert!(e.location.file.ends_with("src/gemm/mod.rs"), "{e}");
    let call = e.called_at.as_ref().expect("the call site");
    assert!(call.file.ends_with("tests/gemm.rs"), "{e}");
    assert_eq!(call.line, run_line, "{e}");
    assert!(
        err.to_string().contains(&format!(", called at {call}:")),
        "{err}"
    );
    let spec = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    let line = line!() + 1;
    let err = gemm::lower(&spec(&[2, 3]), &spec(&[4, 5]), GemmOptions::default()).unwrap_err();
    let call = err.as_kernel_error().unwrap().called_at.clone().unwrap();
    assert_eq!(
        (call.line, call.file.ends_with("tests/gemm.rs")),
        (line, true)
    );
}

#[test]
fn quantize_round_trips_within_one_step() {
    let d = dev();
    let w = uniform(&[37, 6], F32, 11, 1.0);
    let wv = w.to_f64_vec();
    for (dtype, block) in [
        (S8, None),
        (S8, Some(8)),
        (F8E4M3FN, None),
        (F8E5M2, Some(16)),
    ] {
        let (q, s) = quantize::run(&d, &w, dtype, block).unwrap();
        assert_eq!(q.dtype(), dtype);
        let back = dequantize::run(&d, &q, &s, block).unwrap().to_f64_vec();
        let sv = s.to_f64_vec();
        for (i, (&x, &y)) in wv.iter().zip(&back).enumerate() {
            let (r, c) = (i / 6, i % 6);
            let scale = match block {
                None => sv[c],
                Some(bk) => sv[(r / bk) * 6 + c],
            };
            // int8: half a step; fp8: relative spacing (3 mantissa bits e4m3, 2 e5m2).
            let tol = match dtype {
                S8 => scale * 0.5 + 1e-7,
                F8E4M3FN => x.abs() * 0.0625 + scale * 0.01,
                _ => x.abs() * 0.125 + scale * 0.01,
            };
            assert!(
                (x - y).abs() <= tol,
                "{dtype} {block:?} element {i}: {x} vs {y}"
            );
        }
    }
}

#[test]
fn quantize_rejects_block_k_zero_and_handles_empty_axes() {
    let d = dev();
    let w = uniform(&[8, 3], F32, 3, 1.0);
    for r in [
        quantize::run(&d, &w, S8, Some(0)).map(|_| ()),
        quantize::lower(w.spec(), S8, Some(0)).map(|_| ()),
    ] {
        let e = r.expect_err("block_k = 0 is an error").to_string();
        assert!(e.contains("block_k must be at least 1"), "{e}");
    }
    let (q, s) = quantize::run(&d, &w, S8, Some(4)).unwrap();
    let e = dequantize::run(&d, &q, &s, Some(0))
        .expect_err("block_k = 0")
        .to_string();
    assert!(e.contains("block_k must be at least 1"), "{e}");
    let x = uniform(&[2, 8], F32, 4, 1.0);
    let e = quantized_matmul::run(&d, &x, &q, &s, Some(0))
        .expect_err("block_k = 0")
        .to_string();
    assert!(e.contains("block_k must be at least 1"), "{e}");
    // K = 0: an empty result and one (smallest) scale per column.
    let empty = HostTensor::zeros(TensorSpec::new([0, 3], F32));
    let (q, s) = quantize::run(&d, &empty, S8, None).unwrap();
    assert_eq!((q.shape(), s.shape()), (&[0, 3][..], &[3][..]));
    let (q, s) = quantize::run(&d, &empty, S8, Some(4)).unwrap();
    assert_eq!((q.shape(), s.shape()), (&[0, 3][..], &[0, 3][..]));
    let rows = HostTensor::zeros(TensorSpec::new([2, 0], F32));
    let (q, s) = quantize_rows::run(&d, &rows, S8).unwrap();
    assert_eq!((q.shape(), s.shape()), (&[2, 0][..], &[2][..]));
}

#[test]
fn quantized_matmuls_match_dequantized_references() {
    let d = dev();
    let x = uniform(&[5, 40], F32, 21, 1.0);
    let w = uniform(&[40, 7], F32, 22, 1.0);
    for (dtype, block) in [
        (S8, None),
        (S8, Some(16)),
        (F8E4M3FN, None),
        (F8E4M3FN, Some(8)),
    ] {
        let (q, s) = quantize::run(&d, &w, dtype, block).unwrap();
        let wd = dequantize::run(&d, &q, &s, block).unwrap();
        let (want, _) = mm(&x, &wd, false, false);
        close(
            &quantized_matmul::run(&d, &x, &q, &s, block).unwrap(),
            &want,
            1e-5 * 40.0,
        );
    }
    // The input gradient: dout · dequantized weightsᵀ.
    let dout = uniform(&[5, 7], F32, 23, 1.0);
    for (dtype, block) in [(S8, None), (S8, Some(16)), (F8E4M3FN, Some(8))] {
        let (q, s) = quantize::run(&d, &w, dtype, block).unwrap();
        let wd = dequantize::run(&d, &q, &s, block).unwrap();
        let (want, _) = mm(&dout, &wd, false, true);
        let dx =
            tessel_kernels::grads::quantized_matmul_vjp::run(&d, &x, &q, &s, &dout, block).unwrap();
        close(&dx, &want, 1e-5 * 7.0);
    }
    // The library quantizes both operands to s8.
    let (xq, xs) = quantize_rows::run(&d, &x, S8).unwrap();
    let (wq, ws) = quantize::run(&d, &w, S8, None).unwrap();
    // Both operands 8-bit integers, of either signedness or mixed (u8
    // activations with s8 weights, and the other way round): the exact
    // integer product, then the two scales.
    let (xsv, wsv) = (xs.to_f64_vec(), ws.to_f64_vec());
    let mixes = [(U8, S8), (S8, U8), (U8, U8), (S8, S8)];
    let cases = std::iter::once((xq.clone(), wq.clone()))
        .chain(mixes.map(|(xd, wd)| (ints(&[5, 33], xd, 1), ints(&[33, 7], wd, 2))));
    for (xi, wi) in cases {
        let (iprod, _) = mm(&xi, &wi, false, false);
        let want: Vec<f64> = iprod
            .iter()
            .enumerate()
            .map(|(i, &p)| p * xsv[i / 7] * wsv[i % 7])
            .collect();
        close(
            &quantized_matmul_both::run(&d, &xi, &xs, &wi, &ws).unwrap(),
            &want,
            1e-6,
        );
    }
    // And it approximates the float product.
    let (exact, _) = mm(&x, &w, false, false);
    let approx = quantized_matmul_both::run(&d, &xq, &xs, &wq, &ws)
        .unwrap()
        .to_f64_vec();
    for (a, e) in approx.iter().zip(&exact) {
        assert!((a - e).abs() < 0.1, "{a} vs {e}");
    }
}
