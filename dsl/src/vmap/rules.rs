//! The batching rules of the ops without regions or indices: elementwise,
//! shape, reduction, contraction, sorting and collective ops. Every batched
//! value carries its batch axis in front; a rule shifts the op's axes by
//! one and broadcasts the operands that are the same for every example.

use crate::error::Location;
use crate::ir::{DotDims, Node, Op};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;

use super::batcher::{spec, BVal, Batcher};
use super::emit::{self, front, shifted};

/// The name an op's errors carry (its StableHLO name, as the
/// interpreter's findings name it).
pub(super) fn op_name(op: &Op) -> &'static str {
    crate::interp::op_name(op)
}

/// The rule of every op but the indexing and control ops (`ops` are the
/// operands over the batch, `res` the recorded result types).
pub(super) fn batch(b: &mut Batcher, node: &Node, ops: &[BVal], res: &[TensorSpec]) -> Vec<BVal> {
    let loc = &node.location;
    let name = op_name(&node.op);
    let ex: Vec<TensorSpec> = node.operands.iter().map(|&v| spec(v)).collect();
    let one = |b: &Batcher, op: Op, operands: &[Tensor]| {
        let specs = res.iter().map(|r| b.batched_spec(r)).collect();
        emit::op_at(name, operands, op, specs, loc)
            .into_iter()
            .map(BVal::batched)
            .collect::<Vec<_>>()
    };
    let all_full = |b: &Batcher| -> Vec<Tensor> {
        ops.iter()
            .zip(&ex)
            .map(|(o, e)| b.full(*o, e, loc))
            .collect()
    };
    match &node.op {
        Op::Unary(_) | Op::Convert | Op::Reshape | Op::TopK { .. } => {
            one(b, node.op.clone(), &[ops[0].t])
        }
        Op::AllReduce { .. } | Op::CollectivePermute { .. } => {
            one(b, node.op.clone(), &all_full(b))
        }
        Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp => {
            let ts = elementwise_operands(b, ops, &ex, &res[0], loc);
            one(b, node.op.clone(), &ts)
        }
        Op::BroadcastInDim { dims } => {
            let op = Op::BroadcastInDim {
                dims: front(0, &shifted(dims)),
            };
            one(b, op, &[ops[0].t])
        }
        Op::Transpose { perm } => {
            let op = Op::Transpose {
                perm: front(0, &shifted(perm)),
            };
            one(b, op, &[ops[0].t])
        }
        Op::Slice {
            start,
            limit,
            strides,
        } => {
            let op = Op::Slice {
                start: front(0, start),
                limit: front(b.size, limit),
                strides: front(1, strides),
            };
            one(b, op, &[ops[0].t])
        }
        Op::Concatenate { dim } => one(b, Op::Concatenate { dim: dim + 1 }, &all_full(b)),
        Op::Reduce {
            kind,
            dims,
            split_rows,
        } => {
            // (x, its initial value): the initial value is a constant.
            if ops[1..].iter().any(|o| o.batched) {
                let m = "a reduction whose initial value differs between examples".to_string();
                return unsupported(b, node, name, m);
            }
            let mut ts = vec![b.full(ops[0], &ex[0], loc)];
            ts.extend(ops[1..].iter().map(|o| o.t));
            let op = Op::Reduce {
                kind: *kind,
                dims: shifted(dims),
                split_rows: *split_rows,
            };
            one(b, op, &ts)
        }
        Op::Sort { dim, descending } => {
            let op = Op::Sort {
                dim: dim + 1,
                descending: *descending,
            };
            one(b, op, &all_full(b))
        }
        Op::ArgReduce { max, dim } => {
            // (x, its index iota, the two initial values): x and the iota
            // over the batch; the initial values are constants.
            if ops[2].batched || ops[3].batched {
                let m = "an argmax/argmin whose initial value differs between examples".to_string();
                return unsupported(b, node, name, m);
            }
            let ts = [
                b.full(ops[0], &ex[0], loc),
                b.full(ops[1], &ex[1], loc),
                ops[2].t,
                ops[3].t,
            ];
            let op = Op::ArgReduce {
                max: *max,
                dim: dim + 1,
            };
            one(b, op, &ts)
        }
        Op::Pad {
            low,
            high,
            interior,
        } => vec![pad(b, ops, &ex, &res[0], (low, high, interior), loc)],
        Op::DotGeneral { dims, precision } => {
            vec![dot(b, ops, &ex, &res[0], dims, *precision, loc)]
        }
        Op::OptimizationBarrier => {
            let ts: Vec<Tensor> = ops.iter().map(|o| o.t).collect();
            let specs = ts.iter().map(|t| t.spec()).collect();
            let outs = emit::op_at(name, &ts, Op::OptimizationBarrier, specs, loc);
            outs.into_iter()
                .zip(ops)
                .map(|(t, o)| BVal {
                    t,
                    batched: o.batched,
                })
                .collect()
        }
        Op::AllGather { dim, groups } => {
            let op = Op::AllGather {
                dim: dim + 1,
                groups: groups.clone(),
            };
            one(b, op, &all_full(b))
        }
        Op::ReduceScatter { kind, dim, groups } => {
            let op = Op::ReduceScatter {
                kind: *kind,
                dim: dim + 1,
                groups: groups.clone(),
            };
            one(b, op, &all_full(b))
        }
        Op::AllToAll {
            split_dim,
            concat_dim,
            groups,
        } => {
            let op = Op::AllToAll {
                split_dim: split_dim + 1,
                concat_dim: concat_dim + 1,
                groups: groups.clone(),
            };
            one(b, op, &all_full(b))
        }
        Op::CustomCall { .. } => native_call(b, node, ops, res),
        // Ops without operands are never batched, and the indexing and
        // control ops have rules of their own: reaching here is a bug,
        // reported as an error rather than a wrong answer.
        Op::Constant { .. }
        | Op::Iota { .. }
        | Op::ReplicaId
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Gather { .. }
        | Op::Scatter { .. }
        | Op::While { .. }
        | Op::If => unsupported(b, node, name, "internal: no batching rule reached".into()),
    }
}

