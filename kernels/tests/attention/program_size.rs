//! Flash attention's forward and backward are each one loop over their
//! whole query blocks: the programs do not grow with the sequence (so
//! neither do their trace and compile times), while the block skipping stays
//! exact (the results are checked against plain Rust in
//! `flash_and_reference_match_plain_rust`, the gradients in
//! `attention_grads.rs`).

use tessel_dsl::{TensorSpec, F32};
use tessel_kernels::attention::*;
use tessel_kernels::grads::flash_attention_vjp;

/// The number of matmuls in the StableHLO of causal flash attention over
/// `s` positions (blocks of 16, `ragged` extra rows and keys).
fn dots(s: usize, options: FlashOptions) -> usize {
    let spec = TensorSpec::new(vec![1, 2, s, 8], F32);
    let text = flash_attention::lower(&spec, &spec, &spec, options).expect("lowers");
    text.matches("stablehlo.dot_general").count()
}

#[test]
fn the_forward_program_does_not_grow_with_the_sequence() {
    let causal = FlashOptions::new().causal(true).block_sizes(16, 16);
    let small = dots(64, causal);
    assert!(small > 0);
    assert_eq!(dots(1024, causal), small, "causal, 4 vs 64 query blocks");
    // A ragged last block (of queries and of keys) adds a fixed amount.
    let ragged = dots(64 + 5, causal);
    assert_eq!(dots(1024 + 5, causal), ragged);
    // A sliding window: the same.
    let window = FlashOptions::new()
        .causal(true)
        .window(Some(40), None)
        .block_sizes(16, 16);
    assert_eq!(dots(1024, window), dots(128, window));
}

#[test]
fn the_backward_program_does_not_grow_with_the_sequence() {
    let dots = |s: usize| {
        let spec = TensorSpec::new(vec![1, 2, s, 8], F32);
        let causal = FlashOptions::new().causal(true).block_sizes(16, 16);
        flash_attention_vjp::lower(&spec, &spec, &spec, &spec, causal)
            .expect("lowers")
            .matches("stablehlo.dot_general")
            .count()
    };
    assert_eq!(dots(1024 + 3), dots(64 + 3));
}
