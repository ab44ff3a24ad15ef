//! A ragged serving batch's metadata as one tree: the packed tokens, their
//! positions, each sequence's key count and query offsets — the arguments
//! [`ragged_paged_attention`](fn@super::ragged_paged_attention) and
//! [`kv_cache_update`](fn@super::kv_cache_update) share.
//!
//! Built on the host for a prefill ([`RaggedBatch::prefill`],
//! [`RaggedBatch::extend`]); inside a kernel, [`RaggedBatch::last_rows`]
//! picks each sequence's last row (its next-token logits) and
//! [`RaggedBatch::decode_next`] builds the next step's batch from the
//! chosen tokens, so a decode loop keeps its metadata on the device and
//! uploads nothing per token.

use tessel::prelude::*;
use tessel::{HostError, Tree};

/// The metadata of one ragged serving step over `B` sequences and `T` new
/// tokens in all. One structure for every form (`RaggedBatch` traced inside
/// a kernel, `RaggedBatch<DeviceBuffer>` between calls,
/// `RaggedBatch<HostTensor>` built on the host), as every
/// `#[derive(Tree)]` type.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::serving::RaggedBatch;
/// // Two prompts: 3 tokens and 1 token, both from position 0.
/// let b = RaggedBatch::prefill(&[vec![7, 8, 9], vec![4]])?;
/// assert_eq!(b.tokens.to_vec::<i32>()?, [7, 8, 9, 4]);
/// assert_eq!(b.positions.to_vec::<i32>()?, [0, 1, 2, 0]);
/// assert_eq!(b.kv_lens.to_vec::<i32>()?, [3, 1]);
/// assert_eq!(b.cu_q_lens.to_vec::<i32>()?, [0, 3, 4]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Tree, Clone, Debug)]
pub struct RaggedBatch<T = Tensor> {
    /// `s32 [T]`: the new tokens, sequence after sequence.
    pub tokens: T,
    /// `s32 [T]`: each token's position in its sequence.
    pub positions: T,
    /// `s32 [B]`: each sequence's keys after this step, its new tokens
    /// included (the `kv_lens` of the serving kernels).
    pub kv_lens: T,
    /// `s32 [B + 1]`: sequence `b`'s tokens are rows `cu_q_lens[b] ..
    /// cu_q_lens[b + 1]`.
    pub cu_q_lens: T,
}

impl RaggedBatch<HostTensor> {
    /// The prefill of `prompts` (token ids, each sequence from position 0).
    ///
    /// # Errors
    ///
    /// [`Error::Host`](tessel::Error::Host) if a prompt is empty or the
    /// batch holds more than `i32::MAX` tokens.
    pub fn prefill<P: AsRef<[i32]>>(prompts: &[P]) -> tessel::Result<Self> {
        let seqs: Vec<(usize, &[i32])> = prompts.iter().map(|p| (0, p.as_ref())).collect();
        Self::extend(&seqs)
    }

    /// The step that appends `tokens` to sequences holding `cached` keys
    /// already, one `(cached, tokens)` pair per sequence: a chunked prefill
    /// continues with `(chunk_start, chunk)`, a decode step from the host
    /// with `(len, &[token])`.
    ///
    /// # Errors
    ///
    /// [`Error::Host`](tessel::Error::Host) if a sequence has no new token
    /// (its last row would be another sequence's) or a count passes
    /// `i32::MAX`.
    pub fn extend(seqs: &[(usize, &[i32])]) -> tessel::Result<Self> {
        let bad = |message: String| HostError::InvalidInput {
            what: "ragged batch",
            message,
        };
        let mut tokens = Vec::new();
        let mut positions = Vec::new();
        let mut kv_lens = Vec::with_capacity(seqs.len());
        let mut cu_q_lens = vec![0i32];
        for (b, &(cached, new)) in seqs.iter().enumerate() {
            if new.is_empty() {
                return Err(bad(format!("sequence {b} has no new token")).into());
            }
            let len = cached
                .checked_add(new.len())
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or_else(|| bad(format!("sequence {b}: {cached} + {} keys", new.len())))?;
            tokens.extend_from_slice(new);
            positions.extend(cached as i32..len as i32);
            kv_lens.push(len as i32);
            if tokens.len() > i32::MAX as usize {
                return Err(bad(format!("{} tokens in one batch", tokens.len())).into());
            }
            cu_q_lens.push(tokens.len() as i32);
        }
        let vector = |v: Vec<i32>| {
            let n = v.len();
            HostTensor::from_vec(v, [n])
        };
        Ok(RaggedBatch {
            tokens: vector(tokens)?,
            positions: vector(positions)?,
            kv_lens: vector(kv_lens)?,
            cu_q_lens: vector(cu_q_lens)?,
        })
    }

    /// The number of sequences `B`.
    pub fn num_seqs(&self) -> usize {
        self.kv_lens.shape().first().copied().unwrap_or(0)
    }
}

impl RaggedBatch {
    /// The rows of `x: [T, ..]` (one per token of the batch) at each
    /// sequence's last token: `[B, ..]`, e.g. the logits that choose each
    /// sequence's next token.
    #[track_caller]
    pub fn last_rows(&self, x: Tensor) -> Tensor {
        let b = self.kv_lens.dim(0);
        let last = self.cu_q_lens.slice_axis(0, 1, b + 1) - 1;
        x.take(last, 0)
    }

    /// The batch of the decode step after this one: `tokens: [B]`, one new
    /// token per sequence, at the position after its last (`positions` are
    /// this batch's `kv_lens`, which each grow by one).
    #[track_caller]
    pub fn decode_next(&self, tokens: Tensor) -> RaggedBatch {
        let b = self.kv_lens.dim(0);
        RaggedBatch {
            tokens: tokens.cast(S32),
            positions: self.kv_lens,
            kv_lens: self.kv_lens + 1,
            cu_q_lens: Tensor::iota([b + 1], 0, S32),
        }
    }
}

/// The sequence of each of `t` packed tokens (`s32 [t]`) under the query
/// offsets `cu_q_lens` (`s32 [B + 1]`): how many sequences end at or before
/// it (`B` for a token past the last). The cache update and the prefill
/// attention both build it this one way, so XLA computes it once.
pub(crate) fn token_sequences(cu_q_lens: Tensor, t: usize) -> Tensor {
    let b = cu_q_lens.dim(0).saturating_sub(1);
    let ends = cu_q_lens.slice_axis(0, 1, b + 1).reshape(&[1, b as isize]);
    let tok = Tensor::iota([t], 0, S32);
    ends.le(tok.reshape(&[t as isize, 1])).cast(S32).sum(&[1])
}
