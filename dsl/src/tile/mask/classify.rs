//! Block classification: which blocks of a mask are empty, full or partial,
//! and the block tables a dynamic-layout kernel iterates over.

use super::{mask_error, to_i64, Mask, Node};
use crate::error::Result;
use crate::host::HostTensor;

/// What a mask allows inside one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// No position of the block is allowed: the block can be skipped.
    Empty,
    /// The block lies wholly inside the matrix and every position is allowed:
    /// no element mask is needed.
    Full,
    /// Some positions are allowed and some are not (counting positions
    /// outside the matrix, in a ragged last block, as not allowed): the
    /// block needs its element mask ([`Mask::block_mask`]).
    Partial,
}

impl BlockKind {
    /// The code used in [`MaskInfo`] tables: 0 empty (or padding), 1 partial, 2 full.
    pub fn code(self) -> i32 {
        match self {
            BlockKind::Empty => 0,
            BlockKind::Partial => 1,
            BlockKind::Full => 2,
        }
    }
}

/// How a mask covers a non-empty rectangle of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cover {
    /// Nothing allowed.
    None,
    /// Everything allowed.
    All,
    /// Some allowed, some not.
    Mixed,
    /// Not decided by the O(1) rules (only from combinations).
    Unknown,
}

impl Mask {
    /// How this mask covers the in-matrix rectangle `[q0, q1) × [k0, k1)`
    /// (non-empty); exact.
    pub(super) fn cover(&self, q0: usize, q1: usize, k0: usize, k1: usize) -> Cover {
        match self.quick_cover(q0, q1, k0, k1) {
            Cover::Unknown => self.row_cover(q0, q1, k0, k1),
            c => c,
        }
    }

    /// The cover from per-node rules: exact for single masks (O(1) for
    /// analytic ones, a scan for dense ones); combinations may answer
    /// `Unknown`.
    fn quick_cover(&self, q0: usize, q1: usize, k0: usize, k1: usize) -> Cover {
        if let Some((lo, hi)) = self.node.band() {
            // k - q takes every value in [dmin, dmax] on the rectangle.
            let dmin = to_i64(k0) - to_i64(q1 - 1);
            let dmax = to_i64(k1 - 1) - to_i64(q0);
            let lo = lo.unwrap_or(i64::MIN);
            let hi = hi.unwrap_or(i64::MAX);
            return if dmax < lo || dmin > hi {
                Cover::None
            } else if lo <= dmin && dmax <= hi {
                Cover::All
            } else {
                Cover::Mixed
            };
        }
        match &*self.node {
            Node::ChunkedCausal { chunk } => {
                let c = *chunk;
                let (cq0, cq1) = (q0 / c, (q1 - 1) / c);
                let (ck0, ck1) = (k0 / c, (k1 - 1) / c);
                if cq0 == cq1 && ck0 == ck1 && cq0 == ck0 && k1 - 1 <= q0 {
                    Cover::All
                } else if cq0.max(ck0) > cq1.min(ck1) || k0 > q1 - 1 {
                    // No chunk holds both a row and a column of the block, or
                    // every column is right of every row.
                    Cover::None
                } else {
                    Cover::Mixed
                }
            }
            Node::Dense(bits) => {
                let (mut any_true, mut any_false) = (false, false);
                for q in q0..q1 {
                    for &b in &bits[q * self.kv_len + k0..q * self.kv_len + k1] {
                        any_true |= b;
                        any_false |= !b;
                    }
                    if any_true && any_false {
                        return Cover::Mixed;
                    }
                }
                if any_true {
                    Cover::All
                } else {
                    Cover::None
                }
            }
            Node::And(a, b) => match (a.quick_cover(q0, q1, k0, k1), b.quick_cover(q0, q1, k0, k1))
            {
                (Cover::None, _) | (_, Cover::None) => Cover::None,
                (Cover::All, c) | (c, Cover::All) => c,
                _ => Cover::Unknown,
            },
            Node::Or(a, b) => {
                match (a.quick_cover(q0, q1, k0, k1), b.quick_cover(q0, q1, k0, k1)) {
                    (Cover::All, _) | (_, Cover::All) => Cover::All,
                    (Cover::None, c) | (c, Cover::None) => c,
                    _ => Cover::Unknown,
                }
            }
            Node::Not(a) => match a.quick_cover(q0, q1, k0, k1) {
                Cover::None => Cover::All,
                Cover::All => Cover::None,
                c => c,
            },
            Node::Full | Node::Causal { .. } | Node::Local { .. } => unreachable!("bands"),
        }
    }

