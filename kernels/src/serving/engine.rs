//! The engine of the serving kernels: an online softmax of one tile of
//! query rows over the blocks of one sequence's keys, read from a paged or
//! a contiguous cache at traced positions.
//!
//! Every bound is traced (the sequence's length, its query positions), so
//! one compiled program serves every step. For a tile whose rows sit at
//! positions `qmin ..= qmax`, the key blocks split into three traced loops:
//!
//! * blocks every row sees whole (after the window's start for the last
//!   row, before the first row's position and the sequence's end): no
//!   mask at all;
//! * the blocks before them (cut by the window) and after them (cut by the
//!   causal diagonal and the sequence's end): the element mask, and the
//!   values of keys past the end zeroed — they are slots the sequence does
//!   not own, whose contents are arbitrary.
//!
//! Queries are laid out `[Hkv, R, D]` (the `G = Hq / Hkv` query heads of a
//! key/value head and the tile's rows merged into `R`), the statistics
//! `[Hkv, R, 1]` and the accumulator `[Hkv, R, Dv]` in f32 (f64 for f64
//! inputs); blocks of keys `[Hkv, keys, D]` (see `source.rs`).
//!
//! Decode tiles (a few rows) take a two-pass form instead (`two_pass.rs`):
//! no rescaling per block, only per chunk of blocks.

use tessel::ops::DotDims;
use tessel::prelude::*;

use super::source::{KvBlock, Source};
use super::ServeOptions;
use crate::attention::tiles::row_reduce;

/// The initial running maximum (finite: see the attention kernels).
pub(crate) const MASK_VALUE: f64 = -0.7 * f32::MAX as f64;

/// A tile of query rows: `[Hkv, R, D]`, already scaled, and the position
/// of each row `s32 [1, R, 1]` (or `[1, 1, 1]` when they share one).
#[derive(Clone, Copy)]
pub(crate) struct QTile {
    pub(crate) q: Tensor,
    pub(crate) pos: Tensor,
}

impl QTile {
    /// The tile's key/value heads, rows per head and query width:
    /// `(Hkv, R, D)`.
    pub(crate) fn dims(&self) -> (usize, usize, usize) {
        (self.q.dim(0), self.q.dim(1), self.q.dim(2))
    }
}

/// The static parameters of one call.
pub(crate) struct Params {
    pub(crate) window: Option<usize>,
    pub(crate) soft_cap: Option<f64>,
    /// The dtype of the products' operands (the queries').
    pub(crate) io: DType,
    /// The statistics' dtype.
    pub(crate) stat: DType,
    /// The largest logits buffer of the two-pass form (bytes).
    pub(crate) max_logits_bytes: usize,
}

/// The online softmax's running state of a tile: the row maximum, the sum
/// of the weights and the weighted values (unnormalized).
pub(crate) type State = (Tensor, Tensor, Tensor);

/// The attention of a final state: the weighted values over the sum of the
/// weights, zeros for a row that saw no key.
pub(crate) fn normalized((_, l, acc): State) -> Tensor {
    l.ne(0.0).select(acc / l, 0.0)
}

/// Query rows up to which the logits are one matrix-vector product per row
/// (`[Hkv, keys, D] · [Hkv, D]`) rather than one batched product: on the CPU
/// plugin a batched product with a handful of rows runs far below its GEMM
/// rate, while its matrix-vector products stream the keys at memory speed
/// (4 rows: 3× faster; 16: 1.4×; 32: about even).
pub(crate) const GEMV_ROWS: usize = 16;

/// What a masked step masks: the rows' positions and the sequence's
/// length (keys at or past it are not the sequence's).
pub(crate) struct Mask {
    pub(crate) pos: Tensor,
    pub(crate) kv_len: Tensor,
}

impl Mask {
    /// Which of the keys at positions `kpos` (`s32 [1, 1, keys]`) the
    /// sequence owns: those before its end, and at or after `fresh_from`
    /// (keys before it were visited by an earlier block).
    pub(crate) fn owned(&self, kpos: Tensor, fresh_from: Option<Tensor>) -> Tensor {
        let owned = kpos.lt(self.kv_len);
        match fresh_from {
            Some(from) => owned & kpos.ge(from),
            None => owned,
        }
    }

    /// Which of the `owned` keys at positions `kpos` each row sees: those
    /// at or before its position and, with a sliding window of `left`, at
    /// or after its position minus `left`.
    pub(crate) fn visible(&self, owned: Tensor, kpos: Tensor, window: Option<usize>) -> Tensor {
        let seen = owned & kpos.le(self.pos);
        match window {
            Some(left) => seen & kpos.ge(self.pos - left.min(i32::MAX as usize) as i32),
            None => seen,
        }
    }
}

