//! Tiling helpers for blocked kernels: attention masks classified per block ([`mask`]).
pub mod mask;
