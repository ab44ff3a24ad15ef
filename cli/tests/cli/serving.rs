//! The serving kernels on the command line: every entry lowers, and
//! `tessel run` equals the library call.

use tessel::kernels::serving::{paged_attention, ragged_paged_attention, ServeOptions};
use tessel::prelude::*;

use super::kernels::run_cli;

/// `tessel lower` arguments for the serving kernels.
pub(super) const LOWER_CASES: &[(&str, &[&str])] = &[
    (
        "decode_attention",
        &[
            "--shape",
            "q=2x4x1x8",
            "--shape",
            "k_cache=2x2x24x8",
            "--shape",
            "v_cache=2x2x24x8",
            "--shape",
            "positions=2:s32",
        ],
    ),
    (
        "paged_attention",
        &[
            "--shape",
            "q=2x4x8",
            "--shape",
            "k_pages=6x4x2x8",
            "--shape",
            "v_pages=6x4x2x8",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "lengths=2:s32",
            "--opt",
            "window=5",
        ],
    ),
    (
        "paged_attention_quantized",
        &[
            "--shape",
            "q=2x4x8",
            "--shape",
            "k_pages=6x4x2x8:s8",
            "--shape",
            "v_pages=6x4x2x8:s8",
            "--shape",
            "k_scales=6x4x2",
            "--shape",
            "v_scales=6x4x2",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "lengths=2:s32",
        ],
    ),
    (
        "ragged_paged_attention",
        &[
            "--shape",
            "q=7x4x8",
            "--shape",
            "k_pages=6x4x2x8",
            "--shape",
            "v_pages=6x4x2x8",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "kv_lens=2:s32",
            "--shape",
            "cu_q_lens=3:s32",
        ],
    ),
    (
        "ragged_paged_attention_quantized",
        &[
            "--shape",
            "q=7x4x8",
            "--shape",
            "k_pages=6x4x2x8:f8e4m3fn",
            "--shape",
            "v_pages=6x4x2x8:f8e4m3fn",
            "--shape",
            "k_scales=6x4x2",
            "--shape",
            "v_scales=6x4x2",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "kv_lens=2:s32",
            "--shape",
            "cu_q_lens=3:s32",
            "--opt",
            "kv_dtype=fp8",
        ],
    ),
    (
        "kv_cache_update",
        &[
            "--shape",
            "k_pages=6x4x2x8",
            "--shape",
            "v_pages=6x4x2x8",
            "--shape",
            "k=3x2x8",
            "--shape",
            "v=3x2x8",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "kv_lens=2:s32",
            "--shape",
            "cu_q_lens=3:s32",
        ],
    ),
    (
        "kv_cache_update_quantized",
        &[
            "--shape",
            "k_pages=6x4x2x8:s8",
            "--shape",
            "v_pages=6x4x2x8:s8",
            "--shape",
            "k_scales=6x4x2",
            "--shape",
            "v_scales=6x4x2",
            "--shape",
            "k=3x2x8",
            "--shape",
            "v=3x2x8",
            "--shape",
            "block_tables=2x3:s32",
            "--shape",
            "kv_lens=2:s32",
            "--shape",
            "cu_q_lens=3:s32",
            "--opt",
            "kv_dtype=int8",
        ],
    ),
];

fn data(shape: &[usize], seed: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), move |i| {
        (((i * 29 + seed * 7) % 19) as f64 - 9.0) / 8.0
    })
}

fn s32(v: &[i32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

#[test]
fn run_paged_and_ragged_attention() {
    let dev = Device::cpu().unwrap();
    let (q, kp, vp) = (
        data(&[2, 4, 8], 1),
        data(&[6, 4, 2, 8], 2),
        data(&[6, 4, 2, 8], 3),
    );
    let tables = s32(&[4, 0, 2, 5, 1, 3], &[2, 3]);
    let lens = s32(&[9, 3], &[2]);
    let got = run_cli(
        "paged_attention",
        &[
            ("q", &q),
            ("k_pages", &kp),
            ("v_pages", &vp),
            ("block_tables", &tables),
            ("lengths", &lens),
        ],
        &["window=4", "soft_cap=2.5"],
        1,
    );
    let want = paged_attention::run(
        &dev,
        &q,
        &kp,
        &vp,
        &tables,
        &lens,
        ServeOptions::new().window(4).soft_cap(2.5),
    )
    .unwrap();
    assert_eq!(got[0].to_f64_vec(), want.to_f64_vec());

    let q = data(&[7, 4, 8], 4);
    let cu = s32(&[0, 5, 6], &[3]);
    let got = run_cli(
        "ragged_paged_attention",
        &[
            ("q", &q),
            ("k_pages", &kp),
            ("v_pages", &vp),
            ("block_tables", &tables),
            ("kv_lens", &lens),
            ("cu_q_lens", &cu),
        ],
        &["block_q=2"],
        1,
    );
    let want = ragged_paged_attention::run(
        &dev,
        &q,
        &kp,
        &vp,
        &tables,
        &lens,
        &cu,
        ServeOptions::new().block_q(2),
    )
    .unwrap();
    assert_eq!(got[0].to_f64_vec(), want.to_f64_vec());
}

#[test]
fn kv_dtype_must_match_the_pages() {
    let mut args = vec!["lower", "paged_attention_quantized"];
    args.extend_from_slice(LOWER_CASES[2].1);
    args.extend_from_slice(&["--opt", "kv_dtype=fp8"]);
    let (code, _, err) = super::tessel(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kv_dtype") && err.contains("s8"), "{err}");
}
