//! Every listed kernel lowers, and `tessel run` on each kernel added to
//! the registry equals the library call.

use std::sync::atomic::{AtomicUsize, Ordering};

use tessel::kernels::activation::fused_gelu_dropout;
use tessel::kernels::attention::{block_sparse_attention, flash_attention_lse, FlashOptions};
use tessel::kernels::einsum::einsum1;
use tessel::kernels::norm::{layer_norm_no_bias, layer_norm_plain, rms_norm_plain};
use tessel::kernels::quantized::{
    dequantize, quantize, quantize_rows, quantized_matmul, quantized_matmul_both,
};
use tessel::prelude::*;

use super::tessel;

/// `tessel lower` arguments for every listed kernel.
pub(super) const LOWER_CASES: &[(&str, &[&str])] = &[
    ("gemm", &["--shape", "a=4x8", "--shape", "b=8x2"]),
    (
        "gemm_bias",
        &[
            "--shape",
            "a=4x8",
            "--shape",
            "b=8x2",
            "--shape",
            "bias=2",
            "--opt",
            "activation=gelu",
        ],
    ),
    (
        "quantized_matmul",
        &[
            "--shape",
            "x=4x8",
            "--shape",
            "w_q=8x3:s8",
            "--shape",
            "w_scales=3",
        ],
    ),
    (
        "quantized_matmul_vjp",
        &[
            "--shape",
            "x=4x8",
            "--shape",
            "w_q=8x3:s8",
            "--shape",
            "w_scales=3",
            "--shape",
            "dout=4x3",
        ],
    ),
    (
        "quantized_matmul_both",
        &[
            "--shape",
            "x_q=4x8:u8",
            "--shape",
            "x_scales=4",
            "--shape",
            "w_q=8x3:u8",
            "--shape",
            "w_scales=3",
            "--opt",
            "q_dtype=fp8",
        ],
    ),
    (
        "quantize",
        &[
            "--shape",
            "x=8x3",
            "--opt",
            "dtype=f8e5m2",
            "--opt",
            "block_k=4",
        ],
    ),
    ("quantize_rows", &["--shape", "x=4x8"]),
    (
        "dequantize",
        &[
            "--shape",
            "q=8x3:s8",
            "--shape",
            "scales=2x3",
            "--opt",
            "block_k=4",
        ],
    ),
    (
        "einsum",
        &[
            "--shape",
            "a=2x3x4",
            "--shape",
            "b=2x4x5",
            "--opt",
            "equation=bij,bjk->bik",
        ],
    ),
    (
        "einsum1",
        &["--shape", "a=2x3x3", "--opt", "equation=bii->b"],
    ),
    (
        "block_sparse",
        &[
            "--shape",
            "dense=16x4",
            "--shape",
            "sparse_values=2x8x8",
            "--shape",
            "indices=2x2:s32",
            "--opt",
            "block_size=8",
        ],
    ),
    (
        "moe",
        &[
            "--shape",
            "x=16x8",
            "--shape",
            "router=8x8",
            "--shape",
            "w1=8x8x16",
            "--shape",
            "w2=8x16x8",
        ],
    ),
    (
        "flash_attention",
        &[
            "--shape",
            "q=1x2x16x8",
            "--shape",
            "k=1x1x16x8",
            "--shape",
            "v=1x1x16x8",
            "--opt",
            "causal=true",
        ],
    ),
    (
        "flash_attention_lse",
        &[
            "--shape",
            "q=1x2x16x8",
            "--shape",
            "k=1x1x16x8",
            "--shape",
            "v=1x1x16x8",
        ],
    ),
    (
        "attention_reference",
        &[
            "--shape",
            "q=1x2x16x8",
            "--shape",
            "k=1x2x16x8",
            "--shape",
            "v=1x2x16x8",
        ],
    ),
    (
        "block_sparse_attention",
        &[
            "--shape",
            "q=1x2x40x8",
            "--shape",
            "k=1x1x40x8",
            "--shape",
            "v=1x1x40x8",
            "--opt",
            "mask=causal&local:8:0|chunked:16",
            "--opt",
            "block_q=16",
            "--opt",
            "block_kv=16",
        ],
    ),
    (
        "rope",
        &[
            "--shape", "x=4x8", "--shape", "cos=16x4", "--shape", "sin=16x4", "--opt", "offset=2",
        ],
    ),
    ("softmax", &["--shape", "x=4x8", "--opt", "axis=0"]),
    ("log_softmax", &["--shape", "x=4x8"]),
    (
        "gelu",
        &["--shape", "x=4x8:bf16", "--opt", "approximate=true"],
    ),
    (
        "fused_gelu_dropout",
        &[
            "--shape",
            "x=4x8:bf16",
            "--opt",
            "rate=0.5",
            "--opt",
            "seed=3",
        ],
    ),
    ("silu", &["--shape", "x=4x8"]),
    ("swiglu", &["--shape", "gate=4x8", "--shape", "up=4x8"]),
    (
        "layer_norm",
        &[
            "--shape", "x=4x8", "--shape", "scale=8", "--shape", "bias=8",
        ],
    ),
    (
        "layer_norm_no_bias",
        &["--shape", "x=4x8", "--shape", "scale=8"],
    ),
    (
        "layer_norm_plain",
        &["--shape", "x=4x8", "--opt", "eps=0.1"],
    ),
    ("rms_norm", &["--shape", "x=4x8", "--shape", "scale=8"]),
    ("rms_norm_plain", &["--shape", "x=4x8:f16"]),
    (
        "layer_norm_vjp",
        &[
            "--shape", "x=4x8", "--shape", "scale=8", "--shape", "bias=8", "--shape", "dout=4x8",
        ],
    ),
    (
        "rms_norm_vjp",
        &[
            "--shape",
            "x=4x8:bf16",
            "--shape",
            "scale=8",
            "--shape",
            "dout=4x8:bf16",
        ],
    ),
    (
        "rope_vjp",
        &[
            "--shape",
            "x=2x4x8",
            "--shape",
            "cos=16x4",
            "--shape",
            "sin=16x4",
            "--shape",
            "dout=2x4x8",
            "--opt",
            "offset=3",
        ],
    ),
    (
        "gemm_vjp",
        &[
            "--shape", "a=4x8", "--shape", "b=8x2", "--shape", "dout=4x2",
        ],
    ),
    (
        "swiglu_vjp",
        &[
            "--shape", "gate=4x8", "--shape", "up=4x8", "--shape", "dout=4x8",
        ],
    ),
    ("softmax_vjp", &["--shape", "x=4x8", "--shape", "dout=4x8"]),
    (
        "gelu_vjp",
        &[
            "--shape",
            "x=4x8",
            "--shape",
            "dout=4x8",
            "--opt",
            "approximate=true",
        ],
    ),
    ("silu_vjp", &["--shape", "x=4x8", "--shape", "dout=4x8"]),
    (
        "fused_gelu_dropout_vjp",
        &[
            "--shape", "x=4x8", "--shape", "dout=4x8", "--opt", "rate=0.5", "--opt", "seed=3",
        ],
    ),
    (
        "softmax_cross_entropy",
        &["--shape", "logits=4x8", "--shape", "labels=4:s32"],
    ),
    (
        "softmax_cross_entropy_vjp",
        &[
            "--shape",
            "logits=4x8",
            "--shape",
            "labels=4:s32",
            "--shape",
            "dout=scalar",
        ],
    ),
    (
        "moe_vjp",
        &[
            "--shape",
            "x=16x8",
            "--shape",
            "router=8x8",
            "--shape",
            "w1=8x8x16",
            "--shape",
            "w2=8x16x8",
            "--shape",
            "dout=16x8",
        ],
    ),
    (
        "flash_attention_vjp",
        &[
            "--shape",
            "q=1x2x20x8",
            "--shape",
            "k=1x1x20x8",
            "--shape",
            "v=1x1x20x8",
            "--shape",
            "dout=1x2x20x8",
            "--opt",
            "causal=true",
            "--opt",
            "block_q=8",
            "--opt",
            "block_kv=8",
        ],
    ),
    (
        "flash_attention_lse_vjp",
        &[
            "--shape",
            "q=1x2x16x8",
            "--shape",
            "k=1x2x16x8",
            "--shape",
            "v=1x2x16x8",
            "--shape",
            "dout=1x2x16x8",
            "--shape",
            "dlse=1x2x16",
        ],
    ),
    (
        "block_sparse_attention_vjp",
        &[
            "--shape",
            "q=1x2x40x8",
            "--shape",
            "k=1x1x40x8",
            "--shape",
            "v=1x1x40x8",
            "--shape",
            "dout=1x2x40x8",
            "--opt",
            "mask=causal&local:8:0",
            "--opt",
            "block_q=16",
            "--opt",
            "block_kv=16",
        ],
    ),
];

