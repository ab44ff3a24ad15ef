//! Serving: attention over KV caches with traced lengths, so that one
//! compiled program serves every decoding step of a batch shape.
//!
//! | kernel | what |
//! |---|---|
//! | [`decode_attention`](fn@decode_attention) | the newest token(s) of each sequence against a contiguous cache `[B, Hkv, S_max, D]` |
//! | [`cache_update`](fn@cache_update) | writes new tokens into a contiguous cache at traced positions (donated) |
//! | [`paged_attention`](fn@paged_attention) | one query per sequence against a paged cache, visiting only the pages its block table lists |
//! | [`ragged_paged_attention`](fn@ragged_paged_attention) | a mixed batch of prefill and decode sequences, packed, against a paged cache |
//! | [`kv_cache_update`](fn@kv_cache_update) | writes a ragged batch's new keys and values into their pages' slots (donated) |
//! | `*_quantized` | the same over int8 or fp8 (e4m3) pages with per-token, per-head f32 scales |
//!
//! A paged cache is a pool of pages `[num_pages, page_size, Hkv, D]` for
//! keys and one for values, shared by every sequence; `block_tables: s32
//! [B, max_pages]` lists each sequence's pages in order and `s32 [B]`
//! lengths count its keys. [`PagePool`] hands out pages and builds the
//! tables on the host; [`Buckets`] rounds batch sizes and page counts up
//! so that a server compiles a handful of programs, not one per request
//! mix.
//!
//! All lengths and positions are traced: a program is compiled once per
//! shape (batch bucket, table width, pool size) and options, whatever the
//! lengths. Attention is causal, with GQA/MQA (`Hq` a multiple of `Hkv`),
//! an optional sliding window and logit soft-cap ([`ServeOptions`]).
//!
//! ```
//! # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
//! use tessel::kernels::serving::{paged_attention, PagePool, ServeOptions};
//! use tessel::prelude::*;
//! let dev = Device::cpu()?;
//! // A pool of 8 pages of 4 tokens, 1 key/value head of dimension 2.
//! let mut pool = PagePool::new(8, 4);
//! pool.reserve(0, 6)?; // sequence 0: 6 tokens (2 pages)
//! let tables = pool.block_tables(&[0], 2)?;
//! let k = HostTensor::from_fn(TensorSpec::new([8, 4, 1, 2], F32), |i| (i % 3) as f64);
//! let v = HostTensor::from_fn(TensorSpec::new([8, 4, 1, 2], F32), |i| (i % 5) as f64);
//! let q = HostTensor::from_vec(vec![0.5f32, -0.5, 1.0, 0.0], [1, 2, 2])?; // 2 query heads
//! let lengths = HostTensor::from_vec(vec![6i32], [1])?;
//! let out = paged_attention::run(&dev, &q, &k, &v, &tables, &lengths, ServeOptions::new())?;
//! assert_eq!(out.shape(), &[1, 2, 2]);
//! # Ok::<(), tessel::Error>(())
//! ```

mod batch;
mod checks;
mod decode;
mod dense;
mod engine;
pub(crate) mod metadata;
mod options;
mod paged;
mod pool;
mod prefill;
mod source;
mod two_pass;
mod update;

pub use self::batch::RaggedBatch;
pub use self::checks::PagedKv;
pub use self::decode::decode_attention_with;
pub use self::options::{ServeOptions, AUTO_PAGED_KEYS, DEFAULT_DENSE_BYTES, DEFAULT_LOGITS_BYTES};
pub use self::paged::{paged_attention_with, ragged_paged_attention_with};
pub use self::pool::{Buckets, PagePool};
pub use self::prefill::prefill_attention;
pub use self::update::{cache_update_with, kv_cache_update_with, quantize_tokens, token_slots};

use tessel::prelude::*;

/// Decode attention over a contiguous cache: `q: [B, Hq, Sq, D]` (the
/// newest `Sq` tokens of each sequence), caches `[B, Hkv, S_max, D]`,
/// `positions: s32 [B]` (where each sequence's first new token sits: the
/// positions [`cache_update`](fn@cache_update) wrote it at). See
/// [`decode_attention_with`].
#[tpu_kernel(precision = "highest")]
pub fn decode_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    opts: ServeOptions,
) -> Tensor {
    decode_attention_with(q, k_cache, v_cache, positions, opts)
}