    /// The exact cover from the allowed runs of each row (stops at the
    /// first row that shows the rectangle is mixed).
    fn row_cover(&self, q0: usize, q1: usize, k0: usize, k1: usize) -> Cover {
        let (mut any_true, mut any_false) = (false, false);
        for q in q0..q1 {
            let allowed: usize = self.row_runs(q, k0, k1).iter().map(|(a, b)| b - a).sum();
            any_true |= allowed > 0;
            any_false |= allowed < k1 - k0;
            if any_true && any_false {
                return Cover::Mixed;
            }
        }
        if any_true {
            Cover::All
        } else {
            Cover::None
        }
    }

    /// The kind of every `block_q × block_kv` block of this mask.
    ///
    /// The classification is exact: `Empty` blocks allow nothing, `Full`
    /// blocks lie inside the matrix and allow everything, and `Partial`
    /// blocks are truly mixed (a ragged last block whose in-matrix part is
    /// all allowed is `Partial`, since its positions outside the matrix are
    /// not allowed). Analytic masks cost O(1) per block and dense masks a
    /// scan of the block; for `and`/`or`/`not` combinations a block the
    /// per-mask answers do not settle (for example `and` of two partial
    /// blocks) is decided by walking the allowed runs of its rows, O(block_q
    /// × size of the combination) per such block.
    ///
    /// Block sizes of 0 are an error.
    pub fn classify(&self, block_q: usize, block_kv: usize) -> Result<BlockLayout> {
        let grid = Grid::new(self.q_len, self.kv_len, block_q, block_kv)?;
        let mut kinds = Vec::with_capacity(grid.num_blocks()?);
        for i in 0..grid.num_q_blocks {
            for j in 0..grid.num_kv_blocks {
                kinds.push(grid.kind(self, i, j));
            }
        }
        Ok(BlockLayout { grid, kinds })
    }
}

/// The most blocks [`Mask::classify`] lays out: one byte each, 256 MiB
/// (a `2^20 x 2^20` mask in blocks of 1 would take a TiB).
pub const MAX_CLASSIFIED_BLOCKS: usize = 1 << 28;

/// The block grid of a matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Grid {
    pub(super) q_len: usize,
    pub(super) kv_len: usize,
    pub(super) block_q: usize,
    pub(super) block_kv: usize,
    pub(super) num_q_blocks: usize,
    pub(super) num_kv_blocks: usize,
}

impl Grid {
    /// The grid of `block_q × block_kv` blocks (the last ones ragged).
    pub(super) fn new(
        q_len: usize,
        kv_len: usize,
        block_q: usize,
        block_kv: usize,
    ) -> Result<Grid> {
        if block_q == 0 || block_kv == 0 {
            return Err(mask_error(format!(
                "block sizes must be positive, got {block_q} x {block_kv}"
            )));
        }
        Ok(Grid {
            q_len,
            kv_len,
            block_q,
            block_kv,
            num_q_blocks: q_len.div_ceil(block_q),
            num_kv_blocks: kv_len.div_ceil(block_kv),
        })
    }

    fn num_blocks(&self) -> Result<usize> {
        self.num_q_blocks
            .checked_mul(self.num_kv_blocks)
            .filter(|&n| n <= MAX_CLASSIFIED_BLOCKS)
            .ok_or_else(|| {
                mask_error(format!(
                    "{} x {} blocks of {} x {} are more than the {MAX_CLASSIFIED_BLOCKS} a layout \
                     holds; use larger blocks",
                    self.num_q_blocks, self.num_kv_blocks, self.block_q, self.block_kv
                ))
            })
    }

