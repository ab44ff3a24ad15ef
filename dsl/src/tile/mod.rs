//! Tiling: blocks and grids at the kernel's block size, block reads and
//! writes with virtual auto-padding, block-sparse matrices, and block masks
//! computed lazily at block granularity.

pub mod blocks;
pub mod loops;
pub mod map;
pub mod mask;
pub mod sparse;

pub use blocks::{block_size, blocks, blocks_of, grid, Blocks, Grid2, Grid3, GridAxes, TPU_RULE};
pub use loops::{GridLoop2, GridLoop3};
pub use map::BlockMode;
pub use mask::{BlockIndex, BlockKind, BlockLayout, Mask, MaskInfo, MultiHeadMask};
pub use sparse::{
    BlockSparse, BlockSparseOf, BlockSparseSpec, Coords, HostBlockSparse, SparseBlock,
};
