//! [`AttentionExtras`]: the optional inputs of the attention kernels.

use tessel::prelude::*;

#[allow(unused_imports)]
use super::options::FlashOptions;

/// Optional inputs of an attention computation, as traced tensors (for
/// calling the kernels inside another kernel; from the host, use
/// [`AttentionInputs`](super::AttentionInputs)).
///
/// Shapes, with `q: [B, Hq, Sq, D]` and `k, v: [B, Hkv, Skv, D]`:
///
/// * `bias`: float `[B or 1, Hq or 1, Sq, Skv]`, added to the scaled (and
///   soft-capped) logits;
/// * `mask`: `pred` of the same shapes as `bias`; `false` hides a key;
/// * `segment_ids`: integer `([B, Sq], [B, Skv])`; a query sees only keys of
///   its own segment;
/// * `dropout_seed`: an integer scalar, required when
///   [`FlashOptions::dropout_rate`] is positive;
/// * `q_offset`: an integer scalar or `[B]` (one per sequence), added to
///   [`FlashOptions::q_offset`] — the key position of query 0 as a traced
///   value, so one compiled program serves every offset (a decoding step
///   against a cache). With it the band's position is unknown while
///   tracing: [`flash_attention`](fn@super::flash_attention) computes and
///   masks every key block instead of skipping the hidden ones (keep the
///   static offset where it is known and speed matters). The block-sparse
///   kernels, whose layouts are static, do not take it.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionExtras {
    /// Additive logit bias.
    pub bias: Option<Tensor>,
    /// Boolean mask (`true`: visible).
    pub mask: Option<Tensor>,
    /// Query and key segment ids.
    pub segment_ids: Option<(Tensor, Tensor)>,
    /// The dropout seed.
    pub dropout_seed: Option<Tensor>,
    /// A traced offset of the queries' positions.
    pub q_offset: Option<Tensor>,
}