    /// The in-matrix rectangle of block `(i, j)` (`None` if it has none) and
    /// whether the block lies wholly inside the matrix.
    pub(super) fn rect(&self, i: usize, j: usize) -> Option<([usize; 4], bool)> {
        let q0 = i.checked_mul(self.block_q)?;
        let k0 = j.checked_mul(self.block_kv)?;
        if q0 >= self.q_len || k0 >= self.kv_len {
            return None;
        }
        let q_end = q0.saturating_add(self.block_q);
        let k_end = k0.saturating_add(self.block_kv);
        let inside = q_end <= self.q_len && k_end <= self.kv_len;
        Some((
            [q0, q_end.min(self.q_len), k0, k_end.min(self.kv_len)],
            inside,
        ))
    }

    /// The kind of block `(i, j)` of `mask` (`Empty` outside the grid).
    pub(super) fn kind(&self, mask: &Mask, i: usize, j: usize) -> BlockKind {
        let Some(([q0, q1, k0, k1], inside)) = self.rect(i, j) else {
            return BlockKind::Empty;
        };
        match mask.cover(q0, q1, k0, k1) {
            Cover::None => BlockKind::Empty,
            Cover::All if inside => BlockKind::Full,
            _ => BlockKind::Partial,
        }
    }
}

/// The kind of every block of a mask, from [`Mask::classify`].
///
/// Blocks are numbered `(q_block, kv_block)`; block `(i, j)` covers rows
/// `i * block_q ..` and columns `j * block_kv ..` of the matrix, the last
/// row and column of blocks being ragged when the lengths are not multiples
/// of the block sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    pub(super) grid: Grid,
    /// Row-major, `num_q_blocks × num_kv_blocks`.
    pub(super) kinds: Vec<BlockKind>,
}

impl BlockLayout {
    /// Number of query positions of the mask.
    pub fn q_len(&self) -> usize {
        self.grid.q_len
    }

    /// Number of key positions of the mask.
    pub fn kv_len(&self) -> usize {
        self.grid.kv_len
    }

    /// Rows per block.
    pub fn block_q(&self) -> usize {
        self.grid.block_q
    }

    /// Columns per block.
    pub fn block_kv(&self) -> usize {
        self.grid.block_kv
    }

    /// Number of blocks along the queries: `ceil(q_len / block_q)`.
    pub fn num_q_blocks(&self) -> usize {
        self.grid.num_q_blocks
    }

    /// Number of blocks along the keys: `ceil(kv_len / block_kv)`.
    pub fn num_kv_blocks(&self) -> usize {
        self.grid.num_kv_blocks
    }

    /// The kind of block `(q_block, kv_block)`, `None` outside the grid.
    pub fn kind(&self, q_block: usize, kv_block: usize) -> Option<BlockKind> {
        if q_block >= self.num_q_blocks() || kv_block >= self.num_kv_blocks() {
            return None;
        }
        Some(self.kinds[q_block * self.num_kv_blocks() + kv_block])
    }

    /// Every block's kind, row-major (`num_q_blocks × num_kv_blocks`).
    pub fn kinds(&self) -> &[BlockKind] {
        &self.kinds
    }

    fn count(&self, kind: BlockKind) -> usize {
        self.kinds.iter().filter(|k| **k == kind).count()
    }

    /// Number of empty blocks.
    pub fn num_empty(&self) -> usize {
        self.count(BlockKind::Empty)
    }

    /// Number of full blocks.
    pub fn num_full(&self) -> usize {
        self.count(BlockKind::Full)
    }

    /// Number of partial blocks.
    pub fn num_partial(&self) -> usize {
        self.count(BlockKind::Partial)
    }

    /// The kinds of the blocks of one row of blocks (empty outside the grid).
    fn row(&self, q_block: usize) -> &[BlockKind] {
        let n = self.num_kv_blocks();
        if q_block >= self.num_q_blocks() {
            return &[];
        }
        &self.kinds[q_block * n..(q_block + 1) * n]
    }

