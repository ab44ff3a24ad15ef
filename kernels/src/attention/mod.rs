//! Attention kernels: the plain reference, flash attention and splash-style
//! block-sparse attention.
//!
//! | kernel | what |
//! |---|---|
//! | [`attention_reference`](fn@attention_reference) | `softmax(Q·Kᵀ·scale)·V` on whole tensors (the tests' reference, the benchmarks' baseline) |
//! | [`flash_attention`](fn@flash_attention), [`flash_attention_lse`](fn@flash_attention_lse) | online softmax over key blocks; the blocks the causal/window band hides are never computed |
//! | [`block_sparse_attention`](fn@block_sparse_attention) | driven by a [`Mask`]/[`MultiHeadMask`](tessel::tile::MultiHeadMask) with a static block layout (empty blocks skipped while tracing) |
//! | [`block_sparse_attention_dynamic`](fn@block_sparse_attention_dynamic) | the same with the layout's [`MaskInfo`](tessel::tile::MaskInfo) tables as inputs (one program per table width) |
//!
//! All take `q: [B, Hq, Sq, D]`, `k: [B, Hkv, Skv, D]`, `v: [B, Hkv, Skv, Dv]`
//! (`Hq` a multiple of `Hkv`: grouped-query and multi-query attention) and a
//! [`FlashOptions`] (causal, window, scale, soft-cap, dropout rate, block
//! sizes). The optional inputs — an additive bias, a boolean mask, segment
//! ids, the dropout seed — are [`AttentionExtras`] inside a kernel (the
//! `*_with` functions) and [`AttentionInputs`] from the host, which also
//! returns the logsumexp.

mod backward;
mod block_sparse;
mod checks;
mod flash;
mod host_inputs;
mod online_softmax;
mod optional_inputs;
mod options;
mod query_loop;
mod reference;
mod ring;
pub(crate) mod tiles;

pub use self::backward::flash_attention_backward_with;
pub use self::block_sparse::{
    block_sparse_attention_dynamic_with, block_sparse_attention_with, AttentionMask, DynamicMask,
};
pub use self::flash::flash_attention_with;
pub use self::host_inputs::{Attention, AttentionInputs, AttentionOutput};
pub use self::optional_inputs::AttentionExtras;
pub use self::options::FlashOptions;
pub use self::reference::attention_reference_with;
pub use self::ring::{ring_attention, Ring};

use tessel::prelude::*;

/// Attention on whole tensors: `softmax(Q·Kᵀ·scale)·V` with the band of
/// `opts` (causal, window), its soft-cap and scale, every `Sq × Skv`
/// intermediate materialized. The baseline the other kernels are tested and
/// measured against; see [`attention_reference_with`].
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{attention_reference, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let q = HostTensor::from_fn(TensorSpec::new([1, 2, 5, 4], F32), |i| (i % 7) as f64 / 7.0);
/// let kv = HostTensor::from_fn(TensorSpec::new([1, 1, 5, 4], F32), |i| (i % 3) as f64 / 3.0);
/// let out = attention_reference::run(&dev, &q, &kv, &kv, FlashOptions::new().causal(true))?;
/// assert_eq!(out.shape(), &[1, 2, 5, 4]);
/// // The first query sees only the first key: its output is that value row.
/// assert_eq!(out.to_vec::<f32>()?[..4], kv.to_vec::<f32>()?[..4]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
pub fn attention_reference(q: Tensor, k: Tensor, v: Tensor, opts: FlashOptions) -> Tensor {
    attention_reference_with(q, k, v, &AttentionExtras::default(), opts).0
}

/// Flash attention: for each block of `opts.block_q` queries, an online
/// softmax over blocks of `opts.block_kv` keys (running max and sum and
/// the accumulator in f32, rescaled at each block). Key blocks that the
/// causal/window band hides from a query block are skipped while tracing,
/// and only the blocks it covers partially are masked element-wise; no
/// intermediate is larger than one block of logits. Sequence lengths need
/// not be multiples of the block sizes. See [`flash_attention_with`] for
/// the conventions and [`AttentionInputs`] for bias, masks, segment ids,
/// dropout and the logsumexp.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{attention_reference, flash_attention, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// // 4 query heads sharing 2 key/value heads, 37 positions, blocks of 16.
/// let q = HostTensor::from_fn(TensorSpec::new([1, 4, 37, 8], F32), |i| ((i * 7) % 11) as f64 / 11.0);
/// let k = HostTensor::from_fn(TensorSpec::new([1, 2, 37, 8], F32), |i| ((i * 5) % 13) as f64 / 13.0);
/// let v = HostTensor::from_fn(TensorSpec::new([1, 2, 37, 8], F32), |i| ((i * 3) % 17) as f64 / 17.0);
/// let options = FlashOptions::new().causal(true).block_sizes(16, 16);
/// let fast = flash_attention::run(&dev, &q, &k, &v, options.clone())?;
/// let slow = attention_reference::run(&dev, &q, &k, &v, options)?;
/// for (a, b) in fast.to_vec::<f32>()?.iter().zip(slow.to_vec::<f32>()?) {
///     assert!((a - b).abs() < 1e-5);
/// }
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
pub fn flash_attention(q: Tensor, k: Tensor, v: Tensor, opts: FlashOptions) -> Tensor {
    flash_attention_with(q, k, v, &AttentionExtras::default(), opts).0
}

/// [`flash_attention`](fn@flash_attention) returning the logsumexp `[B, Hq, Sq]` (f32) of each
/// query's logits as a second output (`-inf` for a query that sees no key).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{flash_attention_lse, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![0.0f32; 2 * 4], [1, 1, 2, 4])?;
/// let (out, lse) = flash_attention_lse::run(&dev, &x, &x, &x, FlashOptions::new().causal(true))?;
/// assert_eq!(out.shape(), &[1, 1, 2, 4]);
/// // Equal logits: row 0 sees 1 key, row 1 sees 2.
/// let lse = lse.to_vec::<f32>()?;
/// assert!((lse[0] - 0.0).abs() < 1e-6 && (lse[1] - 2f32.ln()).abs() < 1e-6);
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
pub fn flash_attention_lse(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    opts: FlashOptions,
) -> (Tensor, Tensor) {
    flash_attention_with(q, k, v, &AttentionExtras::default(), opts)
}

/// The FlashAttention-2 backward pass alone: `(dq, dk, dv)` from the
/// inputs, the output and logsumexp of
/// [`flash_attention_lse`](fn@flash_attention_lse), and the cotangents
/// `dout` and `dlse`, without running the forward again (Pallas'
/// `_flash_attention_bwd`). See
/// [`flash_attention_backward_with`](fn@flash_attention_backward_with);
/// within a differentiated kernel the same backward runs by itself.
#[tpu_kernel(precision = "highest")]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    dlse: Tensor,
    opts: FlashOptions,
) -> (Tensor, Tensor, Tensor) {
    flash_attention_backward_with(q, k, v, out, lse, dout, dlse, opts)
}

