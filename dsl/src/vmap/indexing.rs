//! The batching rules of the indexing ops. A slice at starts that are the
//! same for every example is one more (full) axis of the slice; starts that
//! differ become a gather (a scatter for an update) whose index vectors
//! begin with the example's number, as JAX's rules do.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{GatherDims, Node, Op, ScatterCombine, ScatterDims};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;

use super::batcher::{spec, BVal, Batcher};
use super::emit::{self, front, shifted};

/// Index vectors `s32 [B, 1 + starts.len()]`: the example's number, then
/// each start (broadcast over the batch when it is the same for all).
fn start_vectors(b: &Batcher, starts: &[BVal], loc: &Location) -> Tensor {
    let n = b.size;
    let mut cols = vec![emit::iota(vec![n, 1], 0, DType::S32, loc)];
    for s in starts {
        let s32 = emit::convert(s.t, DType::S32, loc);
        let col = match s.batched {
            true => emit::reshape(s32, vec![n, 1], loc),
            false => emit::broadcast(s32, vec![n, 1], Vec::new(), loc),
        };
        cols.push(col);
    }
    emit::concat(&cols, 1, loc)
}

/// `dynamic_slice(x, starts, sizes)` over the batch.
pub(super) fn dynamic_slice(
    b: &mut Batcher,
    node: &Node,
    ops: &[BVal],
    sizes: &[usize],
) -> Vec<BVal> {
    let loc = &node.location;
    let res = b.batched_spec(&spec(node.results[0]));
    let x = b.full(ops[0], &spec(node.operands[0]), loc);
    let starts = &ops[1..];
    if !starts.iter().any(|s| s.batched) {
        let dt = starts.first().map_or(DType::S32, |s| s.t.dtype());
        let mut operands = vec![x, emit::scalar(0.0, dt, loc)];
        operands.extend(starts.iter().map(|s| s.t));
        let op = Op::DynamicSlice {
            sizes: front(b.size, sizes),
        };
        return vec![BVal::batched(emit::op1(
            "dynamic_slice",
            &operands,
            op,
            res,
            loc,
        ))];
    }
    // A gather clamps its windows into range as dynamic_slice does.
    let idx = start_vectors(b, starts, loc);
    let r = sizes.len();
    let dims = GatherDims {
        offset_dims: (1..=r).collect(),
        collapsed_slice_dims: vec![0],
        start_index_map: (0..=r).collect(),
        index_vector_dim: 1,
    };
    let op = Op::Gather {
        dims,
        slice_sizes: front(1, sizes),
    };
    vec![BVal::batched(emit::op1(
        "dynamic_slice",
        &[x, idx],
        op,
        res,
        loc,
    ))]
}

/// `dynamic_update_slice(x, update, starts)` over the batch.
pub(super) fn dynamic_update_slice(b: &mut Batcher, node: &Node, ops: &[BVal]) -> Vec<BVal> {
    let loc = &node.location;
    let (xs, us) = (spec(node.operands[0]), spec(node.operands[1]));
    let res = b.batched_spec(&xs);
    let x = b.full(ops[0], &xs, loc);
    let u = b.full(ops[1], &us, loc);
    let starts = &ops[2..];
    if !starts.iter().any(|s| s.batched) {
        let dt = starts.first().map_or(DType::S32, |s| s.t.dtype());
        let mut operands = vec![x, u, emit::scalar(0.0, dt, loc)];
        operands.extend(starts.iter().map(|s| s.t));
        let op = Op::DynamicUpdateSlice;
        return vec![BVal::batched(emit::op1(
            "dynamic_update_slice",
            &operands,
            op,
            res,
            loc,
        ))];
    }
    // dynamic_update_slice clamps the window into range; a scatter would
    // skip it, so the starts are clamped first.
    let clamped: Vec<BVal> = starts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let hi = xs.shape[i] as f64 - us.shape[i] as f64;
            let dt = s.t.dtype();
            let bound =
                |v: f64| emit::broadcast(emit::scalar(v, dt, loc), s.t.shape(), Vec::new(), loc);
            let (lo, hi) = (bound(0.0), bound(hi));
            let t = emit::op1(
                "dynamic_update_slice",
                &[lo, s.t, hi],
                Op::Clamp,
                s.t.spec(),
                loc,
            );
            BVal {
                t,
                batched: s.batched,
            }
        })
        .collect();
    let idx = start_vectors(b, &clamped, loc);
    let r = xs.rank();
    let dims = ScatterDims {
        update_window_dims: (1..=r).collect(),
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: (0..=r).collect(),
        index_vector_dim: 1,
    };
    let op = Op::Scatter {
        dims,
        combine: ScatterCombine::Set,
    };
    vec![BVal::batched(emit::op1(
        "dynamic_update_slice",
        &[x, idx, u],
        op,
        res,
        loc,
    ))]
}

