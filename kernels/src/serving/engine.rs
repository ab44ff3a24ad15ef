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
//! inputs). Every block of keys is read head-major, `[Hkv, keys, D]`: a
//! paged cache's pages (`[page, Hkv, D]` each) are gathered straight into
//! that layout, one `(page, head)` slice per row of the gather, so both
//! products are batched matmuls over the heads with no transpose of the
//! block (on the CPU plugin 1.3–1.4× faster than gathering token-major
//! blocks and multiplying elementwise).

use tessel::ir::GatherDims;
use tessel::ops::DotDims;
use tessel::prelude::*;

use crate::attention::tiles::row_reduce;

/// The initial running maximum (finite: see the attention kernels).
const MASK_VALUE: f64 = -0.7 * f32::MAX as f64;

/// One block of keys and values with its positions.
pub(crate) struct KvBlock {
    /// Keys `[Hkv, keys, D]` and values `[Hkv, keys, Dv]`.
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    /// Per-key scales `[Hkv, 1, keys]` of quantized keys and values.
    pub(crate) scales: Option<(Tensor, Tensor)>,
    /// The position of the block's first key (s32 scalar).
    pub(crate) start: Tensor,
    /// Keys before this position were visited by an earlier block (a
    /// contiguous cache's last block is read shifted back to stay in
    /// range); they are masked.
    pub(crate) fresh_from: Option<Tensor>,
}

/// Where one sequence's keys and values come from.
pub(crate) enum Source {
    /// A paged cache: pages `[P, page, Hkv, D]` and the sequence's block
    /// table `s32 [M']` (padded to a multiple of `pages` entries).
    Paged {
        k_pages: Tensor,
        v_pages: Tensor,
        /// Quantized pages' scales `[P, page, Hkv]` (f32).
        scales: Option<(Tensor, Tensor)>,
        table: Tensor,
        pages: usize,
    },
    /// A contiguous cache `[B, Hkv, S, D]`, sequence `b`.
    Contiguous {
        k: Tensor,
        v: Tensor,
        b: Tensor,
        block: usize,
    },
}

impl Source {
    /// Keys per block.
    pub(crate) fn block(&self) -> usize {
        match self {
            Source::Paged { k_pages, pages, .. } => k_pages.dim(1) * pages,
            Source::Contiguous { block, .. } => *block,
        }
    }

    /// Block `j` (a traced s32 scalar).
    fn read(&self, j: Tensor) -> KvBlock {
        let zero = Tensor::scalar(0.0, S32);
        let blk = self.block();
        let start = j * blk as i32;
        match self {
            Source::Paged {
                k_pages,
                v_pages,
                scales,
                table,
                pages,
                ..
            } => {
                let ids = table.dynamic_slice(&[j * *pages as i32], &[*pages]);
                let (hkv, page) = (k_pages.dim(2), k_pages.dim(1));
                // One (page, head) start per row: `[Hkv, pages, 2]`.
                let starts = tessel::concat(
                    &[
                        ids.reshape(&[1, *pages as isize, 1])
                            .broadcast_to([hkv, *pages, 1]),
                        Tensor::iota([hkv, *pages, 1], 0, S32),
                    ],
                    2,
                );
                // `x: [P, page, Hkv, ..]` as `[Hkv, keys, ..]`: slices
                // `[page, ..]` of one page and one head.
                let read = |x: Tensor| {
                    let mut sizes = x.shape();
                    sizes[0] = 1;
                    sizes[2] = 1;
                    let dims = GatherDims {
                        offset_dims: (2..x.rank()).collect(),
                        collapsed_slice_dims: vec![0, 2],
                        start_index_map: vec![0, 2],
                        index_vector_dim: 2,
                    };
                    let mut shape = vec![hkv as isize, (*pages * page) as isize];
                    shape.extend(x.shape()[3..].iter().map(|&e| e as isize));
                    x.gather(starts, dims, &sizes).reshape(&shape)
                };
                let scales = scales.map(|(ks, vs)| {
                    let per_head = |t: Tensor| read(t).reshape(&[hkv as isize, 1, blk as isize]);
                    (per_head(ks), per_head(vs))
                });
                KvBlock {
                    k: read(*k_pages),
                    v: read(*v_pages),
                    scales,
                    start,
                    fresh_from: None,
                }
            }
            Source::Contiguous { k, v, b, .. } => {
                let (hkv, len) = (k.dim(1), k.dim(2));
                // The last block is read shifted back to stay in range.
                let at = start.minimum((len - blk) as i32);
                let read = |x: Tensor| {
                    let width = x.dim(3);
                    x.dynamic_slice(&[*b, zero, at, zero], &[1, hkv, blk, width])
                        .reshape(&[hkv as isize, blk as isize, width as isize])
                };
                KvBlock {
                    k: read(*k),
                    v: read(*v),
                    scales: None,
                    start: at,
                    fresh_from: (len % blk != 0).then_some(start),
                }
            }
        }
    }
}

