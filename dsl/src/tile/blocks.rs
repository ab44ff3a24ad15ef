//! Blocks and grids: the tiles of an axis at the kernel's `block_size`,
//! reading and writing them with dynamic slices, and auto-padding.
//!
//! Auto-padding is virtual: when an axis is not a multiple of the block
//! size, reading its last block returns the in-range elements followed by a
//! pad value the kernel chooses (0 by default; `-inf` for attention
//! logits), and writing it stores only the in-range part. No padded copy of
//! the whole tensor is made: each ragged access reads the block at a clamped
//! start and shifts it, which costs one block. With `auto_pad = false` a
//! ragged axis is a trace error instead.

use crate::config::Platform;
use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{BinaryOp, Comparison};
use crate::lang::LoopBound;
use crate::ops::constant::full_at;
use crate::ops::elementwise::{binary_at, compare_at};
use crate::trace::tensor::{normalize_axis, Tensor};
use crate::trace::{build, with_state};

/// The TPU tiling rule, quoted in block-size errors.
pub const TPU_RULE: &str =
    "on TPU a block's last two dimensions must be divisible by 8 and 128 respectively \
                            (or equal the array's full extent)";

/// The tiles of one axis of extent `extent`, `block` elements each (the last
/// one ragged when `extent` is not a multiple).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocks {
    /// The axis extent.
    pub extent: usize,
    /// Elements per block.
    pub block: usize,
}

impl Blocks {
    /// Number of blocks, `ceil(extent / block)`.
    pub fn count(&self) -> usize {
        self.extent.div_ceil(self.block.max(1))
    }

    /// Whether the last block is ragged.
    pub fn ragged(&self) -> bool {
        self.block > 0 && !self.extent.is_multiple_of(self.block)
    }
}

impl IntoIterator for Blocks {
    type Item = usize;
    type IntoIter = std::ops::Range<usize>;
    /// The block indices, for `#[unroll] for b in blocks(n)`.
    fn into_iter(self) -> Self::IntoIter {
        0..self.count()
    }
}

/// The kernel's block size (`None` for kernels without tiling).
pub fn block_size() -> Option<usize> {
    with_state(|s| s.options.block_size).flatten()
}

/// The tiles of an axis of extent `n` at the kernel's `block_size`; a
/// kernel without a block size (`cpu_kernel`) has one block of `n`.
///
/// In a kernel body, `for b in blocks(n)` that assigns outer variables is
/// one XLA `while` with a traced block index `b`.
#[track_caller]
pub fn blocks(n: usize) -> Blocks {
    blocks_of(n, block_size().unwrap_or(n.max(1)))
}

/// The tiles of an axis of extent `n`, `block` elements each.
#[track_caller]
pub fn blocks_of(n: usize, block: usize) -> Blocks {
    if block == 0 {
        let loc = Location::caller();
        crate::trace::tensor::fail(
            "blocks",
            &[],
            "the block size must be at least 1".into(),
            &loc,
        );
        return Blocks {
            extent: n,
            block: n.max(1),
        };
    }
    Blocks { extent: n, block }
}

/// A 2-D grid of blocks: `for (i, j) in grid((blocks(m), blocks(n)))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid2(pub Blocks, pub Blocks);

/// A 3-D grid of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid3(pub Blocks, pub Blocks, pub Blocks);

/// Axes a grid can be made of.
pub trait GridAxes {
    /// The grid type.
    type Grid;
    /// Makes the grid.
    fn grid(self) -> Self::Grid;
}

impl GridAxes for (Blocks, Blocks) {
    type Grid = Grid2;
    fn grid(self) -> Grid2 {
        Grid2(self.0, self.1)
    }
}

impl GridAxes for (Blocks, Blocks, Blocks) {
    type Grid = Grid3;
    fn grid(self) -> Grid3 {
        Grid3(self.0, self.1, self.2)
    }
}

/// A grid over several block axes, iterated row-major (the last axis fastest).
pub fn grid<A: GridAxes>(axes: A) -> A::Grid {
    axes.grid()
}

