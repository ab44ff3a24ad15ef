//! Every listed kernel lowers, and `tessel run` on each kernel added to
//! the registry equals the library call.
//!
//! This file holds the lowering cases (also used by `bad_input`), the
//! lowering test and `run_cli` (also used by `serving`); the `tessel run`
//! tests are in `run`.

use std::sync::atomic::{AtomicUsize, Ordering};

use tessel::prelude::*;

use super::tessel;

mod run;

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
            "--opt",
            "dropout=0.1",
            "--opt",
            "seed=5",
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
