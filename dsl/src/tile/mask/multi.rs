//! Masks with one mask per attention head.

use super::classify::{BlockKind, BlockLayout, MaskInfo};
use super::trace::BlockIndex;
use super::{mask_error, Mask};
use crate::error::{Location, Result};
use crate::trace::tensor::{fail, Tensor};

/// One [`Mask`] per attention head, all of the same shape, or one mask
/// shared by every head (stored and classified once).
///
/// ```
/// use tessel_dsl::tile::mask::{BlockKind, Mask, MultiHeadMask};
/// let heads = MultiHeadMask::new(vec![
///     Mask::causal(256, 256),
///     Mask::local(256, 256, Some(63), Some(0)),
/// ])?;
/// let layout = heads.classify(64, 64)?;
/// assert_eq!(layout.head(1).unwrap().kind(3, 0), Some(BlockKind::Empty));
/// // Block (3, 0) is full for head 0 but empty for head 1.
/// assert_eq!(layout.union().kind(3, 0), Some(BlockKind::Partial));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiHeadMask {
    heads: Heads,
}

#[derive(Clone, Debug)]
enum Heads {
    PerHead(Vec<Mask>),
    Shared { mask: Mask, num_heads: usize },
}

impl MultiHeadMask {
    /// One mask per head; there must be at least one, all of the same shape.
    pub fn new(heads: Vec<Mask>) -> Result<MultiHeadMask> {
        let Some(first) = heads.first() else {
            return Err(mask_error("a multi-head mask needs at least one head"));
        };
        if let Some((h, m)) = heads
            .iter()
            .enumerate()
            .find(|(_, m)| m.shape() != first.shape())
        {
            return Err(mask_error(format!(
                "head {h} has a {} x {} mask but head 0 a {} x {} one",
                m.q_len(),
                m.kv_len(),
                first.q_len(),
                first.kv_len()
            )));
        }
        Ok(MultiHeadMask {
            heads: Heads::PerHead(heads),
        })
    }

    /// `mask` for each of `num_heads` heads (at least one).
    pub fn shared(mask: Mask, num_heads: usize) -> Result<MultiHeadMask> {
        if num_heads == 0 {
            return Err(mask_error("a multi-head mask needs at least one head"));
        }
        Ok(MultiHeadMask {
            heads: Heads::Shared { mask, num_heads },
        })
    }

    /// Number of heads.
    pub fn num_heads(&self) -> usize {
        match &self.heads {
            Heads::PerHead(v) => v.len(),
            Heads::Shared { num_heads, .. } => *num_heads,
        }
    }

    /// Whether one mask is shared by every head.
    pub fn is_shared(&self) -> bool {
        matches!(self.heads, Heads::Shared { .. })
    }

    /// The mask of head `head`, `None` past the last head.
    pub fn head(&self, head: usize) -> Option<&Mask> {
        match &self.heads {
            Heads::PerHead(v) => v.get(head),
            Heads::Shared { mask, num_heads } => (head < *num_heads).then_some(mask),
        }
    }

    fn first(&self) -> &Mask {
        match &self.heads {
            Heads::PerHead(v) => &v[0],
            Heads::Shared { mask, .. } => mask,
        }
    }

    /// Number of query positions of every head's mask.
    pub fn q_len(&self) -> usize {
        self.first().q_len()
    }

    /// Number of key positions of every head's mask.
    pub fn kv_len(&self) -> usize {
        self.first().kv_len()
    }

    /// All heads' masks as row-major bits, `[num_heads, q_len, kv_len]`.
    pub fn to_dense(&self) -> Vec<bool> {
        (0..self.num_heads())
            .flat_map(|h| self.head(h).map(Mask::to_dense).unwrap_or_default())
            .collect()
    }

    /// Every head's [`BlockLayout`] and their union; see [`Mask::classify`].
    /// A shared mask is classified once.
    pub fn classify(&self, block_q: usize, block_kv: usize) -> Result<MultiHeadLayout> {
        let heads = match &self.heads {
            Heads::PerHead(v) => v
                .iter()
                .map(|m| m.classify(block_q, block_kv))
                .collect::<Result<Vec<_>>>()?,
            Heads::Shared { mask, num_heads } => {
                vec![mask.classify(block_q, block_kv)?; *num_heads]
            }
        };
        let mut union = heads[0].clone();
        for layout in &heads[1..] {
            for (u, k) in union.kinds.iter_mut().zip(&layout.kinds) {
                if *u != *k {
                    *u = BlockKind::Partial;
                }
            }
        }
        Ok(MultiHeadLayout { heads, union })
    }

    /// The element mask of block `(q_block, kv_block)` of head `head`; see
    /// [`Mask::block_mask`]. A head past the last is a trace error.
    #[track_caller]
    pub fn block_mask(
        &self,
        head: usize,
        q_block: impl Into<BlockIndex>,
        kv_block: impl Into<BlockIndex>,
        block_q: usize,
        block_kv: usize,
    ) -> Tensor {
        let loc = Location::caller();
        match self.head(head) {
            Some(m) => m.block_mask_at(q_block.into(), kv_block.into(), block_q, block_kv, &loc),
            None => {
                let m = format!(
                    "head {head} is out of range for a mask of {} heads",
                    self.num_heads()
                );
                fail("block_mask", &[], m, &loc);
                Tensor::full(vec![block_q, block_kv], 0.0, crate::dtype::DType::Pred)
            }
        }
    }
}

/// The block layouts of a [`MultiHeadMask`], from [`MultiHeadMask::classify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiHeadLayout {
    heads: Vec<BlockLayout>,
    union: BlockLayout,
}

impl MultiHeadLayout {
    /// Number of heads.
    pub fn num_heads(&self) -> usize {
        self.heads.len()
    }

    /// The layout of head `head`, `None` past the last head.
    pub fn head(&self, head: usize) -> Option<&BlockLayout> {
        self.heads.get(head)
    }

    /// Every head's layout.
    pub fn heads(&self) -> &[BlockLayout] {
        &self.heads
    }

    /// One layout for all heads: a block is `Empty` only if it is empty for
    /// every head, `Full` only if it is full for every head, and `Partial`
    /// otherwise (so a union `Partial` block may be empty for some heads and
    /// full for others: it needs the per-head element masks).
    pub fn union(&self) -> &BlockLayout {
        &self.union
    }

    /// Every head's [`MaskInfo`] tables stacked along a leading head axis
    /// (`[num_heads, num_q_blocks]` and `[num_heads, num_q_blocks, width]`,
    /// `width` being the largest row count over all heads).
    pub fn mask_info(&self) -> Result<MaskInfo> {
        MaskInfo::stack(&self.heads, true)
    }
}
