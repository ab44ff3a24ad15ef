//! The two-pass form of the serving engine, for decode tiles: the first
//! traced loop writes every block's logits into one buffer `[Hkv, R,
//! capacity]` (`-inf` where a row sees no key), one softmax runs over the
//! whole buffer, and the second loop adds up the weighted values.
//!
//! It does the online softmax's arithmetic without its per-block rescaling
//! of the statistics and the accumulator, and each loop reads one half of
//! the cache. With one matrix-vector product per query row for the logits
//! (see `GEMV_ROWS`), the decode step of the `paged_attention` benchmark
//! went from 47.6–52.1 ms (online, batched products) to 22.3–22.6 ms on the CPU
//! plugin.
//!
//! A sequence much shorter than its table gets a narrower buffer (see
//! [`Params::two_pass`]): 4096-key sequences in a table 32× as wide took
//! 51–52 ms a step with the full buffer, 33–35 ms with the narrow one.

use tessel::prelude::*;

use super::engine::{Blocks, Mask, Params, QTile, MASK_VALUE};
use super::source::{Part, Source};

/// The narrow buffer's share of the capacity: a sequence whose blocks all
/// lie in the first `1 / NARROW_SHARE` of its table (or contiguous cache)
/// runs with a buffer that wide.
pub(crate) const NARROW_SHARE: usize = 8;

/// The full buffer's size (bytes) from which the narrow one is offered.
/// Below it the fill and the softmax cost less than a second copy of the
/// two loops costs in compile time.
pub(crate) const NARROW_FROM_BYTES: usize = 1 << 20;

impl Params {
    /// `tile`'s attention over `src` under `mask`, visiting `blocks`:
    /// `[Hkv, R, Dv]` in the statistics' dtype, zeros for a row that sees
    /// no key.
    ///
    /// The buffer's fill and its softmax cost time in proportion to its
    /// width, so a sequence much shorter than its table (a server's tables
    /// are as wide as its longest context) would pay for the whole table.
    /// When the full buffer reaches [`NARROW_FROM_BYTES`], a traced
    /// conditional gives a sequence whose visited blocks end within the
    /// first `1 / NARROW_SHARE` of the capacity a buffer that wide (whole
    /// blocks, so it ends before a contiguous cache's shifted last block).
    pub(crate) fn two_pass(
        &self,
        src: &Source,
        tile: QTile,
        mask: &Mask,
        blocks: &Blocks,
    ) -> Tensor {
        let s = tile.q.shape();
        let (blk, capacity) = (src.block(), src.capacity());
        let bytes = s[0] * s[1] * capacity * self.stat.size_in_bytes();
        let narrow = capacity / NARROW_SHARE / blk * blk;
        if narrow == 0 || bytes < NARROW_FROM_BYTES {
            return self.two_pass_over(src, tile, mask, blocks, capacity);
        }
        let fits = (blocks.hi * blk as i32).le(narrow as i32);
        cond(
            fits,
            || self.two_pass_over(src, tile, mask, blocks, narrow),
            || self.two_pass_over(src, tile, mask, blocks, capacity),
        )
    }

    /// [`Params::two_pass`] with a buffer of `width` keys (every visited
    /// block must end within it).
    fn two_pass_over(
        &self,
        src: &Source,
        tile: QTile,
        mask: &Mask,
        blocks: &Blocks,
        width: usize,
    ) -> Tensor {
        let zero = Tensor::scalar(0.0, S32);
        let s = tile.q.shape();
        let (hkv, r, keys) = (s[0], s[1], src.block());
        // Pass 1: the logits of every visited block, `-inf` elsewhere.
        let buf = Tensor::full([hkv, r, width], f64::NEG_INFINITY, self.stat);
        let buf = blocks.visit(buf, |j, buf: Tensor, masked| {
            let (k, ks) = src.part(j, Part::Keys);
            let span = src.span(j);
            let (start, fresh_from) = span;
            let (mut s, _) = self.logits(tile, k, ks, span, masked.then_some(mask));
            if masked && fresh_from.is_some() {
                // A block read shifted back: its first keys were written
                // by the block before (and are `-inf` here).
                s = s.maximum(buf.dynamic_slice(&[zero, zero, start], &[hkv, r, keys]));
            }
            buf.dynamic_update_slice(s, &[zero, zero, start])
        });
        // One softmax over the whole row (finite maximum: a row that sees
        // nothing gets zero weights, and `l = 0`).
        let m = buf.max_keepdims(&[2]).maximum(MASK_VALUE);
        let p = (buf - m).exp();
        let l = p.sum_keepdims(&[2]);
        // Pass 2: the weighted values.
        let acc = Tensor::zeros([hkv, r, src.value_width()], self.stat);
        let acc = blocks.visit(acc, |j, acc: Tensor, masked| {
            let (v, vs) = src.part(j, Part::Values);
            let (start, fresh_from) = src.span(j);
            let pj = p.dynamic_slice(&[zero, zero, start], &[hkv, r, keys]);
            let mut vb = v.cast(self.io);
            if masked {
                // Slots the sequence does not own hold anything, and keys
                // a block read shifted back shares with the block before
                // were weighed there: zero their values.
                let kpos = Tensor::iota([1, 1, keys], 2, S32) + start;
                let owned = mask.owned(kpos, fresh_from);
                vb = owned.reshape(&[1, keys as isize, 1]).select(vb, 0.0);
            }
            acc + self.weighted(pj, vs, vb)
        });
        l.ne(0.0).select(acc / l, 0.0)
    }
}
