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
//! inputs).

use tessel::ops::DotDims;
use tessel::prelude::*;

use crate::attention::tiles::row_reduce;

/// The initial running maximum (finite: see the attention kernels).
const MASK_VALUE: f64 = -0.7 * f32::MAX as f64;

/// How a block of keys is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `[keys, Hkv, D]` (pages).
    TokenMajor,
    /// `[Hkv, keys, D]` (a contiguous `[B, Hkv, S, D]` cache).
    HeadMajor,
}

/// One block of keys and values with its positions.
pub(crate) struct KvBlock {
    pub(crate) layout: Layout,
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
                let hkv = k_pages.dim(2);
                // The block's pages `[pages, page, ..]` as `[keys, ..]`.
                let read = |x: Tensor| {
                    let block = if *pages == 1 {
                        let mut starts = vec![zero; x.rank()];
                        starts[0] = ids.reshape(&[]);
                        let mut sizes = x.shape();
                        sizes[0] = 1;
                        x.dynamic_slice(&starts, &sizes)
                    } else {
                        x.take(ids, 0)
                    };
                    let mut shape = vec![blk as isize];
                    shape.extend(x.shape()[2..].iter().map(|&e| e as isize));
                    block.reshape(&shape)
                };
                let scales = scales.map(|(ks, vs)| {
                    let per_head = |t: Tensor| {
                        read(t)
                            .transpose(&[1, 0])
                            .reshape(&[hkv as isize, 1, blk as isize])
                    };
                    (per_head(ks), per_head(vs))
                });
                KvBlock {
                    layout: Layout::TokenMajor,
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
                    layout: Layout::HeadMajor,
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

/// Tiles of at most this many rows (a decode step's query heads of one
/// key/value head) multiply elementwise and sum instead of calling a
/// matmul.
const NARROW_ROWS: usize = 8;

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
        let layout = kv.layout;
        let (keys, head_axis) = match layout {
            Layout::TokenMajor => (kv.k.dim(0), 1),
            Layout::HeadMajor => (kv.k.dim(1), 0),
        };
        let (kb, mut vb) = (kv.k.cast(self.io), kv.v.cast(self.io));
        let qk = DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![head_axis],
            lhs_contract: vec![2],
            rhs_contract: vec![2],
        };
        let narrow = tile.q.dim(1) <= NARROW_ROWS && layout == Layout::TokenMajor;
        let mut s = if narrow {
            // A few rows: products and a sum over D, reading each key once
            // (a batched matmul of so few rows transposes the block first).
            let (hkv, r, d) = (
                tile.q.dim(0) as isize,
                tile.q.dim(1) as isize,
                tile.q.dim(2) as isize,
            );
            let prod = kb.cast(self.stat).reshape(&[keys as isize, hkv, 1, d])
                * tile.q.cast(self.stat).reshape(&[1, hkv, r, d]);
            prod.sum(&[3]).transpose(&[1, 2, 0])
        } else {
            tile.q.dot_general(kb, qk, None, Some(self.stat))
        };
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
            let owned = match layout {
                Layout::TokenMajor => owned.reshape(&[keys as isize, 1, 1]),
                Layout::HeadMajor => owned.reshape(&[1, keys as isize, 1]),
            };
            vb = owned.select(vb, 0.0);
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
        // The values' key axis is the other one of the first two.
        let pv = DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![head_axis],
            lhs_contract: vec![2],
            rhs_contract: vec![1 - head_axis],
        };
        let pv = if narrow {
            let (hkv, r) = (p.dim(0) as isize, p.dim(1) as isize);
            let dv = vb.dim(2) as isize;
            let pt = p
                .cast(self.stat)
                .transpose(&[2, 0, 1])
                .reshape(&[keys as isize, hkv, r, 1]);
            (pt * vb.cast(self.stat).reshape(&[keys as isize, hkv, 1, dv])).sum(&[0])
        } else {
            p.dot_general(vb, pv, None, Some(self.stat))
        };
        let acc = acc * alpha + pv;
        (m_new, l, acc)
    }
}
