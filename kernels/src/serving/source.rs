//! Where the serving kernels read one sequence's keys and values from: a
//! paged or a contiguous cache, one block of keys at a traced index.
//!
//! Every block is read head-major, `[Hkv, keys, D]`: a paged cache's pages
//! (`[page, Hkv, D]` each) are gathered straight into that layout, one
//! `(page, head)` slice per row of the gather, so the products over a block
//! are batched over the heads with no transpose of the block (on the CPU
//! plugin 1.3–1.4× faster than gathering token-major blocks and
//! multiplying elementwise).

use tessel::ir::GatherDims;
use tessel::prelude::*;

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
    /// The width of each value (`Dv`).
    pub(crate) fn value_width(&self) -> usize {
        match self {
            Source::Paged { v_pages, .. } => v_pages.dim(3),
            Source::Contiguous { v, .. } => v.dim(3),
        }
    }

    /// Keys per block.
    pub(crate) fn block(&self) -> usize {
        match self {
            Source::Paged { k_pages, pages, .. } => k_pages.dim(1) * pages,
            Source::Contiguous { block, .. } => *block,
        }
    }

    /// The keys the buffers of the two-pass decode span (the padded block
    /// table's or the contiguous cache's).
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Source::Paged { k_pages, table, .. } => table.dim(0) * k_pages.dim(1),
            Source::Contiguous { k, .. } => k.dim(2),
        }
    }

    /// The keys of room a buffer of logits keeps before a chunk's first
    /// block: one block when the last block may be read shifted back (a
    /// contiguous cache whose length is not a multiple of the block), since
    /// it then starts before its own block; none otherwise.
    pub(crate) fn room(&self) -> usize {
        match self {
            Source::Contiguous { k, .. } if k.dim(2) % self.block() != 0 => self.block(),
            _ => 0,
        }
    }

    /// Block `j`'s first key position (s32 scalar) and, for a contiguous
    /// cache whose last block is read shifted back, the position before
    /// which its keys were visited already.
    pub(crate) fn span(&self, j: Tensor) -> (Tensor, Option<Tensor>) {
        let blk = self.block();
        let start = j * blk as i32;
        match self {
            Source::Paged { .. } => (start, None),
            Source::Contiguous { k, .. } => {
                let len = k.dim(2);
                // The last block is read shifted back to stay in range.
                let at = start.minimum((len - blk) as i32);
                (at, (len % blk != 0).then_some(start))
            }
        }
    }

    /// Block `j` of the keys or the values (`[Hkv, keys, D]`), with its
    /// per-key scales `[Hkv, 1, keys]` when the cache is quantized.
    pub(crate) fn part(&self, j: Tensor, part: Part) -> (Tensor, Option<Tensor>) {
        let zero = Tensor::scalar(0.0, S32);
        let blk = self.block();
        match self {
            Source::Paged {
                k_pages,
                v_pages,
                scales,
                table,
                pages,
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
                let (x, scale) = match part {
                    Part::Keys => (*k_pages, scales.map(|(ks, _)| ks)),
                    Part::Values => (*v_pages, scales.map(|(_, vs)| vs)),
                };
                let scale = scale.map(|t| read(t).reshape(&[hkv as isize, 1, blk as isize]));
                (read(x), scale)
            }
            Source::Contiguous { k, v, b, .. } => {
                let x = match part {
                    Part::Keys => *k,
                    Part::Values => *v,
                };
                let (hkv, width) = (x.dim(1), x.dim(3));
                let (at, _) = self.span(j);
                let block = x
                    .dynamic_slice(&[*b, zero, at, zero], &[1, hkv, blk, width])
                    .reshape(&[hkv as isize, blk as isize, width as isize]);
                (block, None)
            }
        }
    }

    /// Block `j` (a traced s32 scalar).
    pub(crate) fn read(&self, j: Tensor) -> KvBlock {
        let (k, ks) = self.part(j, Part::Keys);
        let (v, vs) = self.part(j, Part::Values);
        let (start, fresh_from) = self.span(j);
        KvBlock {
            k,
            v,
            scales: ks.zip(vs),
            start,
            fresh_from,
        }
    }
}

/// Which half of the cache a read takes.
#[derive(Clone, Copy)]
pub(crate) enum Part {
    Keys,
    Values,
}
