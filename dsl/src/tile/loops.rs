//! The tiling types as traced loop sources: `for b in blocks(n)` and
//! `for (i, j) in grid((..))` become one XLA while through the kernel
//! language's [`LoopSource`] trait, implemented here so that the language
//! layer knows nothing of tiling.

use crate::dtype::DType;
use crate::ir::BinaryOp;
use crate::lang::{LoopSource, RangeLoop, TracedLoop};
use crate::ops::carry::Carry;
use crate::ops::constant::full_at;
use crate::ops::elementwise::binary_at;
use crate::tile::{Blocks, Grid2, Grid3};
use crate::trace::tensor::Tensor;

impl LoopSource for Blocks {
    type Driver = RangeLoop;
    #[track_caller]
    fn driver(self) -> RangeLoop {
        RangeLoop::new(0usize, self.count())
    }
}

/// A traced loop over a 2-D grid of blocks.
pub struct GridLoop2 {
    inner: RangeLoop,
    cols: usize,
}

impl LoopSource for Grid2 {
    type Driver = GridLoop2;
    #[track_caller]
    fn driver(self) -> GridLoop2 {
        GridLoop2 {
            inner: RangeLoop::new(0usize, self.0.count() * self.1.count()),
            cols: self.1.count(),
        }
    }
}

impl TracedLoop for GridLoop2 {
    type Index = (Tensor, Tensor);
    fn enter<S: Carry>(&mut self, state: S) -> S {
        self.inner.enter(state)
    }
    /// The (row, column) block indices.
    fn index(&self) -> (Tensor, Tensor) {
        let loc = self.inner.loc.clone();
        let flat = self.inner.index();
        let c = full_at(Vec::new(), self.cols as f64, DType::S32, loc.clone());
        (
            binary_at(flat, c, BinaryOp::Div, loc.clone()),
            binary_at(flat, c, BinaryOp::Rem, loc),
        )
    }
    fn finish<S: Carry>(self, state: S) -> S {
        self.inner.finish(state)
    }
}

/// A traced loop over a 3-D grid of blocks.
pub struct GridLoop3 {
    inner: RangeLoop,
    dims: (usize, usize),
}

impl LoopSource for Grid3 {
    type Driver = GridLoop3;
    #[track_caller]
    fn driver(self) -> GridLoop3 {
        GridLoop3 {
            inner: RangeLoop::new(0usize, self.0.count() * self.1.count() * self.2.count()),
            dims: (self.1.count(), self.2.count()),
        }
    }
}

impl TracedLoop for GridLoop3 {
    type Index = (Tensor, Tensor, Tensor);
    fn enter<S: Carry>(&mut self, state: S) -> S {
        self.inner.enter(state)
    }
    /// The block indices, the last axis fastest.
    fn index(&self) -> (Tensor, Tensor, Tensor) {
        let loc = self.inner.loc.clone();
        let flat = self.inner.index();
        let k = |v: usize| full_at(Vec::new(), v as f64, DType::S32, loc.clone());
        let (b, c) = self.dims;
        let i = binary_at(flat, k(b * c), BinaryOp::Div, loc.clone());
        let rest = binary_at(flat, k(b * c), BinaryOp::Rem, loc.clone());
        (
            i,
            binary_at(rest, k(c), BinaryOp::Div, loc.clone()),
            binary_at(rest, k(c), BinaryOp::Rem, loc),
        )
    }
    fn finish<S: Carry>(self, state: S) -> S {
        self.inner.finish(state)
    }
}
