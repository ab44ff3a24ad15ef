//! Too many unrolled query blocks is an error; the looped band runs past that limit.

use tessel_dsl::tile::Mask;
use tessel_dsl::{TensorSpec, F32};
use tessel_kernels::attention::*;

use super::{check_flash, dev, Extra};

/// A sequence that would unroll too many query blocks is a kernel error at
/// trace time, not a program that grows without end; a band at a static
/// offset loops over its query blocks, so only the pairs its plan visits
/// while tracing are bounded.
#[test]
fn too_many_query_blocks_is_an_error() {
    let s = 1usize << 22;
    let spec = TensorSpec::new([1, 1, s, 8], F32);
    let o = FlashOptions::new().causal(true).block_sizes(512, 512);
    let mask = AttentionMask::from(Mask::causal(s, s));
    let err = block_sparse_attention::lower(&spec, &spec, &spec, mask, o).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert!(
        k.message.contains("8192 query blocks") && k.message.contains("unrolled"),
        "{}",
        k.message
    );
    // 32768² pairs: too many for the looped plan.
    let big = TensorSpec::new([1, 1, s << 2, 8], F32);
    let err = flash_attention::lower(&big, &big, &big, o).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert!(
        k.message.contains("32768 query blocks") && k.message.contains("pairs"),
        "{}",
        k.message
    );
    // 8192 query blocks of a causal band, 16 key blocks: one loop.
    let q = TensorSpec::new([1, 1, 1 << 16, 8], F32);
    let o = FlashOptions::new().causal(true).block_sizes(8, 4096);
    flash_attention::lower(&q, &q, &q, o)
        .expect("a looped band is not capped at 4096 query blocks");
}

/// More query blocks than the unrolled kernels allow, through the looped
/// band, against the plain-Rust reference.
#[test]
fn looped_band_runs_past_the_unroll_limit() {
    let dev = dev();
    let o = FlashOptions::new;
    for (opts, what) in [
        (o().block_sizes(8, 8), "full, 4097 query blocks"),
        (
            o().causal(true).block_sizes(8, 8),
            "causal, 4097 query blocks",
        ),
    ] {
        check_flash(
            &dev,
            [1, 1, 1, 32_780, 19, 4],
            &opts,
            &Extra::default(),
            what,
        );
    }
}