impl IntoIterator for Grid2 {
    type Item = (usize, usize);
    type IntoIter = std::vec::IntoIter<(usize, usize)>;
    fn into_iter(self) -> Self::IntoIter {
        let (a, b) = (self.0.count(), self.1.count());
        (0..a)
            .flat_map(|i| (0..b).map(move |j| (i, j)))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl IntoIterator for Grid3 {
    type Item = (usize, usize, usize);
    type IntoIter = std::vec::IntoIter<(usize, usize, usize)>;
    fn into_iter(self) -> Self::IntoIter {
        let (a, b, c) = (self.0.count(), self.1.count(), self.2.count());
        (0..a)
            .flat_map(|i| (0..b).flat_map(move |j| (0..c).map(move |k| (i, j, k))))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

/// What is wrong with blocks of `bs` elements along `axis` of a rank-`rank`
/// tensor whose extent there is `n`, under the tiling rules of the trace
/// being built (its platform and `auto_pad`; the CPU's rules outside a
/// trace); `None` if they tile it. What a block read or write reports as an
/// error (op `block`), for a kernel that checks its options before it
/// builds anything.
///
/// ```
/// use tessel_dsl::tile::blocks::block_size_problem;
/// assert!(block_size_problem(16, 1, 2, 40).is_none());
/// assert!(block_size_problem(40, 1, 2, 40).is_none()); // the whole axis
/// assert!(block_size_problem(12, 1, 2, 40).unwrap().contains("multiple of 8"));
/// ```
pub fn block_size_problem(bs: usize, axis: usize, rank: usize, n: usize) -> Option<String> {
    check_block(bs, axis, rank, n).err()
}

/// Checks a block size against the platform's tiling rules for `axis` of a
/// rank-`rank` tensor of extent `n`.
fn check_block(bs: usize, axis: usize, rank: usize, n: usize) -> Result<(), String> {
    if bs == 0 {
        return Err("the block size must be at least 1".into());
    }
    if bs == n {
        return Ok(());
    }
    let platform = with_state(|s| s.options.platform).unwrap_or(Platform::Cpu);
    if !bs.is_multiple_of(8) && bs < n {
        return Err(format!(
            "block size {bs} is not a multiple of 8 (tiles are made of 8-row sublanes; {TPU_RULE})"
        ));
    }
    if platform == Platform::Tpu && axis + 1 == rank && !bs.is_multiple_of(128) && bs < n {
        return Err(format!(
            "block size {bs} on the minor (last) axis is not a multiple of 128: {TPU_RULE}"
        ));
    }
    let auto_pad = with_state(|s| s.options.auto_pad).unwrap_or(true);
    if !auto_pad && !n.is_multiple_of(bs) {
        return Err(format!(
            "axis {axis} has extent {n}, not a multiple of the block size {bs}, and auto_pad = false; \
             pad the input or set auto_pad = true"
        ));
    }
    Ok(())
}

/// `start` as an s32 scalar tensor.
fn s32(v: usize, loc: &Location) -> Tensor {
    full_at(Vec::new(), v as f64, DType::S32, loc.clone())
}

/// Starts for a dynamic slice: `start` on `axis`, 0 elsewhere.
fn starts_at(rank: usize, axis: usize, start: Tensor, loc: &Location) -> Vec<Tensor> {
    (0..rank)
        .map(|a| if a == axis { start } else { s32(0, loc) })
        .collect()
}

fn sizes_with(shape: &[usize], axis: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[axis] = size;
    s
}

/// Block `b` (a Rust integer or a traced integer scalar) of `bs` elements
/// along `axis`, virtually padded with `pad` past the end.
pub(crate) fn read_block(
    x: Tensor,
    axis: isize,
    b: impl LoopBound,
    bs: usize,
    pad: f64,
    loc: Location,
) -> Tensor {
    let spec = x.spec();
    let Some(a) = normalize_axis(axis, spec.rank()) else {
        let m = format!("axis {axis} is out of range for {spec}");
        return build("block", &[x], loc, 1, move |_| Err(m))[0];
    };
    let n = spec.shape[a];
    if let Err(m) = check_block(bs, a, spec.rank(), n) {
        return build("block", &[x], loc, 1, move |_| Err(m))[0];
    }
    let start = binary_at(b.to_s32(&loc), s32(bs, &loc), BinaryOp::Mul, loc.clone());
    if n < bs {
        // One partial block: the whole axis, padded.
        let mut high = vec![0i64; spec.rank()];
        high[a] = (bs - n) as i64;
        let zeros = vec![0i64; spec.rank()];
        return x.pad(pad_value(pad, spec.dtype, &loc), &zeros, &high, &zeros);
    }
    let limit = s32(n - bs, &loc);
    let clamped = binary_at(start, limit, BinaryOp::Min, loc.clone());
    let window = x.dynamic_slice(
        &starts_at(spec.rank(), a, clamped, &loc),
        &sizes_with(&spec.shape, a, bs),
    );
    if n.is_multiple_of(bs) {
        return window;
    }
    // The last block starts `delta` past the clamped start: shift it down and fill with `pad`.
    let delta = binary_at(start, clamped, BinaryOp::Sub, loc.clone());
    let fill = full_at(sizes_with(&spec.shape, a, bs), pad, spec.dtype, loc.clone());
    let ext = crate::ops::shape::concat(&[window, fill], a as isize);
    ext.dynamic_slice(
        &starts_at(spec.rank(), a, delta, &loc),
        &sizes_with(&spec.shape, a, bs),
    )
}

fn pad_value(pad: f64, dtype: DType, loc: &Location) -> Tensor {
    full_at(Vec::new(), pad, dtype, loc.clone())
}

/// `x` with block `b` along `axis` replaced by `value` (only its in-range part
/// is stored).
pub(crate) fn write_block(
    x: Tensor,
    axis: isize,
    b: impl LoopBound,
    value: Tensor,
    loc: Location,
) -> Tensor {
    let spec = x.spec();
    let Some(a) = normalize_axis(axis, spec.rank()) else {
        let m = format!("axis {axis} is out of range for {spec}");
        return build("set_block", &[x, value], loc, 1, move |_| Err(m))[0];
    };
    let vs = value.spec();
    if vs.rank() != spec.rank()
        || vs.dtype != spec.dtype
        || (0..spec.rank()).any(|i| i != a && vs.shape[i] != spec.shape[i])
    {
        let m =
            format!("a block of {spec} along axis {a} must match it outside that axis, got {vs}");
        return build("set_block", &[x, value], loc, 1, move |_| Err(m))[0];
    }
    let (n, bs) = (spec.shape[a], vs.shape[a]);
    if let Err(m) = check_block(bs, a, spec.rank(), n) {
        return build("set_block", &[x, value], loc, 1, move |_| Err(m))[0];
    }
    let start = binary_at(b.to_s32(&loc), s32(bs, &loc), BinaryOp::Mul, loc.clone());
    if n < bs {
        return value.slice_axis(a as isize, 0, n);
    }
    let limit = s32(n - bs, &loc);
    let clamped = binary_at(start, limit, BinaryOp::Min, loc.clone());
    let starts = starts_at(spec.rank(), a, clamped, &loc);
    if n.is_multiple_of(bs) {
        return x.dynamic_update_slice(value, &starts);
    }
    let delta = binary_at(start, clamped, BinaryOp::Sub, loc.clone());
    let old = x.dynamic_slice(&starts, &sizes_with(&spec.shape, a, bs));
    let zeros = full_at(sizes_with(&spec.shape, a, bs), 0.0, spec.dtype, loc.clone());
    let v2 = crate::ops::shape::concat(&[zeros, value], a as isize);
    let shift = binary_at(s32(bs, &loc), delta, BinaryOp::Sub, loc.clone());
    let shifted = v2.dynamic_slice(
        &starts_at(spec.rank(), a, shift, &loc),
        &sizes_with(&spec.shape, a, bs),
    );
    let pos = Tensor::iota(sizes_with(&spec.shape, a, bs), a, DType::S32);
    let keep_new = compare_at(pos, delta, Comparison::Ge, loc.clone());
    let merged = keep_new.select(shifted, old);
    x.dynamic_update_slice(merged, &starts)
}

impl Tensor {
    /// Block `b` along `axis` at the kernel's block size (`b` a Rust integer or
    /// a traced integer scalar); past the end it reads 0.
    #[track_caller]
    pub fn block(self, axis: isize, b: impl LoopBound) -> Tensor {
        self.block_or(axis, b, 0.0)
    }

    /// Block `b` along `axis` at the kernel's block size, reading `pad` past the
    /// end (for example `f64::NEG_INFINITY` for attention logits).
    #[track_caller]
    pub fn block_or(self, axis: isize, b: impl LoopBound, pad: f64) -> Tensor {
        let loc = Location::caller();
        let n = normalize_axis(axis, self.rank())
            .map(|a| self.shape()[a])
            .unwrap_or(1);
        let bs = block_size().unwrap_or(n.max(1));
        read_block(self, axis, b, bs, pad, loc)
    }

    /// Block `b` of `size` elements along `axis`, reading `pad` past the end.
    #[track_caller]
    pub fn block_sized(self, axis: isize, b: impl LoopBound, size: usize, pad: f64) -> Tensor {
        read_block(self, axis, b, size, pad, Location::caller())
    }

    /// `self` with block `b` along `axis` replaced by `value` (whose extent on
    /// `axis` is the block size); past the end nothing is written.
    #[track_caller]
    pub fn set_block(self, axis: isize, b: impl LoopBound, value: Tensor) -> Tensor {
        write_block(self, axis, b, value, Location::caller())
    }
}