#[test]
fn every_listed_kernel_lowers() {
    let (code, list, _) = tessel(&["list"]);
    assert_eq!(code, 0);
    let listed: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_once('(').map(|(name, _)| name))
        .collect();
    let all: Vec<_> = LOWER_CASES
        .iter()
        .chain(super::serving::LOWER_CASES)
        .collect();
    let cased: Vec<&str> = all.iter().map(|c| c.0).collect();
    let (mut a, mut b) = (listed.clone(), cased.clone());
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "every listed kernel needs a lowering case");
    for (name, case) in all {
        let mut args = vec!["lower", name];
        args.extend_from_slice(case);
        let (code, out, err) = tessel(&args);
        assert_eq!(code, 0, "{name} {case:?}: {err}");
        assert!(out.contains("func.func public @main"), "{name}");
    }
}

/// Runs `kernel` through `tessel run` on `inputs` (written as `.npy`) with
/// `--opt` settings `opts`, and reads back its `outputs` outputs.
pub(super) fn run_cli(
    kernel: &str,
    inputs: &[(&str, &HostTensor)],
    opts: &[&str],
    outputs: usize,
) -> Vec<HostTensor> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tessel-cli-{}-{kernel}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut words = vec!["run".to_string(), kernel.to_string()];
    for (name, t) in inputs {
        let p = dir.join(format!("{name}.npy"));
        t.write_npy(&p).unwrap();
        words.extend(["--arg".into(), format!("{name}={}", p.display())]);
    }
    for o in opts {
        words.extend(["--opt".into(), o.to_string()]);
    }
    let outs: Vec<_> = (0..outputs)
        .map(|i| dir.join(format!("out{i}.npy")))
        .collect();
    for p in &outs {
        words.extend(["--out".into(), p.display().to_string()]);
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let (code, out, err) = tessel(&words);
    assert_eq!(code, 0, "{kernel}: {err}");
    assert!(out.contains("ms cached"), "{out}");
    let got = outs
        .iter()
        .map(|p| HostTensor::read_npy(p).unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    got
}

fn data(shape: &[usize], seed: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), move |i| {
        (((i * 37 + seed * 11) % 23) as f64 - 11.0) / 8.0
    })
}

