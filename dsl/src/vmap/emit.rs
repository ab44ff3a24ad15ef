//! The few ops a batching rule emits around the user's ops (broadcasts,
//! transposes, index vectors), appended at the user's source line.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{Comparison, Op, ReduceKind};
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::Tensor;

/// Appends `op` over `operands` with result types `specs`, as given (the
/// rules compute them; the op's own checks ran when it was first traced).
pub(super) fn op_at(
    name: &str,
    operands: &[Tensor],
    op: Op,
    specs: Vec<TensorSpec>,
    loc: &Location,
) -> Vec<Tensor> {
    let n = specs.len();
    build(name, operands, loc.clone(), n, move |_| Ok((op, specs)))
}

/// One result of [`op_at`].
pub(super) fn op1(
    name: &str,
    operands: &[Tensor],
    op: Op,
    spec: TensorSpec,
    loc: &Location,
) -> Tensor {
    op_at(name, operands, op, vec![spec], loc)[0]
}

/// `x` broadcast to `shape`, its axis `i` at `dims[i]`.
pub(super) fn broadcast(x: Tensor, shape: Vec<usize>, dims: Vec<usize>, loc: &Location) -> Tensor {
    let spec = TensorSpec::new(shape, x.dtype());
    op1("vmap", &[x], Op::BroadcastInDim { dims }, spec, loc)
}

/// `x` with its axes permuted (result axis `i` is axis `perm[i]`).
pub(super) fn transpose(x: Tensor, perm: Vec<usize>, loc: &Location) -> Tensor {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return x;
    }
    let shape = x.shape();
    let spec = TensorSpec::new(
        perm.iter().map(|&p| shape[p]).collect::<Vec<_>>(),
        x.dtype(),
    );
    op1("vmap", &[x], Op::Transpose { perm }, spec, loc)
}

/// `x` with axis `from` moved to position `to`, the others in order.
pub(super) fn move_axis(x: Tensor, from: usize, to: usize, loc: &Location) -> Tensor {
    let mut perm: Vec<usize> = (0..x.rank()).filter(|&a| a != from).collect();
    perm.insert(to, from);
    transpose(x, perm, loc)
}

/// `x` reshaped to `shape` (same element count).
pub(super) fn reshape(x: Tensor, shape: Vec<usize>, loc: &Location) -> Tensor {
    let spec = TensorSpec::new(shape, x.dtype());
    op1("vmap", &[x], Op::Reshape, spec, loc)
}

/// `x` converted to `dtype`.
pub(super) fn convert(x: Tensor, dtype: DType, loc: &Location) -> Tensor {
    if x.dtype() == dtype {
        return x;
    }
    op1(
        "vmap",
        &[x],
        Op::Convert,
        TensorSpec::new(x.shape(), dtype),
        loc,
    )
}

/// `0, 1, 2, ...` along `dim` of `shape`.
pub(super) fn iota(shape: Vec<usize>, dim: usize, dtype: DType, loc: &Location) -> Tensor {
    op1(
        "vmap",
        &[],
        Op::Iota { dim },
        TensorSpec::new(shape, dtype),
        loc,
    )
}

/// `tensors` joined along `dim`.
pub(super) fn concat(tensors: &[Tensor], dim: usize, loc: &Location) -> Tensor {
    let mut shape = tensors[0].shape();
    shape[dim] = tensors.iter().map(|t| t.shape()[dim]).sum();
    let spec = TensorSpec::new(shape, tensors[0].dtype());
    op1("vmap", tensors, Op::Concatenate { dim }, spec, loc)
}

/// `select(pred, a, b)` elementwise (all of one shape).
pub(super) fn select(pred: Tensor, a: Tensor, b: Tensor, loc: &Location) -> Tensor {
    op1("vmap", &[pred, a, b], Op::Select, a.spec(), loc)
}

/// Whether any element along axis 0 holds (a `pred` over the other axes).
pub(super) fn any_over_batch(p: Tensor, loc: &Location) -> Tensor {
    let shape = p.shape()[1..].to_vec();
    let op = Op::Reduce {
        kind: ReduceKind::Or,
        dims: vec![0],
        split_rows: false,
    };
    let init = scalar(0.0, DType::Pred, loc);
    op1(
        "vmap",
        &[p, init],
        op,
        TensorSpec::new(shape, DType::Pred),
        loc,
    )
}

/// A scalar of `dtype`.
pub(super) fn scalar(value: f64, dtype: DType, loc: &Location) -> Tensor {
    crate::ops::constant::full_at(Vec::new(), value, dtype, loc.clone())
}

/// `a != b` elementwise.
pub(super) fn not_equal(a: Tensor, b: Tensor, loc: &Location) -> Tensor {
    let spec = TensorSpec::new(a.shape(), DType::Pred);
    op1("vmap", &[a, b], Op::Compare(Comparison::Ne), spec, loc)
}

/// Axes shifted past a batch axis put in front.
pub(super) fn shifted(axes: &[usize]) -> Vec<usize> {
    axes.iter().map(|a| a + 1).collect()
}

/// `first` followed by `rest`.
pub(super) fn front<T: Copy>(first: T, rest: &[T]) -> Vec<T> {
    let mut v = Vec::with_capacity(rest.len() + 1);
    v.push(first);
    v.extend_from_slice(rest);
    v
}

/// Example `i` of `t` along its axis 0 (the batch axis), without that axis.
pub(super) fn example(t: Tensor, i: usize, loc: &Location) -> Tensor {
    let shape = t.shape();
    let rank = shape.len();
    let mut start = vec![0; rank];
    start[0] = i;
    let mut limit = shape.clone();
    limit[0] = i + 1;
    let mut one_shape = shape.clone();
    one_shape[0] = 1;
    let op = Op::Slice {
        start,
        limit,
        strides: vec![1; rank],
    };
    let one = op1("vmap", &[t], op, TensorSpec::new(one_shape, t.dtype()), loc);
    reshape(one, shape[1..].to_vec(), loc)
}