/// Splash-style block-sparse attention driven by `mask` (one [`Mask`] for
/// every head or a [`MultiHeadMask`](tessel::tile::MultiHeadMask) with one per query head), and-ed with
/// the band of `opts`. The mask's block layout is static: empty blocks
/// are skipped while tracing, full ones are not masked, partial ones get the
/// mask's element mask. Equal to [`attention_reference`](fn@attention_reference) with the same dense
/// mask. See [`block_sparse_attention_with`].
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{block_sparse_attention, AttentionMask, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_fn(TensorSpec::new([1, 2, 40, 8], F32), |i| (i % 5) as f64 / 5.0);
/// // Llama-4-style chunked causal attention in chunks of 16.
/// let mask = AttentionMask::from(Mask::chunked_causal(40, 40, 16)?);
/// let out = block_sparse_attention::run(&dev, &x, &x, &x, mask, FlashOptions::new().block_sizes(16, 16))?;
/// assert_eq!(out.shape(), &[1, 2, 40, 8]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
pub fn block_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    opts: FlashOptions,
) -> Tensor {
    block_sparse_attention_with(q, k, v, &mask, &AttentionExtras::default(), opts).0
}

/// Block-sparse attention with a *dynamic* block layout: the
/// [`DynamicMask`] tables (`num_nonempty` `s32[nq]`, `kv_block_ids` and
/// `block_kinds` `s32[nq, width]`, from [`MaskInfo`](tessel::tile::MaskInfo))
/// and the mask's bits `pred[1 or Hq, Sq, Skv]` are inputs, read inside one
/// traced loop over the query blocks and one over each block's listed key
/// blocks, so one compiled program serves every mask with the same table
/// width. Only blocks listed as partial read their bits. The block sizes
/// of `opts` must be those the tables were made with.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{block_sparse_attention_dynamic, DynamicMask, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_fn(TensorSpec::new([1, 1, 24, 8], F32), |i| (i % 5) as f64 / 5.0);
/// let options = FlashOptions::new().block_sizes(8, 8);
/// let t = DynamicMask::new(&Mask::local(24, 24, Some(4), Some(0)).into(), options)?;
/// let out = block_sparse_attention_dynamic::run(
///     &dev, &x, &x, &x, &t.bits, &t.num_nonempty, &t.kv_block_ids, &t.block_kinds, options,
/// )?;
/// assert_eq!(out.shape(), &[1, 1, 24, 8]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
#[tpu_kernel(precision = "highest")]
pub fn block_sparse_attention_dynamic(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bits: Tensor,
    num_nonempty: Tensor,
    kv_block_ids: Tensor,
    block_kinds: Tensor,
    opts: FlashOptions,
) -> Tensor {
    let tables = [bits, num_nonempty, kv_block_ids, block_kinds];
    block_sparse_attention_dynamic_with(q, k, v, tables, &AttentionExtras::default(), opts).0
}
