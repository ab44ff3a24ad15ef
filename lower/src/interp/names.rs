//! The StableHLO name of each op (without the dialect prefix), as findings
//! and errors name it.

use crate::ir::{BinaryOp, Op, UnaryOp};
use crate::lower::{binary_name, unary_name};

/// The name of `op`: `add`, `dynamic_slice`, `while`, ...
pub fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Constant { .. } => "constant",
        Op::Iota { .. } => "iota",
        Op::Unary(u) => unary(*u),
        Op::Binary(b) => binary(*b),
        Op::Compare(_) => "compare",
        Op::Select => "select",
        Op::Clamp => "clamp",
        Op::Convert => "convert",
        Op::BroadcastInDim { .. } => "broadcast_in_dim",
        Op::Reshape => "reshape",
        Op::Transpose { .. } => "transpose",
        Op::Slice { .. } => "slice",
        Op::DynamicSlice { .. } => "dynamic_slice",
        Op::DynamicUpdateSlice => "dynamic_update_slice",
        Op::Concatenate { .. } => "concatenate",
        Op::Pad { .. } => "pad",
        Op::Reduce { .. } | Op::ArgReduce { .. } => "reduce",
        Op::DotGeneral { .. } => "dot_general",
        Op::Gather { .. } => "gather",
        Op::Scatter { .. } => "scatter",
        Op::Sort { .. } => "sort",
        Op::TopK { .. } => "top_k",
        Op::While { .. } => "while",
        Op::If => "if",
        Op::OptimizationBarrier => "optimization_barrier",
        Op::AllReduce { .. } => "all_reduce",
        Op::AllGather { .. } => "all_gather",
        Op::ReduceScatter { .. } => "reduce_scatter",
        Op::AllToAll { .. } => "all_to_all",
        Op::CollectivePermute { .. } => "collective_permute",
        Op::ReplicaId => "replica_id",
        Op::CustomCall { .. } => "custom_call",
    }
}

/// An op's name as lowering prints it, without the dialect prefix
/// (`stablehlo.add` is `add`, `chlo.erf` is `erf`).
fn bare(name: &'static str) -> &'static str {
    name.split_once('.').map_or(name, |(_, op)| op)
}

fn unary(op: UnaryOp) -> &'static str {
    bare(unary_name(op))
}

fn binary(op: BinaryOp) -> &'static str {
    bare(binary_name(op))
}