/// A native call over the batch: the function is called once per example
/// (its results stacked), since what it computes for a batch is its own
/// business.
fn native_call(b: &Batcher, node: &Node, ops: &[BVal], res: &[TensorSpec]) -> Vec<BVal> {
    let loc = &node.location;
    let mut per: Vec<Vec<Tensor>> = vec![Vec::with_capacity(b.size); res.len()];
    for i in 0..b.size {
        let args: Vec<Tensor> = ops
            .iter()
            .map(|o| match o.batched {
                true => emit::example(o.t, i, loc),
                false => o.t,
            })
            .collect();
        let outs = emit::op_at("ffi_call", &args, node.op.clone(), res.to_vec(), loc);
        for (k, y) in outs.into_iter().enumerate() {
            let mut shape = vec![1];
            shape.extend_from_slice(&res[k].shape);
            per[k].push(emit::reshape(y, shape, loc));
        }
    }
    per.into_iter()
        .map(|ys| BVal::batched(emit::concat(&ys, 0, loc)))
        .collect()
}

/// A kernel error naming the op (its results are poisoned).
pub(super) fn unsupported(b: &Batcher, node: &Node, name: &str, what: String) -> Vec<BVal> {
    let ts: Vec<Tensor> = node.operands.iter().map(|&v| b.get(v).t).collect();
    let m = format!("vmap cannot batch {what}");
    crate::trace::tensor::fail(name, &ts, m, &node.location);
    node.results
        .iter()
        .map(|&r| {
            let sp = spec(r);
            BVal::plain(crate::trace::with_state(|s| s.poisoned(sp)).unwrap_or(Tensor::INERT))
        })
        .collect()
}

