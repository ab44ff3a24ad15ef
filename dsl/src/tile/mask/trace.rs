//! Element masks of single blocks, traced as `pred` tensors.

use super::classify::{Cover, Grid};
use super::{to_i64, Mask, Node};
use crate::dtype::DType;
use crate::error::Location;
use crate::host::HostTensor;
use crate::shape::TensorSpec;
use crate::trace::tensor::{fail, Tensor};

/// A block index for [`Mask::block_mask`]: a Rust `usize` known while
/// tracing, or a traced integer scalar (cast to `s32`).
#[derive(Clone, Copy, Debug)]
pub enum BlockIndex {
    /// Known while tracing.
    Static(usize),
    /// A rank-0 integer tensor of the trace.
    Traced(Tensor),
}

impl From<usize> for BlockIndex {
    fn from(i: usize) -> Self {
        BlockIndex::Static(i)
    }
}

impl From<Tensor> for BlockIndex {
    fn from(t: Tensor) -> Self {
        BlockIndex::Traced(t)
    }
}

impl From<&Tensor> for BlockIndex {
    fn from(t: &Tensor) -> Self {
        BlockIndex::Traced(*t)
    }
}

/// The first row (or column) of a block.
#[derive(Clone, Copy)]
enum Start {
    Static(usize),
    /// An `s32` scalar.
    Traced(Tensor),
}

impl Start {
    fn tensor(self) -> Tensor {
        match self {
            Start::Static(s) => Tensor::scalar(s as f64, DType::S32),
            Start::Traced(t) => t,
        }
    }
}

/// What the nodes of a mask need to trace one block.
struct Ctx<'a> {
    shape: [usize; 2],
    /// Row and column of every element, `s32[block_q, block_kv]`.
    q_pos: Tensor,
    k_pos: Tensor,
    q_start: Start,
    k_start: Start,
    grid: &'a Grid,
    /// The in-matrix rectangle, when both indices are static.
    rect: Option<[usize; 4]>,
}

fn constant(shape: [usize; 2], value: bool) -> Tensor {
    Tensor::full(shape.to_vec(), f64::from(u8::from(value)), DType::Pred)
}

impl Mask {
    /// The element mask of block `(q_block, kv_block)` of `block_q ×
    /// block_kv` blocks: a `pred[block_q, block_kv]` tensor whose element
    /// `(r, c)` says whether `(q_block * block_q + r, kv_block * block_kv + c)`
    /// is allowed. Positions outside the matrix — in a ragged last block, or
    /// in a block outside the grid (including a negative traced index) — are
    /// `false`.
    ///
    /// Indices are [`BlockIndex`]es: a `usize` or a traced integer scalar.
    /// Analytic masks become `iota`s and comparisons. A dense mask at static
    /// indices becomes a constant of just that block; at a traced index the
    /// *whole* mask (padded to whole blocks) is embedded as a constant and
    /// sliced with `dynamic_slice`. With static indices, parts of a
    /// combination that are empty or full on the block become constants.
    ///
    /// Errors are recorded on the trace (the kernel fails to trace): block
    /// sizes of 0, a traced index that is not an integer scalar, and a
    /// padded matrix whose extents do not fit `s32`.
    #[track_caller]
    pub fn block_mask(
        &self,
        q_block: impl Into<BlockIndex>,
        kv_block: impl Into<BlockIndex>,
        block_q: usize,
        block_kv: usize,
    ) -> Tensor {
        let loc = Location::caller();
        self.block_mask_at(q_block.into(), kv_block.into(), block_q, block_kv, &loc)
    }