#[test]
fn run_block_sparse_attention_with_mask_specs() {
    let d = Device::cpu().unwrap();
    let (q, k, v) = (
        data(&[1, 2, 40, 8], 1),
        data(&[1, 1, 40, 8], 2),
        data(&[1, 1, 40, 8], 3),
    );
    let opts = FlashOptions::new().block_sizes(16, 16);
    let (c, l, ch) = (
        Mask::causal(40, 40),
        Mask::local(40, 40, Some(8), Some(0)),
        Mask::chunked_causal(40, 40, 16).unwrap(),
    );
    let cases = [
        ("causal&local:8:0", c.and(&l).unwrap()),
        (
            "chunked:16|local:none:2",
            ch.or(&Mask::local(40, 40, None, Some(2))).unwrap(),
        ),
        ("causal:-1", Mask::causal_offset(40, 40, -1)),
        ("full", Mask::full(40, 40)),
    ];
    let mut seen: Vec<HostTensor> = Vec::new();
    for (spec, mask) in cases {
        let mask_opt = format!("mask={spec}");
        let got = run_cli(
            "block_sparse_attention",
            &[("q", &q), ("k", &k), ("v", &v)],
            &[&mask_opt, "block_q=16", "block_kv=16"],
            1,
        );
        let want = block_sparse_attention::run(&d, &q, &k, &v, mask.into(), opts.clone()).unwrap();
        assert_eq!(got[0], want, "{spec}");
        assert!(!seen.contains(&want), "{spec}: the masks must differ");
        seen.push(want);
    }
}

#[test]
fn run_flash_attention_lse_writes_both_outputs() {
    let d = Device::cpu().unwrap();
    let (q, k, v) = (
        data(&[1, 2, 24, 8], 4),
        data(&[1, 1, 24, 8], 5),
        data(&[1, 1, 24, 8], 6),
    );
    let got = run_cli(
        "flash_attention_lse",
        &[("q", &q), ("k", &k), ("v", &v)],
        &["causal=true", "block_q=16", "block_kv=16"],
        2,
    );
    let opts = FlashOptions::new().causal(true).block_sizes(16, 16);
    let (out, lse) = flash_attention_lse::run(&d, &q, &k, &v, opts).unwrap();
    assert_eq!((&got[0], &got[1]), (&out, &lse));
    // The window, soft-cap and scale options.
    let got = run_cli(
        "flash_attention_lse",
        &[("q", &q), ("k", &k), ("v", &v)],
        &[
            "window=5:none",
            "soft_cap=2.5",
            "scale=0.3",
            "block_q=16",
            "block_kv=16",
        ],
        2,
    );
    let opts = FlashOptions::new()
        .window(Some(5), None)
        .soft_cap(2.5)
        .sm_scale(0.3)
        .block_sizes(16, 16);
    let (out, lse) = flash_attention_lse::run(&d, &q, &k, &v, opts).unwrap();
    assert_eq!((&got[0], &got[1]), (&out, &lse));
}

