//! From an [`Op`] and its operand values to its results, for every op
//! without regions.

use crate::interp::checks::IndexNotes;
use crate::interp::value::Val;
use crate::interp::{elementwise as ew, indexing, linalg, reduce, shape_ops as sh};
use crate::ir::Op;
use crate::shape::TensorSpec;

type R<T> = Result<T, String>;

fn arity(ops: &[&Val], n: usize) -> R<()> {
    if ops.len() != n {
        return Err(format!("takes {n} operands, got {}", ops.len()));
    }
    Ok(())
}

/// A native call: the registered function on the operands as host tensors
/// (the plugin's handler calls the same function).
fn native(
    target: &str,
    attrs: &[(String, crate::host::FfiAttr)],
    ops: &[&Val],
    specs: &[TensorSpec],
) -> R<Vec<Val>> {
    let args = ops
        .iter()
        .map(|v| v.to_host().map_err(|e| e.to_string()))
        .collect::<R<Vec<_>>>()?;
    let call = crate::host::FfiCall { args: &args, attrs };
    let outs = crate::host::call_ffi(target, &call, specs)
        .map_err(|m| format!("native function `{target}`: {m}"))?;
    Ok(outs.iter().map(Val::from_host).collect())
}

fn first(specs: &[TensorSpec]) -> R<&TensorSpec> {
    specs.first().ok_or_else(|| "has no result".to_string())
}

/// The results of `op` on `ops`; `specs` are the result types the graph
/// declares. Clamped or dropped indices are noted in `notes`.
pub(crate) fn simple(
    op: &Op,
    ops: &[&Val],
    specs: &[TensorSpec],
    notes: &mut IndexNotes,
) -> R<Vec<Val>> {
    let one = |v: R<Val>| v.map(|v| vec![v]);
    match op {
        Op::Constant { data } => one(sh::constant(first(specs)?, data)),
        Op::Iota { dim } => one(sh::iota(first(specs)?, *dim)),
        Op::Unary(u) => {
            arity(ops, 1)?;
            one(ew::unary(*u, ops[0]))
        }
        Op::Binary(b) => {
            arity(ops, 2)?;
            one(ew::binary(*b, ops[0], ops[1]))
        }
        Op::Compare(c) => {
            arity(ops, 2)?;
            one(ew::compare(*c, ops[0], ops[1]))
        }
        Op::Select => {
            arity(ops, 3)?;
            one(ew::select(ops[0], ops[1], ops[2]))
        }
        Op::Clamp => {
            arity(ops, 3)?;
            one(ew::clamp(ops[0], ops[1], ops[2]))
        }
        Op::Convert => {
            arity(ops, 1)?;
            one(ew::convert(ops[0], first(specs)?.dtype))
        }
        Op::BroadcastInDim { dims } => {
            arity(ops, 1)?;
            one(sh::broadcast_in_dim(ops[0], dims, first(specs)?))
        }
        Op::Reshape => {
            arity(ops, 1)?;
            one(sh::reshape(ops[0], first(specs)?))
        }
        Op::Transpose { perm } => {
            arity(ops, 1)?;
            one(sh::transpose(ops[0], perm))
        }
        Op::Slice {
            start,
            limit,
            strides,
        } => {
            arity(ops, 1)?;
            one(sh::slice(ops[0], start, limit, strides))
        }
        Op::DynamicSlice { sizes } => {
            let (x, starts) = ops.split_first().ok_or("takes an operand")?;
            one(indexing::dynamic_slice(x, starts, sizes, notes))
        }
        Op::DynamicUpdateSlice => {
            if ops.len() < 2 {
                return Err("takes an operand and an update".into());
            }
            one(indexing::dynamic_update_slice(
                ops[0],
                ops[1],
                &ops[2..],
                notes,
            ))
        }
        Op::Concatenate { dim } => one(sh::concatenate(ops, *dim, first(specs)?)),
        Op::Pad {
            low,
            high,
            interior,
        } => {
            arity(ops, 2)?;
            one(sh::pad(ops[0], ops[1], low, high, interior))
        }
        Op::Reduce { kind, dims, .. } => {
            arity(ops, 2)?;
            one(reduce::reduce(ops[0], ops[1], *kind, dims))
        }
        Op::ArgReduce { max, dim } => {
            arity(ops, 4)?;
            reduce::arg_reduce(ops[0], ops[1], ops[2], ops[3], *max, *dim)
        }
        Op::DotGeneral { dims, .. } => {
            arity(ops, 2)?;
            one(linalg::dot_general(ops[0], ops[1], dims, first(specs)?))
        }
        Op::Gather { dims, slice_sizes } => {
            arity(ops, 2)?;
            one(indexing::gather(
                ops[0],
                ops[1],
                dims,
                slice_sizes,
                first(specs)?,
                notes,
            ))
        }
        Op::Scatter { dims, combine } => {
            arity(ops, 3)?;
            one(indexing::scatter(
                ops[0], ops[1], ops[2], dims, *combine, notes,
            ))
        }
        Op::Sort { dim, descending } => reduce::sort(ops, *dim, *descending),
        Op::TopK { k } => {
            arity(ops, 1)?;
            reduce::top_k(ops[0], *k)
        }
        Op::OptimizationBarrier => Ok(ops.iter().map(|v| (*v).clone()).collect()),
        Op::CustomCall { target, attrs } => native(target, attrs, ops, specs),
        Op::While { .. } | Op::If => Err("has regions; it is not a simple op".into()),
        Op::AllReduce { .. }
        | Op::AllGather { .. }
        | Op::ReduceScatter { .. }
        | Op::AllToAll { .. }
        | Op::CollectivePermute { .. }
        | Op::ReplicaId => Err(
            "is a collective: it runs on a multi-device PJRT client (shard_map), \
             the interpreter runs one device"
                .into(),
        ),
    }
}
