//! Flash and reference attention against plain Rust: shapes, GQA/MQA, windows, bf16, entry points.

use tessel_dsl::{BF16, F32};
use tessel_kernels::attention::*;

use super::{check_flash, close, data, dev, naive, Extra, TOL_BF16, TOL_F32};

#[test]
fn flash_and_reference_match_plain_rust() {
    let dev = dev();
    let o = FlashOptions::new;
    // [B, Hq, Hkv, Sq, Skv, D]
    let cases: Vec<([usize; 6], FlashOptions, &str)> = vec![
        (
            [1, 1, 1, 1, 1, 4],
            o().causal(true).block_sizes(8, 8),
            "sizes 1",
        ),
        (
            [2, 4, 4, 37, 37, 8],
            o().causal(true).block_sizes(16, 16),
            "gqa 1, ragged",
        ),
        (
            [1, 4, 2, 20, 33, 8],
            o().block_sizes(8, 16),
            "gqa 2, Sq < Skv",
        ),
        (
            [1, 8, 2, 29, 17, 16],
            o().causal(true).block_sizes(16, 8),
            "gqa 4, Sq > Skv",
        ),
        (
            [1, 4, 1, 24, 40, 8],
            o().causal(true).q_offset(16).block_sizes(8, 8),
            "mqa, bottom-right causal",
        ),
        (
            [1, 2, 2, 50, 50, 8],
            o().causal(true).window(Some(7), None).block_sizes(16, 16),
            "sliding window",
        ),
        (
            [1, 2, 1, 45, 45, 8],
            o().window(Some(5), Some(3)).block_sizes(8, 8),
            "two-sided window",
        ),
        (
            [1, 2, 2, 64, 64, 8],
            o().causal(true).block_sizes(32, 8),
            "block_q > block_kv",
        ),
        (
            [1, 2, 2, 21, 21, 8],
            o().causal(true).q_offset(-5).block_sizes(8, 8),
            "rows seeing nothing",
        ),
        (
            [1, 1, 1, 1, 37, 8],
            o().causal(true).q_offset(36).block_sizes(8, 16),
            "one query, decoding",
        ),
        (
            [1, 2, 2, 19, 23, 8],
            o().block_sizes(512, 512),
            "blocks larger than the sequences",
        ),
        ([1, 2, 1, 5, 0, 8], o().block_sizes(8, 8), "no keys"),
        ([1, 2, 1, 0, 7, 8], o().block_sizes(8, 8), "no queries"),
    ];
    for (shapes, opts, what) in &cases {
        check_flash(&dev, *shapes, opts, &Extra::default(), what);
    }
}

#[test]
fn bf16_inputs_have_f32_statistics() {
    let dev = dev();
    let (b, hq, hkv, s, d) = (1, 4, 2, 33, 16);
    let q = data(&[b, hq, s, d], BF16, 1);
    let k = data(&[b, hkv, s, d], BF16, 2);
    let v = data(&[b, hkv, s, d], BF16, 3);
    let o = FlashOptions::new().causal(true).block_sizes(16, 8);
    let (want, want_lse) = naive(&q, &k, &v, &o, &Extra::default());
    let (out, lse) = flash_attention_lse::run(&dev, &q, &k, &v, o).unwrap();
    assert_eq!((out.dtype(), lse.dtype()), (BF16, F32));
    close(&out, &want, TOL_BF16, "bf16 flash");
    close(&lse, &want_lse, TOL_BF16, "bf16 flash lse");
    let r = attention_reference::run(&dev, &q, &k, &v, o).unwrap();
    close(&r, &want, TOL_BF16, "bf16 reference");
}

/// The macro kernels agree with the host runner.
#[test]
fn kernel_entry_points() {
    let dev = dev();
    let q = data(&[1, 2, 13, 8], F32, 1);
    let k = data(&[1, 1, 13, 8], F32, 2);
    let o = FlashOptions::new().causal(true).block_sizes(8, 8);
    let (want, want_lse) = naive(&q, &k, &k, &o, &Extra::default());
    close(
        &flash_attention::run(&dev, &q, &k, &k, o).unwrap(),
        &want,
        TOL_F32,
        "flash_attention",
    );
    let (out, lse) = flash_attention_lse::run(&dev, &q, &k, &k, o).unwrap();
    close(&out, &want, TOL_F32, "flash_attention_lse");
    close(&lse, &want_lse, TOL_F32, "flash_attention_lse lse");
    close(
        &attention_reference::run(&dev, &q, &k, &k, o).unwrap(),
        &want,
        TOL_F32,
        "attention_reference",
    );
}
