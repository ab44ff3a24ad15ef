//! `map_blocks`: one function applied to every block of an axis, either as
//! a traced loop over the blocks or as one batched computation.
//!
//! The library picks the batched form by default: the blocks are stacked
//! along a new leading axis and the function runs once over all of them, so
//! XLA fuses the work and there is no loop to step through (on the CPU
//! plugin it is the faster form at every size we measured). The loop form
//! keeps only one block live at a time, for when the stacked copy would not
//! fit. Both give the same result; `tests/tiling.rs` compares them.

use crate::error::Location;
use crate::ops::control::fori_loop;
use crate::tile::blocks::block_size;
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

/// How `map_blocks` runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BlockMode {
    /// The library's choice (currently [`BlockMode::Batched`]).
    #[default]
    Auto,
    /// One traced loop, one block at a time.
    Loop,
    /// All blocks at once, stacked along a new leading axis.
    Batched,
}

impl Tensor {
    /// Applies `f` to every block of `axis` (at the kernel's block size; the
    /// last block padded with zeros) and assembles the results. `f` maps a
    /// block to a block of the same shape and must accept extra leading
    /// (batch) axes: write it with negative axes (`sum(&[-1])`,
    /// `softmax(-1)`) and batch-polymorphic ops (elementwise, `matmul`).
    #[track_caller]
    pub fn map_blocks(self, axis: isize, f: impl Fn(Tensor) -> Tensor) -> Tensor {
        self.map_blocks_with(axis, BlockMode::Auto, f)
    }

    /// [`Tensor::map_blocks`] in a chosen form.
    #[track_caller]
    pub fn map_blocks_with(
        self,
        axis: isize,
        mode: BlockMode,
        f: impl Fn(Tensor) -> Tensor,
    ) -> Tensor {
        let loc = Location::caller();
        let spec = self.spec();
        let Some(a) = normalize_axis(axis, spec.rank()) else {
            let m = format!("axis {axis} is out of range for {spec}");
            return build("map_blocks", &[self], loc, 1, move |_| Err(m))[0];
        };
        let n = spec.shape[a];
        let bs = block_size().unwrap_or(n.max(1)).min(n.max(1));
        let nb = n.div_ceil(bs);
        match mode {
            BlockMode::Loop => fori_loop(0, nb as i32, self.zeros_like(), |b, acc| {
                acc.set_block(a as isize, b, f(self.block_sized(a as isize, b, bs, 0.0)))
            }),
            BlockMode::Auto | BlockMode::Batched => {
                let x = self.pad_to_multiple(a as isize, bs, 0.0);
                // [.., nb * bs, ..] -> [.., nb, bs, ..] -> [nb, .., bs, ..]
                let mut split: Vec<isize> = spec.shape.iter().map(|&d| d as isize).collect();
                split[a] = bs as isize;
                split.insert(a, nb as isize);
                let mut perm: Vec<usize> = vec![a];
                perm.extend((0..=spec.rank()).filter(|&i| i != a));
                let stacked = x.reshape(&split).transpose(&perm);
                let y = f(stacked);
                if y.shape() != stacked.shape() || y.dtype() != stacked.dtype() {
                    let m = format!(
                        "map_blocks needs the function to keep the block's shape: {} became {}",
                        stacked.spec(),
                        y.spec()
                    );
                    return build("map_blocks", &[self], loc, 1, move |_| Err(m))[0];
                }
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                let mut joined: Vec<isize> = spec.shape.iter().map(|&d| d as isize).collect();
                joined[a] = (nb * bs) as isize;
                y.transpose(&inverse)
                    .reshape(&joined)
                    .slice_axis(a as isize, 0, n)
            }
        }
    }
}
