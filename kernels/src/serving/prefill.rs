//! [`prefill_attention`]: the attention of a fresh prefill, where no
//! sequence has keys cached before the step, as one flash attention over
//! the packed tokens with the sequences as segments.

use tessel::prelude::*;

use super::batch::{token_sequences, RaggedBatch};
use super::metadata::{element, MetadataChecks};
use super::options::ServeOptions;
use crate::attention::{flash_attention_with, AttentionExtras, FlashOptions};

/// Causal attention of a ragged batch's new tokens among themselves:
/// `q: [T, Hq, D]`, `k: [T, Hkv, D]` and `v: [T, Hkv, Dv]` packed as `batch`
/// packs its tokens, each sequence's queries seeing its own keys up to their
/// position (and within `opts.window`); returns `[T, Hq, Dv]`.
///
/// It is what [`ragged_paged_attention_with`](fn@super::ragged_paged_attention_with)
/// computes when no sequence has keys cached before this step (a
/// [`RaggedBatch::prefill`]), without reading the cache: one
/// [`flash_attention_with`](fn@crate::attention::flash_attention_with) over
/// the packed tokens with the sequences as segments. Its program is a
/// fraction of the ragged kernel's, which holds a tile body for each query
/// count (2.2 s of XLA compile for a 2-layer model's prefill step against
/// 0.5 s). Write the step's keys into the cache with
/// [`kv_cache_update_with`](fn@super::kv_cache_update_with) as usual, so
/// the decode steps that follow find them.
///
/// Checked after the call (unless `opts.unchecked`): every sequence's
/// `kv_lens` equals its new tokens, since a sequence with cached keys would
/// silently not see them; otherwise `Error::Check` names the first such
/// sequence, its `kv_lens` and its new tokens.
///
/// ```
/// # extern crate tessel_dsl as tessel;
/// use tessel::prelude::*;
/// use tessel_kernels::serving::{prefill_attention, RaggedBatch, ServeOptions};
///
/// #[cpu_kernel]
/// fn attend(q: Tensor, k: Tensor, v: Tensor, batch: RaggedBatch) -> Tensor {
///     prefill_attention(q, k, v, &batch, ServeOptions::new())
/// }
///
/// let batch = RaggedBatch::prefill(&[vec![1, 2, 3], vec![4]])?;
/// let x = HostTensor::from_fn(TensorSpec::new([4, 2, 8], F32), |i| (i as f64 * 0.1).sin());
/// let out = attend::run(&Device::cpu()?, &x, &x, &x, &batch)?;
/// assert_eq!(out.spec().shape, vec![4, 2, 8]);
/// // The lone token of the second sequence sees only itself: its value.
/// assert_eq!(out.to_vec::<f32>()?[3 * 16..], x.to_vec::<f32>()?[3 * 16..]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[track_caller]
pub fn prefill_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    batch: &RaggedBatch,
    opts: ServeOptions,
) -> Tensor {
    let (t, b) = (q.dim(0), batch.kv_lens.dim(0));
    if !opts.unchecked && b > 0 {
        let (lo, hi) = (
            batch.cu_q_lens.slice_axis(0, 0, b),
            batch.cu_q_lens.slice_axis(0, 1, b + 1),
        );
        let kv_lens = batch.kv_lens;
        let mut c = MetadataChecks::new();
        c.table(
            (hi - lo).ne(kv_lens).reshape(&[b as isize, 1]),
            "prefill_attention needs a fresh prefill (no keys cached before the step): sequence {} has \
             kv_lens {} but {} new tokens",
            move |s, _| vec![s, element(kv_lens, s), element(hi, s) - element(lo, s)],
        );
        c.raise();
    }
    let segments = token_sequences(batch.cu_q_lens, t).reshape(&[1, t as isize]);
    let heads = |x: Tensor| {
        x.transpose(&[1, 0, 2])
            .reshape(&[1, x.dim(1) as isize, t as isize, x.dim(2) as isize])
    };
    let extras = AttentionExtras {
        segment_ids: Some((segments, segments)),
        ..AttentionExtras::default()
    };
    let mut flash = FlashOptions::new().causal(true);
    flash.sm_scale = opts.sm_scale;
    flash.soft_cap = opts.soft_cap;
    if let Some(left) = opts.window {
        flash = flash.window(Some(left), Some(0));
    }
    let (out, _) = flash_attention_with(heads(q), heads(k), heads(v), &extras, flash);
    out.reshape(&[out.dim(1) as isize, t as isize, out.dim(3) as isize])
        .transpose(&[1, 0, 2])
}
