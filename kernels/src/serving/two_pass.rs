//! The two-pass form of the serving engine, for decode tiles. The key
//! blocks are taken in chunks whose logits fit `max_logits_bytes` (1 MiB
//! by default: 8192 keys at 8 key/value heads of 4 rows in f32). For each
//! chunk the first traced loop writes every block's logits into one buffer
//! `[Hkv, R, chunk]` (`-inf` where a row sees no key), one softmax runs
//! over the buffer, and the second loop adds up the weighted values. The
//! chunks' results are merged as the online softmax merges blocks, once
//! per chunk.
//!
//! It does the online softmax's arithmetic without its per-block rescaling
//! of the statistics and the accumulator, and each loop reads one half of
//! the cache. With one matrix-vector product per query row for the logits
//! (see `GEMV_ROWS`), the decode step of the `paged_attention` benchmark
//! went from 47.6–52.1 ms (online, batched products) to 22.3–22.6 ms on the CPU
//! plugin.
//!
//! The buffer's fill and its softmax cost time in proportion to its width,
//! so it spans a chunk, not the whole block table: a server's tables fit
//! its longest context, and with one buffer as wide as the table, 4096-key
//! sequences in a table 32× as wide took 51–52 ms a step.

use tessel::prelude::*;

use super::engine::{normalized, Blocks, Mask, Params, QTile, State, MASK_VALUE};
use super::source::{Part, Source};

impl Params {
    /// The keys per chunk of the two-pass form for a tile of `rows` query
    /// rows over `src` (a multiple of its block), or `None` when not even
    /// one block's buffer fits `max_logits_bytes`.
    pub(crate) fn chunk_keys(&self, src: &Source, hkv: usize, rows: usize) -> Option<usize> {
        let blk = src.block();
        let per_key = (hkv * rows * self.stat.size_in_bytes()).max(1);
        let room = src.room();
        let fit = self.max_logits_bytes / per_key;
        let chunk = fit.saturating_sub(room) / blk * blk;
        let whole = src.capacity().div_ceil(blk) * blk;
        (chunk > 0).then_some(chunk.min(whole))
    }

    /// `tile`'s attention over `src` under `mask`, visiting `blocks` in
    /// chunks of `chunk` keys (a multiple of the block): `[Hkv, R, Dv]` in
    /// the statistics' dtype, zeros for a row that sees no key.
    pub(crate) fn two_pass(
        &self,
        src: &Source,
        tile: QTile,
        mask: &Mask,
        blocks: &Blocks,
        chunk: usize,
    ) -> Tensor {
        let (hkv, r, _) = tile.dims();
        let blk = src.block();
        let per = (chunk / blk) as i32;
        let init = self.empty_state(hkv, r, src.value_width());
        let first = blocks.lo / per;
        let last = (blocks.hi + (per - 1)) / per;
        let end = fori_loop(first, last, init, |c, (m, l, acc)| {
            let part = blocks.within(c * per, (c + 1) * per);
            let (mc, lc, accc) = self.chunk(src, tile, mask, &part, c * per, chunk);
            let mn = m.maximum(mc);
            let (a, b) = ((m - mn).exp(), (mc - mn).exp());
            (mn, l * a + lc * b, acc * a + accc * b)
        });
        normalized(end)
    }

    /// One chunk, the blocks `part` (within `c0 .. c0 + chunk / blk`):
    /// its maximum (finite), the sum of its weights and its weighted values
    /// (unnormalized), as the online softmax keeps them.
    fn chunk(
        &self,
        src: &Source,
        tile: QTile,
        mask: &Mask,
        part: &Blocks,
        c0: Tensor,
        chunk: usize,
    ) -> State {
        let zero = Tensor::scalar(0.0, S32);
        let (hkv, r, _) = tile.dims();
        let keys = src.block();
        // A block read shifted back starts before its own block (and so
        // possibly before the chunk): the buffer keeps room for it.
        let room = src.room();
        let origin = c0 * keys as i32 - room as i32;
        // Pass 1: the logits of every visited block, `-inf` elsewhere.
        let buf = Tensor::full([hkv, r, chunk + room], f64::NEG_INFINITY, self.stat);
        let buf = part.visit(buf, |j, buf: Tensor, masked| {
            let (k, ks) = src.part(j, Part::Keys);
            let span = src.span(j);
            let (start, fresh_from) = span;
            let at = start - origin;
            let (mut s, _) = self.logits(tile, k, ks, span, masked.then_some(mask));
            if masked && fresh_from.is_some() {
                // A block read shifted back: its first keys were written
                // by the block before (and are `-inf` here).
                s = s.maximum(buf.dynamic_slice(&[zero, zero, at], &[hkv, r, keys]));
            }
            buf.dynamic_update_slice(s, &[zero, zero, at])
        });
        // One softmax over the chunk (finite maximum: a row that sees
        // nothing gets zero weights, and `l = 0`).
        let m = buf.max_keepdims(&[2]).maximum(MASK_VALUE);
        let p = (buf - m).exp();
        let l = p.sum_keepdims(&[2]);
        // Pass 2: the weighted values.
        let acc = Tensor::zeros([hkv, r, src.value_width()], self.stat);
        let acc = part.visit(acc, |j, acc: Tensor, masked| {
            let (v, vs) = src.part(j, Part::Values);
            let (start, fresh_from) = src.span(j);
            let pj = p.dynamic_slice(&[zero, zero, start - origin], &[hkv, r, keys]);
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
        (m, l, acc)
    }
}