/// Writes `k`, `v: [B, Hkv, T, D]` into the contiguous caches at
/// `positions: s32 [B]`, in place (the caches are donated: after a call
/// the buffers passed in are consumed). See [`cache_update_with`].
#[tpu_kernel(donate(k_cache, v_cache))]
pub fn cache_update(
    k_cache: Tensor,
    v_cache: Tensor,
    k: Tensor,
    v: Tensor,
    positions: Tensor,
) -> (Tensor, Tensor) {
    cache_update_with(k_cache, v_cache, k, v, positions)
}

/// Decode attention over a paged cache: `q: [B, Hq, D]`, pages
/// `[P, page, Hkv, D]`, `block_tables: s32 [B, M]`, `lengths: s32 [B]`;
/// returns `[B, Hq, Dv]`. See [`paged_attention_with`].
#[tpu_kernel(precision = "highest")]
pub fn paged_attention(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_tables: Tensor,
    lengths: Tensor,
    opts: ServeOptions,
) -> Tensor {
    paged_attention_with(
        q,
        &PagedKv::new(k_pages, v_pages),
        block_tables,
        lengths,
        opts,
    )
}

/// [`paged_attention`](fn@paged_attention) over int8 or fp8 pages with
/// their f32 scales `[P, page, Hkv]`, dequantized inside the kernel (the
/// key scales multiply the logits, the value scales the probabilities).
#[tpu_kernel(precision = "highest")]
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_quantized(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    k_scales: Tensor,
    v_scales: Tensor,
    block_tables: Tensor,
    lengths: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let kv = PagedKv::quantized(k_pages, v_pages, k_scales, v_scales);
    paged_attention_with(q, &kv, block_tables, lengths, opts)
}

/// Attention of a packed ragged batch over a paged cache: `q: [T, Hq, D]`,
/// sequence `b`'s queries rows `cu_q_lens[b] .. cu_q_lens[b + 1]`, its
/// last query at position `kv_lens[b] - 1`; returns `[T, Hq, Dv]`. See
/// [`ragged_paged_attention_with`].
#[tpu_kernel(precision = "highest")]
pub fn ragged_paged_attention(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let kv = PagedKv::new(k_pages, v_pages);
    ragged_paged_attention_with(q, &kv, block_tables, kv_lens, cu_q_lens, opts)
}

/// [`ragged_paged_attention`](fn@ragged_paged_attention) over int8 or fp8
/// pages with their f32 scales `[P, page, Hkv]`.
#[tpu_kernel(precision = "highest")]
#[allow(clippy::too_many_arguments)]
pub fn ragged_paged_attention_quantized(
    q: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    k_scales: Tensor,
    v_scales: Tensor,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let kv = PagedKv::quantized(k_pages, v_pages, k_scales, v_scales);
    ragged_paged_attention_with(q, &kv, block_tables, kv_lens, cu_q_lens, opts)
}

/// Writes a packed ragged batch's new keys and values `[T, Hkv, D]` into
/// their pages' slots (sequence `b`'s rows `cu_q_lens[b] .. cu_q_lens[b +
/// 1]`, the last at position `kv_lens[b] - 1`), in place: the pages are
/// donated. Returns the pages. See [`kv_cache_update_with`].
#[tpu_kernel(donate(k_pages, v_pages))]
pub fn kv_cache_update(
    k_pages: Tensor,
    v_pages: Tensor,
    k: Tensor,
    v: Tensor,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
) -> (Tensor, Tensor) {
    let kv = PagedKv::new(k_pages, v_pages);
    let kv = kv_cache_update_with(&kv, k, v, block_tables, kv_lens, cu_q_lens);
    (kv.k_pages, kv.v_pages)
}

/// [`kv_cache_update`](fn@kv_cache_update) into int8 or fp8 pages: the
/// new tokens are quantized per token and head (`scale = max|x| / qmax`)
/// and their scales written beside them. Returns the pages and scales,
/// all four donated.
#[tpu_kernel(donate(k_pages, v_pages, k_scales, v_scales))]
#[allow(clippy::too_many_arguments)]
pub fn kv_cache_update_quantized(
    k_pages: Tensor,
    v_pages: Tensor,
    k_scales: Tensor,
    v_scales: Tensor,
    k: Tensor,
    v: Tensor,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
) -> (Tensor, Tensor, Tensor, Tensor) {
    let kv = PagedKv::quantized(k_pages, v_pages, k_scales, v_scales);
    let kv = kv_cache_update_with(&kv, k, v, block_tables, kv_lens, cu_q_lens);
    let (ks, vs) = kv.scales.unwrap_or((k_scales, v_scales));
    (kv.k_pages, kv.v_pages, ks, vs)
}