#[test]
fn run_fused_gelu_dropout_and_einsum1() {
    let d = Device::cpu().unwrap();
    let x = data(&[4, 64], 5);
    let got = run_cli(
        "fused_gelu_dropout",
        &[("x", &x)],
        &["rate=0.25", "seed=7"],
        1,
    );
    let seed = HostTensor::scalar(7u32);
    let want = fused_gelu_dropout::run(&d, &x, true, 0.25, &seed, false).unwrap();
    assert_eq!(got[0], want);
    assert!(got[0].to_vec::<f32>().unwrap().contains(&0.0));
    let eval = run_cli("fused_gelu_dropout", &[("x", &x)], &["training=false"], 1);
    assert_eq!(
        eval[0],
        fused_gelu_dropout::run(&d, &x, false, 0.1, &seed, false).unwrap()
    );
    let a = data(&[2, 3, 4], 6);
    let got = run_cli("einsum1", &[("a", &a)], &["equation=ijk->kj"], 1);
    assert_eq!(got[0], einsum1::run(&d, "ijk->kj", &a).unwrap());
}

#[test]
fn run_quantize_dequantize_round_trip() {
    let d = Device::cpu().unwrap();
    let w = data(&[6, 3], 7);
    // fp8 per-block: q is written as ml_dtypes writes float8_e4m3fn and
    // read back as fp8 (q_dtype=fp8 also accepts it).
    let qs = run_cli("quantize", &[("x", &w)], &["dtype=fp8", "block_k=4"], 2);
    let (q, s) = quantize::run(&d, &w, F8E4M3FN, Some(4)).unwrap();
    assert_eq!(qs[0], q);
    assert_eq!(qs[1], s);
    // The uint8 bit-pattern form, reinterpreted by q_dtype.
    let bits = qs[0].clone().bitcast(U8).unwrap();
    let back = run_cli(
        "dequantize",
        &[("q", &bits), ("scales", &qs[1])],
        &["block_k=4", "q_dtype=fp8"],
        1,
    );
    assert_eq!(back[0], dequantize::run(&d, &q, &s, Some(4)).unwrap());
    // The fp8 weights file straight into quantized_matmul.
    let xin = data(&[2, 6], 11);
    let y = run_cli(
        "quantized_matmul",
        &[("x", &xin), ("w_q", &qs[0]), ("w_scales", &qs[1])],
        &["block_k=4"],
        1,
    );
    assert_eq!(
        y[0],
        quantized_matmul::run(&d, &xin, &q, &s, Some(4)).unwrap()
    );
    // int8 per-row and per-column, then the product of both.
    let x = data(&[5, 6], 8);
    let xq = run_cli("quantize_rows", &[("x", &x)], &[], 2);
    let (want_q, want_s) = quantize_rows::run(&d, &x, S8).unwrap();
    assert_eq!((&xq[0], &xq[1]), (&want_q, &want_s));
    let wq = run_cli("quantize", &[("x", &w)], &[], 2);
    let y = run_cli(
        "quantized_matmul_both",
        &[
            ("x_q", &xq[0]),
            ("x_scales", &xq[1]),
            ("w_q", &wq[0]),
            ("w_scales", &wq[1]),
        ],
        &[],
        1,
    );
    let want = quantized_matmul_both::run(&d, &xq[0], &xq[1], &wq[0], &wq[1]).unwrap();
    assert_eq!(y[0], want);
}

#[test]
fn run_plain_norms() {
    let d = Device::cpu().unwrap();
    let (x, scale) = (data(&[3, 8], 9), data(&[8], 10));
    let got = run_cli(
        "layer_norm_no_bias",
        &[("x", &x), ("scale", &scale)],
        &["eps=0.01"],
        1,
    );
    assert_eq!(
        got[0],
        layer_norm_no_bias::run(&d, &x, &scale, 0.01).unwrap()
    );
    let got = run_cli("layer_norm_plain", &[("x", &x)], &[], 1);
    assert_eq!(got[0], layer_norm_plain::run(&d, &x, 1e-5).unwrap());
    let got = run_cli("rms_norm_plain", &[("x", &x)], &["eps=0.5"], 1);
    assert_eq!(got[0], rms_norm_plain::run(&d, &x, 0.5).unwrap());
}