/// Operands of an elementwise op over the batch: each broadcast to the
/// result's batched shape (a scalar operand too: select and clamp take
/// operands of the result's shape).
fn elementwise_operands(
    b: &Batcher,
    ops: &[BVal],
    ex: &[TensorSpec],
    res: &TensorSpec,
    loc: &Location,
) -> Vec<Tensor> {
    ops.iter()
        .zip(ex)
        .map(|(o, e)| match (o.batched, e.rank() == res.rank()) {
            (true, true) => o.t,
            (true, false) => emit::broadcast(o.t, b.batched_shape(res), vec![0], loc),
            (false, true) => b.full(*o, e, loc),
            (false, false) => emit::broadcast(o.t, b.batched_shape(res), Vec::new(), loc),
        })
        .collect()
}

/// `pad`: a padding value that differs between examples pads with zeros
/// and selects the value where nothing of the operand landed.
fn pad(
    b: &Batcher,
    ops: &[BVal],
    ex: &[TensorSpec],
    res: &TensorSpec,
    (low, high, interior): (&Vec<i64>, &Vec<i64>, &Vec<i64>),
    loc: &Location,
) -> BVal {
    let x = b.full(ops[0], &ex[0], loc);
    let op = Op::Pad {
        low: front(0, low),
        high: front(0, high),
        interior: front(0, interior),
    };
    let out = b.batched_spec(res);
    if !ops[1].batched {
        return BVal::batched(emit::op1("pad", &[x, ops[1].t], op, out, loc));
    }
    let dt = res.dtype;
    let zero = emit::scalar(0.0, dt, loc);
    let padded = emit::op1("pad", &[x, zero], op.clone(), out.clone(), loc);
    let ones = emit::broadcast(emit::scalar(1.0, dt, loc), x.shape(), Vec::new(), loc);
    let landed = emit::op1("pad", &[ones, zero], op, out.clone(), loc);
    let mask = emit::not_equal(
        landed,
        emit::broadcast(zero, out.shape.clone(), Vec::new(), loc),
        loc,
    );
    let value = emit::broadcast(ops[1].t, out.shape.clone(), vec![0], loc);
    BVal::batched(emit::select(mask, padded, value, loc))
}

/// `dot_general`: a batch axis on both operands is one more batch axis of
/// the product; on one operand, a free axis whose result axis is moved to
/// the front.
fn dot(
    b: &Batcher,
    ops: &[BVal],
    ex: &[TensorSpec],
    res: &TensorSpec,
    dims: &DotDims,
    precision: crate::config::Precision,
    loc: &Location,
) -> BVal {
    let (l, r) = (ops[0], ops[1]);
    let (nb, nc) = (dims.lhs_batch.len(), dims.lhs_contract.len());
    let (new, at) = match (l.batched, r.batched) {
        (true, true) => (
            DotDims {
                lhs_batch: front(0, &shifted(&dims.lhs_batch)),
                rhs_batch: front(0, &shifted(&dims.rhs_batch)),
                lhs_contract: shifted(&dims.lhs_contract),
                rhs_contract: shifted(&dims.rhs_contract),
            },
            0,
        ),
        (true, false) => (
            DotDims {
                lhs_batch: shifted(&dims.lhs_batch),
                lhs_contract: shifted(&dims.lhs_contract),
                ..dims.clone()
            },
            nb,
        ),
        _ => (
            DotDims {
                rhs_batch: shifted(&dims.rhs_batch),
                rhs_contract: shifted(&dims.rhs_contract),
                ..dims.clone()
            },
            nb + (ex[0].rank() - nb - nc),
        ),
    };
    let mut shape = res.shape.clone();
    shape.insert(at, b.size);
    let op = Op::DotGeneral {
        dims: new,
        precision,
    };
    let y = emit::op1(
        "dot_general",
        &[l.t, r.t],
        op,
        TensorSpec::new(shape, res.dtype),
        loc,
    );
    BVal::batched(emit::move_axis(y, at, 0, loc))
}
