//! `tessel run` on kernels added to the registry equals the library call.

use tessel::kernels::activation::fused_gelu_dropout;
use tessel::kernels::attention::{
    block_sparse_attention, flash_attention_lse, Attention, AttentionInputs, FlashOptions,
};
use tessel::kernels::einsum::einsum1;
use tessel::kernels::norm::{layer_norm_no_bias, layer_norm_plain, rms_norm_plain};
use tessel::kernels::quantized::{
    dequantize, quantize, quantize_rows, quantized_matmul, quantized_matmul_both,
};
use tessel::prelude::*;

use super::run_cli;

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
        let want = block_sparse_attention::run(&d, &q, &k, &v, mask.into(), opts).unwrap();
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

/// Option `dropout` runs the attention kernels with the seed of option
/// `seed` as an input: the output is the library's with that seed, and
/// another seed drops other probabilities.
#[test]
fn run_attention_with_dropout() {
    let d = Device::cpu().unwrap();
    let (q, k, v) = (
        data(&[1, 2, 24, 8], 7),
        data(&[1, 1, 24, 8], 8),
        data(&[1, 1, 24, 8], 9),
    );
    let qkv = [("q", &q), ("k", &k), ("v", &v)];
    let opts = FlashOptions::new()
        .causal(true)
        .dropout(0.25)
        .block_sizes(16, 16);
    let causal = Mask::causal(24, 24);
    let kernels = [
        ("flash_attention", Attention::Flash, 1),
        ("flash_attention_lse", Attention::Flash, 2),
        ("attention_reference", Attention::Reference, 1),
        (
            "block_sparse_attention",
            Attention::BlockSparse(causal.into()),
            1,
        ),
    ];
    for (name, attention, outputs) in kernels {
        let run = |seed: &str| {
            let seed = format!("seed={seed}");
            let words = [
                "causal=true",
                "dropout=0.25",
                &seed,
                "block_q=16",
                "block_kv=16",
                "mask=causal",
            ];
            // Only block-sparse attention takes a mask.
            let n = if name == "block_sparse_attention" {
                6
            } else {
                5
            };
            run_cli(name, &qkv, &words[..n], outputs)
        };
        let got = run("7");
        let inputs = AttentionInputs::new().dropout_seed(7);
        let want = attention.run(&d, &q, &k, &v, &inputs, opts).unwrap();
        assert_eq!(got[0], want.out, "{name}");
        if outputs == 2 {
            assert_eq!(got[1], want.lse, "{name}");
        }
        let plain = attention
            .run(&d, &q, &k, &v, &AttentionInputs::new(), opts.dropout(0.0))
            .unwrap();
        assert_ne!(got[0], plain.out, "{name}: dropout must drop something");
        assert_ne!(run("8")[0], got[0], "{name}: another seed, another mask");
    }
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