/// Batched indices `[B, ...]` with their index-vector axis `ivd` (of one
/// example's indices) made explicit and the example's number prepended to
/// each index vector; returns them and their index-vector axis.
fn numbered_indices(idx: Tensor, ex: &TensorSpec, ivd: usize, loc: &Location) -> (Tensor, usize) {
    let mut idx = idx;
    let mut shape = idx.shape();
    if ivd == ex.rank() {
        shape.push(1);
        idx = emit::reshape(idx, shape.clone(), loc);
    }
    let axis = ivd + 1;
    let mut count = shape.clone();
    count[axis] = 1;
    let number = emit::iota(count, 0, idx.dtype(), loc);
    (emit::concat(&[number, idx], axis, loc), axis)
}

/// `gather(x, indices)` over the batch.
pub(super) fn gather(
    b: &mut Batcher,
    node: &Node,
    ops: &[BVal],
    dims: &GatherDims,
    slice_sizes: &[usize],
) -> BVal {
    let loc = &node.location;
    let res = b.batched_spec(&spec(node.results[0]));
    let (x, idx) = (ops[0], ops[1]);
    let (new, sizes, operands) = match (x.batched, idx.batched) {
        // The batch axis is a window axis, placed first in the result.
        (true, false) => (
            GatherDims {
                offset_dims: front(0, &shifted(&dims.offset_dims)),
                collapsed_slice_dims: shifted(&dims.collapsed_slice_dims),
                start_index_map: shifted(&dims.start_index_map),
                index_vector_dim: dims.index_vector_dim,
            },
            front(b.size, slice_sizes),
            [x.t, idx.t],
        ),
        // The batch axis is the indices' first batch axis, first in the result.
        (false, true) => (
            GatherDims {
                offset_dims: shifted(&dims.offset_dims),
                index_vector_dim: dims.index_vector_dim + 1,
                ..dims.clone()
            },
            slice_sizes.to_vec(),
            [x.t, idx.t],
        ),
        _ => {
            let ex = spec(node.operands[1]);
            let (numbered, ivd) = numbered_indices(idx.t, &ex, dims.index_vector_dim, loc);
            (
                GatherDims {
                    offset_dims: shifted(&dims.offset_dims),
                    collapsed_slice_dims: front(0, &shifted(&dims.collapsed_slice_dims)),
                    start_index_map: front(0, &shifted(&dims.start_index_map)),
                    index_vector_dim: ivd,
                },
                front(1, slice_sizes),
                [x.t, numbered],
            )
        }
    };
    let op = Op::Gather {
        dims: new,
        slice_sizes: sizes,
    };
    BVal::batched(emit::op1("gather", &operands, op, res, loc))
}

/// `scatter(x, indices, updates)` over the batch: the operand and updates
/// get the batch axis; indices that are the same for every example scatter
/// a window one example wide, batched ones get the example's number.
pub(super) fn scatter(
    b: &mut Batcher,
    node: &Node,
    ops: &[BVal],
    dims: &ScatterDims,
    combine: ScatterCombine,
) -> BVal {
    let loc = &node.location;
    let ex: Vec<TensorSpec> = node.operands.iter().map(|&v| spec(v)).collect();
    let res = b.batched_spec(&ex[0]);
    let x = b.full(ops[0], &ex[0], loc);
    let u = b.full(ops[2], &ex[2], loc);
    let (new, idx) = if ops[1].batched {
        let (numbered, ivd) = numbered_indices(ops[1].t, &ex[1], dims.index_vector_dim, loc);
        (
            ScatterDims {
                update_window_dims: shifted(&dims.update_window_dims),
                inserted_window_dims: front(0, &shifted(&dims.inserted_window_dims)),
                scatter_dims_to_operand_dims: front(
                    0,
                    &shifted(&dims.scatter_dims_to_operand_dims),
                ),
                index_vector_dim: ivd,
            },
            numbered,
        )
    } else {
        (
            ScatterDims {
                update_window_dims: front(0, &shifted(&dims.update_window_dims)),
                inserted_window_dims: shifted(&dims.inserted_window_dims),
                scatter_dims_to_operand_dims: shifted(&dims.scatter_dims_to_operand_dims),
                index_vector_dim: dims.index_vector_dim,
            },
            ops[1].t,
        )
    };
    let op = Op::Scatter { dims: new, combine };
    BVal::batched(emit::op1("scatter", &[x, idx, u], op, res, loc))
}