    pub(super) fn block_mask_at(
        &self,
        q_block: BlockIndex,
        kv_block: BlockIndex,
        block_q: usize,
        block_kv: usize,
        loc: &Location,
    ) -> Tensor {
        let shape = [block_q, block_kv];
        let grid = match Grid::new(self.q_len, self.kv_len, block_q, block_kv) {
            Ok(g) => g,
            Err(e) => {
                fail("block_mask", &[], e.to_string(), loc);
                return constant(shape, false);
            }
        };
        let operands: Vec<Tensor> = [q_block, kv_block]
            .iter()
            .filter_map(|b| match b {
                BlockIndex::Traced(t) => Some(*t),
                BlockIndex::Static(_) => None,
            })
            .collect();
        for t in &operands {
            let spec = t.spec();
            if spec.rank() != 0 || !spec.dtype.is_integer() {
                let m = format!("a traced block index must be an integer scalar, got {spec}");
                fail("block_mask", &operands, m, loc);
                return constant(shape, false);
            }
        }
        let padded = |n: usize, b: usize| n.div_ceil(b).max(1).checked_mul(b);
        let fits = |x: Option<usize>| x.is_some_and(|x| i32::try_from(x).is_ok());
        if !fits(padded(self.q_len, block_q)) || !fits(padded(self.kv_len, block_kv)) {
            let m = format!(
                "a {} x {} mask in {block_q} x {block_kv} blocks has positions beyond the s32 range",
                self.q_len, self.kv_len
            );
            fail("block_mask", &operands, m, loc);
            return constant(shape, false);
        }

        // A static index outside the grid: nothing of the block is in the matrix.
        let outside =
            |b: BlockIndex, count: usize| matches!(b, BlockIndex::Static(i) if i >= count);
        if outside(q_block, grid.num_q_blocks) || outside(kv_block, grid.num_kv_blocks) {
            return constant(shape, false);
        }
        let mut rect = None;
        if let (BlockIndex::Static(i), BlockIndex::Static(j)) = (q_block, kv_block) {
            match grid.rect(i, j) {
                None => return constant(shape, false),
                Some((r, inside)) => match self.cover(r[0], r[1], r[2], r[3]) {
                    Cover::None => return constant(shape, false),
                    Cover::All if inside => return constant(shape, true),
                    _ => rect = Some(r),
                },
            }
        }

        // Block starts and validity of traced indices.
        let mut valid: Option<Tensor> = None;
        let mut start = |b: BlockIndex, size: usize, count: usize| match b {
            BlockIndex::Static(i) => Start::Static(i * size),
            BlockIndex::Traced(t) => {
                // Range-check before narrowing, in a type that holds `count`.
                let wide = if t.dtype() == DType::S32 {
                    t
                } else {
                    t.cast(DType::S64)
                };
                let ok = wide.ge(0) & wide.lt(count);
                valid = Some(valid.map_or(ok, |v| v & ok));
                Start::Traced(t.cast(DType::S32) * size)
            }
        };
        let q_start = start(q_block, block_q, grid.num_q_blocks);
        let k_start = start(kv_block, block_kv, grid.num_kv_blocks);
        let pos = |dim: usize, s: Start| {
            let iota = Tensor::iota(shape.to_vec(), dim, DType::S32);
            match s {
                Start::Static(0) => iota,
                s => iota + s.tensor(),
            }
        };
        let ctx = Ctx {
            shape,
            q_pos: pos(0, q_start),
            k_pos: pos(1, k_start),
            q_start,
            k_start,
            grid: &grid,
            rect,
        };
        let mut out = self.trace_node(&ctx);
        // Rows and columns past the end of the matrix.
        let ragged = |s: Start, b: usize, len: usize| match s {
            Start::Static(s) => s + b > len,
            Start::Traced(_) => true,
        };
        if ragged(q_start, block_q, self.q_len) {
            out = out & ctx.q_pos.lt(self.q_len);
        }
        if ragged(k_start, block_kv, self.kv_len) {
            out = out & ctx.k_pos.lt(self.kv_len);
        }
        if let Some(v) = valid {
            out = out & v;
        }
        out
    }

    /// This node's predicate on the block (unspecified outside the matrix).
    fn trace_node(&self, ctx: &Ctx) -> Tensor {
        if let Some([q0, q1, k0, k1]) = ctx.rect {
            match self.cover(q0, q1, k0, k1) {
                Cover::None => return constant(ctx.shape, false),
                Cover::All => return constant(ctx.shape, true),
                _ => {}
            }
        }
        if let Some((lo, hi)) = self.node.band() {
            // In the matrix, k - q lies in (-q_len, kv_len): clamp the bounds
            // there (so they fit s32) and drop those that always hold.
            let (min_d, max_d) = (-to_i64(self.q_len), to_i64(self.kv_len));
            let d = ctx.k_pos - ctx.q_pos;
            let mut out: Option<Tensor> = None;
            let mut and = |t: Tensor| out = Some(out.map_or(t, |o| o & t));
            if let Some(lo) = lo.filter(|&lo| lo > min_d) {
                and(d.ge(lo.min(max_d)));
            }
            if let Some(hi) = hi.filter(|&hi| hi < max_d) {
                and(d.le(hi.max(min_d)));
            }
            return out.unwrap_or_else(|| constant(ctx.shape, true));
        }
        match &*self.node {
            Node::ChunkedCausal { chunk } => {
                let causal = ctx.k_pos.le(ctx.q_pos);
                if *chunk >= self.q_len.max(self.kv_len) {
                    causal
                } else {
                    (ctx.q_pos / *chunk).eq(ctx.k_pos / *chunk) & causal
                }
            }
            Node::Dense(bits) => self.trace_dense(bits, ctx),
            Node::And(a, b) => a.trace_node(ctx) & b.trace_node(ctx),
            Node::Or(a, b) => a.trace_node(ctx) | b.trace_node(ctx),
            Node::Not(a) => !a.trace_node(ctx),
            Node::Full | Node::Causal { .. } | Node::Local { .. } => unreachable!("bands"),
        }
    }

    /// A dense node: the block's bits at static starts, else a dynamic slice
    /// of the whole mask padded to whole blocks.
    fn trace_dense(&self, bits: &[bool], ctx: &Ctx) -> Tensor {
        let [bq, bk] = ctx.shape;
        let at =
            |q: usize, k: usize| q < self.q_len && k < self.kv_len && bits[q * self.kv_len + k];
        let bits_of = |rows: usize, cols: usize, q0: usize, k0: usize| {
            let spec = TensorSpec::new([rows, cols], DType::Pred);
            HostTensor::from_fn(spec, |e| {
                f64::from(u8::from(at(q0 + e / cols, k0 + e % cols)))
            })
        };
        let host = match (ctx.q_start, ctx.k_start) {
            (Start::Static(q0), Start::Static(k0)) => {
                return Tensor::constant(&bits_of(bq, bk, q0, k0));
            }
            _ => bits_of(
                ctx.grid.num_q_blocks.max(1) * bq,
                ctx.grid.num_kv_blocks.max(1) * bk,
                0,
                0,
            ),
        };
        Tensor::constant(&host)
            .dynamic_slice(&[ctx.q_start.tensor(), ctx.k_start.tensor()], &[bq, bk])
    }
}
