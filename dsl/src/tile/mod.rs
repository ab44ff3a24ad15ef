//! Tiling: blocks and grids at the kernel's block size, block reads and
//! writes with virtual auto-padding.

pub mod blocks;
pub mod sparse;

pub use blocks::{block_size, blocks, blocks_of, grid, Blocks, Grid2, Grid3, GridAxes, TPU_RULE};
pub use sparse::{BlockSparse, BlockSparseOf, BlockSparseSpec, Coords, DeviceBlockSparse, HostBlockSparse, SparseBlock};