/// The traced key blocks of one tile, in three ranges: `lo .. whole_lo`
/// and `whole_hi .. hi` masked, `whole_lo .. whole_hi` seen whole by
/// every row.
pub(crate) struct Blocks {
    pub(crate) lo: Tensor,
    pub(crate) whole_lo: Tensor,
    pub(crate) whole_hi: Tensor,
    pub(crate) hi: Tensor,
    /// Whether `lo .. whole_lo` can hold blocks: only a window cuts keys
    /// before the ones every row sees (without one, the program has no
    /// loop for that range, which a decode step compiles faster without).
    pub(crate) before: bool,
}

impl Blocks {
    /// `step(j, carry, masked)` over every block, in order: the masked
    /// blocks before, the whole ones, the masked ones after.
    pub(crate) fn visit<C: tessel::Carry>(
        &self,
        init: C,
        step: impl Fn(Tensor, C, bool) -> C,
    ) -> C {
        let c = match self.before {
            true => fori_loop(self.lo, self.whole_lo, init, |j, c| step(j, c, true)),
            false => init,
        };
        let c = fori_loop(self.whole_lo, self.whole_hi, c, |j, c| step(j, c, false));
        fori_loop(self.whole_hi, self.hi, c, |j, c| step(j, c, true))
    }

    /// The blocks among `c0 .. c1` (s32 scalars), in the same three ranges.
    pub(crate) fn within(&self, c0: Tensor, c1: Tensor) -> Blocks {
        let clamp = |x: Tensor| x.maximum(c0).minimum(c1);
        Blocks {
            lo: clamp(self.lo),
            whole_lo: clamp(self.whole_lo),
            whole_hi: clamp(self.whole_hi),
            hi: clamp(self.hi),
            before: self.before,
        }
    }
}

impl Params {
    /// `opts`' parameters for products of `io` operands and statistics in
    /// `stat`.
    pub(crate) fn new(opts: &ServeOptions, io: DType, stat: DType) -> Self {
        Params {
            window: opts.window,
            soft_cap: opts.soft_cap,
            io,
            stat,
            max_logits_bytes: opts.max_logits_bytes,
        }
    }

    /// The attention of `tile` over `src`'s keys `0 .. kv_len` (an s32
    /// scalar, at most the source's capacity), the rows at positions
    /// `qmin ..= qmax`: `[Hkv, R, Dv]` in the statistics' dtype, zeros for
    /// a row that sees no key.
    ///
    /// A tile of at most [`GEMV_ROWS`] rows takes the two-pass form (see
    /// `two_pass.rs`) when the logits of one block fit `max_logits_bytes`;
    /// others the online softmax.
    pub(crate) fn attend(
        &self,
        src: &Source,
        tile: QTile,
        kv_len: Tensor,
        qmin: Tensor,
        qmax: Tensor,
    ) -> Tensor {
        let (hkv, r, _) = tile.dims();
        let blocks = self.blocks(src.block(), kv_len, qmin, qmax);
        let mask = Mask {
            pos: tile.pos,
            kv_len,
        };
        if r <= GEMV_ROWS {
            if let Some(chunk) = self.chunk_keys(src, hkv, r) {
                return self.two_pass(src, tile, &mask, &blocks, chunk);
            }
        }
        let init = self.empty_state(hkv, r, src.value_width());
        let end = blocks.visit(init, |j, st, masked| {
            self.step(st, tile, src.read(j), masked.then_some(&mask))
        });
        normalized(end)
    }

    /// The softmax state before any key, for `hkv × r` rows and values of
    /// width `dv`: a finite maximum, no weight, no values.
    pub(crate) fn empty_state(&self, hkv: usize, r: usize, dv: usize) -> State {
        (
            Tensor::full([hkv, r, 1], MASK_VALUE, self.stat),
            Tensor::zeros([hkv, r, 1], self.stat),
            Tensor::zeros([hkv, r, dv], self.stat),
        )
    }