    /// The non-empty blocks of row of blocks `q_block`, in increasing
    /// `kv_block` order, with their kinds (nothing outside the grid).
    pub fn kv_blocks_for(&self, q_block: usize) -> impl Iterator<Item = (usize, BlockKind)> + '_ {
        self.row(q_block)
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, k)| *k != BlockKind::Empty)
    }

    /// Number of non-empty blocks in row of blocks `q_block`.
    pub fn num_nonempty(&self, q_block: usize) -> usize {
        self.kv_blocks_for(q_block).count()
    }

    /// The largest number of non-empty blocks in any row of blocks.
    pub fn max_nonempty(&self) -> usize {
        (0..self.num_q_blocks())
            .map(|i| self.num_nonempty(i))
            .max()
            .unwrap_or(0)
    }

    /// The block tables for kernels that visit only non-empty blocks; see
    /// [`MaskInfo`] for their layout.
    pub fn mask_info(&self) -> Result<MaskInfo> {
        MaskInfo::stack(std::slice::from_ref(self), false)
    }
}

/// Block tables for a kernel with a dynamic block layout (splash attention's
/// "mask info"), all `s32` host tensors.
///
/// For a [`BlockLayout`] (shapes given for one layout; the tables of a
/// [`MultiHeadLayout`](super::MultiHeadLayout) have a leading head axis):
///
/// * `num_nonempty`, `[num_q_blocks]`: how many blocks of each row of
///   blocks are not empty;
/// * `kv_block_ids`, `[num_q_blocks, width]`: row `i` lists the `kv_block`
///   of those blocks in increasing order, then padding;
/// * `block_kinds`, `[num_q_blocks, width]`: the matching
///   [`BlockKind::code`]s (1 partial, 2 full), 0 for padding.
///
/// `width` is the largest `num_nonempty` (at least 1, so that traced lookups
/// into an all-empty mask's tables are well formed). Padding ids repeat the
/// row's last listed block id (0 for a row with none), so that a pipelined
/// kernel running past the end of a row does not fetch a new block.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskInfo {
    /// Non-empty blocks per row of blocks.
    pub num_nonempty: HostTensor,
    /// The non-empty blocks' `kv_block` ids, padded.
    pub kv_block_ids: HostTensor,
    /// The non-empty blocks' kind codes, 0 for padding.
    pub block_kinds: HostTensor,
}

impl MaskInfo {
    /// The tables of `layouts` (same grid), stacked along a leading axis if
    /// `head_axis`.
    pub(super) fn stack(layouts: &[BlockLayout], head_axis: bool) -> Result<MaskInfo> {
        let nq = layouts.first().map_or(0, |l| l.num_q_blocks());
        let width = layouts
            .iter()
            .map(BlockLayout::max_nonempty)
            .max()
            .unwrap_or(0)
            .max(1);
        let s32 = |x: usize| {
            i32::try_from(x).map_err(|_| mask_error(format!("{x} does not fit the s32 tables")))
        };
        let mut counts = Vec::with_capacity(layouts.len() * nq);
        let mut ids = Vec::with_capacity(layouts.len() * nq * width);
        let mut kinds = Vec::with_capacity(layouts.len() * nq * width);
        for layout in layouts {
            for i in 0..nq {
                let start = ids.len();
                for (j, kind) in layout.kv_blocks_for(i) {
                    ids.push(s32(j)?);
                    kinds.push(kind.code());
                }
                counts.push(s32(ids.len() - start)?);
                let pad = if ids.len() > start {
                    ids[ids.len() - 1]
                } else {
                    0
                };
                ids.resize(start + width, pad);
                kinds.resize(start + width, 0);
            }
        }
        let (count_shape, table_shape) = if head_axis {
            (vec![layouts.len(), nq], vec![layouts.len(), nq, width])
        } else {
            (vec![nq], vec![nq, width])
        };
        Ok(MaskInfo {
            num_nonempty: HostTensor::from_vec(counts, count_shape)?,
            kv_block_ids: HostTensor::from_vec(ids, table_shape.clone())?,
            block_kinds: HostTensor::from_vec(kinds, table_shape)?,
        })
    }
}