/// A tile of query rows: `[Hkv, R, D]`, already scaled, and the position
/// of each row `s32 [1, R, 1]` (or `[1, 1, 1]` when they share one).
#[derive(Clone, Copy)]
pub(crate) struct QTile {
    pub(crate) q: Tensor,
    pub(crate) pos: Tensor,
}

/// The static parameters of one call.
pub(crate) struct Params {
    pub(crate) window: Option<usize>,
    pub(crate) soft_cap: Option<f64>,
    /// The dtype of the products' operands (the queries').
    pub(crate) io: DType,
    /// The statistics' dtype.
    pub(crate) stat: DType,
}

type State = (Tensor, Tensor, Tensor);

/// What a masked step masks: the rows' positions and the sequence's
/// length (keys at or past it are not the sequence's).
struct Mask {
    pos: Tensor,
    kv_len: Tensor,
}

impl Params {
    /// The attention of `tile` over `src`'s keys `0 .. kv_len` (an s32
    /// scalar, at most the source's capacity), the rows at positions
    /// `qmin ..= qmax`: `[Hkv, R, Dv]` in the statistics' dtype, zeros for
    /// a row that sees no key.
    pub(crate) fn attend(
        &self,
        src: &Source,
        tile: QTile,
        kv_len: Tensor,
        qmin: Tensor,
        qmax: Tensor,
    ) -> Tensor {
        let blk = src.block() as i32;
        let s = tile.q.shape();
        let (hkv, r) = (s[0], s[1]);
        let dv = match src {
            Source::Paged { v_pages, .. } => v_pages.dim(3),
            Source::Contiguous { v, .. } => v.dim(3),
        };
        let init: State = (
            Tensor::full([hkv, r, 1], MASK_VALUE, self.stat),
            Tensor::zeros([hkv, r, 1], self.stat),
            Tensor::zeros([hkv, r, dv], self.stat),
        );
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
        let mask = Mask {
            pos: tile.pos,
            kv_len,
        };
        let st = fori_loop(lo, whole_lo, init, |j, st| {
            self.step(st, tile, src.read(j), Some(&mask))
        });
        let st = fori_loop(whole_lo, whole_hi, st, |j, st| {
            self.step(st, tile, src.read(j), None)
        });
        let st = fori_loop(whole_hi, hi, st, |j, st| {
            self.step(st, tile, src.read(j), Some(&mask))
        });
        let (_, l, acc) = st;
        l.ne(0.0).select(acc / l, 0.0)
    }

    /// One online-softmax step over `kv`.
    fn step(&self, st: State, tile: QTile, kv: KvBlock, mask: Option<&Mask>) -> State {
        let (m, l, acc) = st;
        let keys = kv.k.dim(1);
        let (kb, mut vb) = (kv.k.cast(self.io), kv.v.cast(self.io));
        let batched = |lhs_contract, rhs_contract| DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![lhs_contract],
            rhs_contract: vec![rhs_contract],
        };
        let mut s = tile.q.dot_general(kb, batched(2, 2), None, Some(self.stat));
        if let Some((ks, _)) = kv.scales {
            s = s * ks;
        }
        if let Some(cap) = self.soft_cap {
            s = (s * (1.0 / cap)).tanh() * cap;
        }
        if let Some(mask) = mask {
            let kpos = Tensor::iota([1, 1, keys], 2, S32) + kv.start;
            let mut owned = kpos.lt(mask.kv_len);
            if let Some(from) = kv.fresh_from {
                owned = owned & kpos.ge(from);
            }
            let mut visible = owned & kpos.le(mask.pos);
            if let Some(left) = self.window {
                let left = left.min(i32::MAX as usize) as i32;
                visible = visible & kpos.ge(mask.pos - left);
            }
            s = visible.select(s, f64::NEG_INFINITY);
            // Slots the sequence does not own hold anything: zero them.
            vb = owned.reshape(&[1, keys as isize, 1]).select(vb, 0.0);
        }
        let m_new = m.maximum(row_reduce(s, true));
        let alpha = (m - m_new).exp();
        let mut p = (s - m_new).exp();
        let l = l * alpha + row_reduce(p, false);
        if let Some((_, vs)) = kv.scales {
            p = p * vs;
        }
        let p = if self.io == self.stat {
            p
        } else {
            p.cast(self.io)
        };
        let pv = p.dot_general(vb, batched(2, 1), None, Some(self.stat));
        let acc = acc * alpha + pv;
        (m_new, l, acc)
    }
}