    /// The blocks of `blk` keys some row of a tile at positions `qmin ..=
    /// qmax` sees, among the sequence's `kv_len` keys.
    fn blocks(&self, blk: usize, kv_len: Tensor, qmin: Tensor, qmax: Tensor) -> Blocks {
        let blk = blk as i32;
        let ceil = |x: Tensor| (x + (blk - 1)) / blk;
        // Keys some row sees: first ..= last.
        let last = qmax.minimum(kv_len - 1);
        let hi = ceil(last + 1);
        let (first, whole_first) = match self.window {
            Some(left) => {
                let left = left.min(i32::MAX as usize) as i32;
                ((qmin - left).maximum(0), (qmax - left).maximum(0))
            }
            None => (Tensor::scalar(0.0, S32), Tensor::scalar(0.0, S32)),
        };
        let lo = (first / blk).minimum(hi);
        // Keys every row sees: whole_first ..= qmin (and before the end).
        let whole_lo = ceil(whole_first).maximum(lo).minimum(hi);
        let whole_hi = ((qmin.minimum(kv_len - 1) + 1).maximum(0) / blk)
            .maximum(whole_lo)
            .minimum(hi);
        Blocks {
            lo,
            whole_lo,
            whole_hi,
            hi,
            // Without a window, `lo` and `whole_lo` are both the first block.
            before: self.window.is_some(),
        }
    }

    /// The logits `[Hkv, R, keys]` of `tile` against the keys `k` (`[Hkv,
    /// keys, D]`, scales `ks`) starting at position `start`: dequantized,
    /// soft-capped and, under `mask`, `-inf` where a row does not see a
    /// key. With the mask also returns which keys the sequence owns,
    /// `[1, 1, keys]` (slots past its end, or visited before when
    /// `fresh_from` is set, are not).
    pub(crate) fn logits(
        &self,
        tile: QTile,
        k: Tensor,
        ks: Option<Tensor>,
        (start, fresh_from): (Tensor, Option<Tensor>),
        mask: Option<&Mask>,
    ) -> (Tensor, Option<Tensor>) {
        let keys = k.dim(1);
        let kb = k.cast(self.io);
        let (hkv, r, d) = tile.dims();
        let mut s = if r <= GEMV_ROWS {
            let row = |i: usize| {
                let qi = tile
                    .q
                    .slice_axis(1, i, i + 1)
                    .reshape(&[hkv as isize, d as isize]);
                kb.dot_general(qi, batched(2, 1), None, Some(self.stat))
                    .reshape(&[hkv as isize, 1, keys as isize])
            };
            let rows: Vec<Tensor> = (0..r).map(row).collect();
            tessel::concat(&rows, 1)
        } else {
            tile.q.dot_general(kb, batched(2, 2), None, Some(self.stat))
        };
        if let Some(ks) = ks {
            // f32 scales; f64 queries keep f64 statistics.
            s = s * ks.cast(s.dtype());
        }
        if let Some(cap) = self.soft_cap {
            s = (s * (1.0 / cap)).tanh() * cap;
        }
        let Some(mask) = mask else {
            return (s, None);
        };
        let kpos = Tensor::iota([1, 1, keys], 2, S32) + start;
        let owned = mask.owned(kpos, fresh_from);
        let visible = mask.visible(owned, kpos, self.window);
        (visible.select(s, f64::NEG_INFINITY), Some(owned))
    }

    /// One online-softmax step over `kv`.
    fn step(&self, st: State, tile: QTile, kv: KvBlock, mask: Option<&Mask>) -> State {
        let (m, l, acc) = st;
        let keys = kv.k.dim(1);
        let (ks, vs) = kv.scales.unzip();
        let (s, owned) = self.logits(tile, kv.k, ks, (kv.start, kv.fresh_from), mask);
        let mut vb = kv.v.cast(self.io);
        if let Some(owned) = owned {
            // Slots the sequence does not own hold anything: zero them.
            vb = owned.reshape(&[1, keys as isize, 1]).select(vb, 0.0);
        }
        let m_new = m.maximum(row_reduce(s, true));
        let alpha = (m - m_new).exp();
        let p = (s - m_new).exp();
        let l = l * alpha + row_reduce(p, false);
        let acc = acc * alpha + self.weighted(p, vs, vb);
        (m_new, l, acc)
    }

    /// `p · v`: the weights `p` `[Hkv, R, keys]` (scaled by the values'
    /// scales `vs`) against the values `vb` `[Hkv, keys, Dv]`, in the
    /// statistics' dtype.
    pub(crate) fn weighted(&self, mut p: Tensor, vs: Option<Tensor>, vb: Tensor) -> Tensor {
        if let Some(vs) = vs {
            p = p * vs.cast(p.dtype());
        }
        let p = if self.io == self.stat {
            p
        } else {
            p.cast(self.io)
        };
        p.dot_general(vb, batched(2, 1), None, Some(self.stat))
    }
}

/// A product batched over the leading (head) axis, contracting `lhs`'s
/// axis `lhs_contract` with `rhs`'s `rhs_contract`.
fn batched(lhs_contract: usize, rhs_contract: usize) -> DotDims {
    DotDims {
        lhs_batch: vec![0],
        rhs_batch: vec![0],
        lhs_contract: vec![lhs_contract],
        rhs_contract: vec![rhs_contract],
    }
}
