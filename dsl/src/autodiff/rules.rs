//! Reverse-mode rules of the primitive ops: given the cotangents of a
//! node's results, the cotangents of its operands, written with the op set
//! itself (so gradients are traced, lowered and differentiable again).

use crate::dtype::DType;
use crate::ir::{BinaryOp, DotDims, Node, Op, ReduceKind, UnaryOp, ValueId};
use crate::ops::collective::transpose_collective;
use crate::trace::tensor::Tensor;

use super::rules_index;
use super::tape;

type Grads = Result<Vec<Option<Tensor>>, String>;

/// Axes `0..n` as the `isize` list the reductions take.
pub(crate) fn axes(v: impl IntoIterator<Item = usize>) -> Vec<isize> {
    v.into_iter().map(|a| a as isize).collect()
}

/// A shape as the `isize` list `reshape` takes.
pub(crate) fn dims_of(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

fn float01(p: Tensor, like: Tensor) -> Tensor {
    p.select(like.ones_like(), like.zeros_like())
}

/// The cotangents of `node`'s operands (entries for operands not wanted may
/// be `None`).
pub(crate) fn node_vjp(trace: u32, node: &Node, outs: &[Option<Tensor>], want: &[bool]) -> Grads {
    let x = |i: usize| tape::handle(trace, node.operands[i]);
    let y = |i: usize| tape::handle(trace, node.results[i]);
    let g = |i: usize| outs[i].unwrap_or_else(|| y(i).zeros_like());
    let some = |v: Vec<Tensor>| Ok(v.into_iter().map(Some).collect());
    match &node.op {
        Op::Constant { .. } | Op::Iota { .. } | Op::Compare(_) => {
            Ok(vec![None; node.operands.len()])
        }
        Op::Unary(u) => Ok(vec![unary(*u, x(0), y(0), g(0))]),
        Op::Binary(b) => binary(*b, x(0), x(1), y(0), g(0)),
        Op::Select => {
            let (p, g) = (x(0), g(0));
            let z = g.zeros_like();
            Ok(vec![None, Some(p.select(g, z)), Some(p.select(z, g))])
        }
        Op::Clamp => {
            // JAX's rule: the operand's gradient strictly inside the bounds,
            // a bound's strictly outside, none at a tie. Where the bounds
            // cross (`hi < lo`) the result is `hi` (the op is
            // `min(max(x, lo), hi)`), so `hi` takes the gradient there too,
            // where JAX's rule, which assumes `lo <= hi`, gives none.
            let (lo, v, hi, g) = (x(0), x(1), x(2), g(0));
            let z = g.zeros_like();
            Ok(vec![
                Some((lo.gt(v) & lo.lt(hi)).select(g, z)),
                Some((v.gt(lo) & v.lt(hi)).select(g, z)),
                Some((hi.lt(v) | hi.lt(lo)).select(g, z)),
            ])
        }
        Op::Convert => {
            let from = tape::spec(node.operands[0]).dtype;
            Ok(vec![from.is_float().then(|| g(0).cast(from))])
        }
        Op::BroadcastInDim { dims } => Ok(vec![Some(unbroadcast(g(0), node.operands[0], dims))]),
        Op::Reshape => {
            let shape = tape::spec(node.operands[0]).shape;
            Ok(vec![Some(g(0).reshape(&dims_of(&shape)))])
        }
        Op::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            Ok(vec![Some(g(0).transpose(&inv))])
        }
        Op::Slice {
            start,
            limit: _,
            strides,
        } => {
            let sp = tape::spec(node.operands[0]);
            let out = tape::spec(node.results[0]);
            if out.num_elements() == 0 {
                return Ok(vec![Some(x(0).zeros_like())]);
            }
            let mut low = Vec::new();
            let mut high = Vec::new();
            let mut interior = Vec::new();
            for a in 0..sp.rank() {
                let n = out.shape[a];
                let last = start[a] + (n - 1) * strides[a];
                low.push(start[a] as i64);
                high.push(sp.shape[a] as i64 - last as i64 - 1);
                interior.push(strides[a] as i64 - 1);
            }
            Ok(vec![Some(g(0).pad(0.0, &low, &high, &interior))])
        }
        Op::DynamicSlice { .. } => {
            let starts: Vec<Tensor> = (1..node.operands.len()).map(x).collect();
            let mut v = vec![Some(x(0).zeros_like().dynamic_update_slice(g(0), &starts))];
            v.extend(starts.iter().map(|_| None));
            Ok(v)
        }
        Op::DynamicUpdateSlice => {
            let upd = x(1);
            let starts: Vec<Tensor> = (2..node.operands.len()).map(x).collect();
            let g = g(0);
            let mut v = vec![
                Some(g.dynamic_update_slice(upd.zeros_like(), &starts)),
                Some(g.dynamic_slice(&starts, &upd.shape())),
            ];
            v.extend(starts.iter().map(|_| None));
            Ok(v)
        }
        Op::Concatenate { dim } => {
            let g = g(0);
            let mut off = 0;
            let mut v = Vec::new();
            for i in 0..node.operands.len() {
                let n = tape::spec(node.operands[i]).shape[*dim];
                v.push(Some(g.slice_axis(*dim as isize, off, off + n)));
                off += n;
            }
            Ok(v)
        }
        Op::Pad {
            low,
            high,
            interior,
        } => {
            let g = g(0);
            let neg = |v: &[i64]| v.iter().map(|&a| -a).collect::<Vec<_>>();
            let zeros = vec![0i64; low.len()];
            let unpadded = g.pad(0.0, &neg(low), &neg(high), &zeros);
            let shape = unpadded.shape();
            let strides: Vec<usize> = interior.iter().map(|&i| i as usize + 1).collect();
            let dx = unpadded.slice(&vec![0; shape.len()], &shape, &strides);
            let all = axes(0..g.rank());
            let dpad = want
                .get(1)
                .copied()
                .unwrap_or(false)
                .then(|| g.sum(&all) - dx.sum(&axes(0..dx.rank())));
            Ok(vec![Some(dx), dpad])
        }
        Op::Reduce { kind, dims, .. } => reduce(*kind, dims, x(0), x(1), y(0), g(0), want),
        Op::ArgReduce { dim, .. } => {
            let Some(gv) = outs[0] else {
                return Ok(vec![None, None]);
            };
            let xs = x(0);
            let shape = xs.shape();
            let kept: Vec<usize> = (0..shape.len()).filter(|a| a != dim).collect();
            let idx = y(1).broadcast_in_dim(shape.clone(), &kept);
            let pos = Tensor::iota(shape.clone(), *dim, DType::S32);
            let gb = gv.broadcast_in_dim(shape, &kept);
            Ok(vec![Some(pos.eq(idx).select(gb, gb.zeros_like())), None])
        }
        Op::DotGeneral { dims, precision } => {
            let (a, b, g) = (x(0), x(1), g(0));
            let da = want[0].then(|| dot_transpose(g, b, dims, *precision, true, a.dtype()));
            let db = want[1].then(|| dot_transpose(g, a, dims, *precision, false, b.dtype()));
            Ok(vec![da, db])
        }
        Op::Gather { dims, slice_sizes } => Ok(vec![
            Some(rules_index::gather_vjp(x(0), x(1), g(0), dims, slice_sizes)),
            None,
        ]),
        Op::Scatter { dims, combine } => {
            rules_index::scatter_vjp(x(0), x(1), x(2), y(0), g(0), dims, *combine, want)
        }
        Op::Sort { dim, descending } => {
            let gs: Vec<Tensor> = (0..node.results.len()).map(g).collect();
            let sorted_any = (0..node.results.len()).any(|i| outs[i].is_some());
            if !sorted_any {
                return Ok(vec![None; node.operands.len()]);
            }
            let v = rules_index::sort_vjp(x(0), &gs, *dim, *descending);
            Ok(v.into_iter()
                .zip(want)
                .map(|(t, &w)| w.then_some(t))
                .collect())
        }
        Op::TopK { .. } => {
            let Some(gv) = outs[0] else {
                return Ok(vec![None]);
            };
            Ok(vec![Some(rules_index::scatter_along(
                x(0).zeros_like(),
                y(1),
                gv,
            ))])
        }
        Op::OptimizationBarrier => some((0..node.results.len()).map(g).collect()),
        Op::While { .. } | Op::If => Err("internal: control flow reached the op rules".into()),
        Op::AllReduce { .. }
        | Op::AllGather { .. }
        | Op::ReduceScatter { .. }
        | Op::AllToAll { .. }
        | Op::CollectivePermute { .. } => {
            if !tape::spec(node.operands[0]).dtype.is_float() {
                return Ok(vec![None]);
            }
            let loc = node.location.clone();
            Ok(vec![Some(transpose_collective(&node.op, g(0), loc)?)])
        }
        Op::ReplicaId => Ok(Vec::new()),
        Op::CustomCall { target, .. } => {
            // No gradient flows: nothing to say. Otherwise the native code's
            // derivative is unknown to the tracer.
            let flows = outs.iter().any(Option::is_some) && want.iter().any(|&w| w);
            let float_in = node
                .operands
                .iter()
                .any(|&v| tape::spec(v).dtype.is_float());
            if !flows || !float_in {
                return Ok(vec![None; node.operands.len()]);
            }
            Err(format!(
                "the native function `{target}` has no gradient: give the call one with \
                 custom_vjp, or stop_gradient its inputs"
            ))
        }
    }
}

fn unary(u: UnaryOp, x: Tensor, y: Tensor, g: Tensor) -> Option<Tensor> {
    use UnaryOp::*;
    Some(match u {
        Neg => -g,
        Abs => g * x.sign(),
        Exp => g * y,
        Expm1 => g * (y + 1.0),
        Log => g / x,
        Log1p => g / (x + 1.0),
        Sqrt => g * 0.5 / y,
        Rsqrt => g * -0.5 * y / x,
        Cbrt => g / (y * y * 3.0),
        Tanh => g * (1.0 - y * y),
        Logistic => g * y * (1.0 - y),
        Sin => g * x.cos(),
        Cos => -(g * x.sin()),
        Tan => g * (1.0 + y * y),
        Floor | Ceil | Round | Sign => x.zeros_like(),
        Erf => g * (2.0 / std::f64::consts::PI.sqrt()) * (-(x * x)).exp(),
        Not | IsFinite | PopCount => return None,
    })
}

fn binary(b: BinaryOp, a: Tensor, c: Tensor, y: Tensor, g: Tensor) -> Grads {
    use BinaryOp::*;
    let (da, dc) = match b {
        Add => (g, g),
        Sub => (g, -g),
        Mul => (g * c, g * a),
        Div => (g / c, -(g * y) / c),
        Rem => (g, -(g * ((a - y) / c).round())),
        Pow => {
            let z = g.zeros_like();
            let da = c.eq(0.0).select(z, g * c * a.pow(c - 1.0));
            let safe = a.eq(0.0).select(a.ones_like(), a);
            let dc = a.eq(0.0).select(z, g * y * safe.log());
            (da, dc)
        }
        Max | Min => {
            let (ea, ec) = (a.eq(y), c.eq(y));
            let half = |mine: Tensor, other: Tensor| {
                let w = mine.select(other.select(0.5, 1.0), 0.0);
                g * w.cast(g.dtype())
            };
            let wa = half(ea, ec);
            let wc = half(ec, ea);
            (wa, wc)
        }
        Atan2 => {
            let den = a * a + c * c;
            (g * c / den, -(g * a) / den)
        }
        And | Or | Xor | ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => {
            return Ok(vec![None, None])
        }
    };
    Ok(vec![Some(da), Some(dc)])
}

/// The cotangent of a broadcast operand: the sum over the axes it was
/// broadcast along.
fn unbroadcast(g: Tensor, operand: ValueId, dims: &[usize]) -> Tensor {
    let sp = tape::spec(operand);
    let out = g.shape();
    let mut summed = Vec::new();
    for (a, &extent) in out.iter().enumerate() {
        match dims.iter().position(|&d| d == a) {
            None => summed.push(a),
            Some(i) if sp.shape[i] == 1 && extent != 1 => summed.push(a),
            Some(_) => {}
        }
    }
    let r = if summed.is_empty() {
        g
    } else {
        g.sum(&axes(summed))
    };
    r.reshape(&dims_of(&sp.shape))
}

fn reduce(
    kind: ReduceKind,
    dims: &[usize],
    x: Tensor,
    init: Tensor,
    y: Tensor,
    g: Tensor,
    want: &[bool],
) -> Grads {
    let shape = x.shape();
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !dims.contains(a)).collect();
    let back = |t: Tensor| t.broadcast_in_dim(shape.clone(), &kept);
    let all = |t: Tensor| t.sum(&axes(0..t.rank()));
    let want_init = want.get(1).copied().unwrap_or(false);
    match kind {
        ReduceKind::Sum => Ok(vec![Some(back(g)), want_init.then(|| all(g))]),
        ReduceKind::Max | ReduceKind::Min => {
            let hit = float01(x.eq(back(y)), x);
            let count = hit.sum(&axes(dims.iter().copied()));
            let dx = back(g / count.maximum(1.0)) * hit;
            let dinit = want_init.then(|| all(float01(init.eq(y), g) * g));
            Ok(vec![Some(dx), dinit])
        }
        ReduceKind::Prod => {
            let d = axes(dims.iter().copied());
            let zero = x.eq(0.0);
            let zeros = float01(zero, x).sum(&d);
            let nonzero_prod = zero.select(x.ones_like(), x).prod(&d);
            let yb = back(y);
            let gb = back(g);
            let none = back(zeros.eq(0.0));
            let one = back(zeros.eq(1.0));
            let safe_x = zero.select(x.ones_like(), x);
            let dx = none.select(
                gb * yb / safe_x,
                (one & zero).select(gb * back(nonzero_prod), x.zeros_like()),
            );
            let dinit = want_init.then(|| all(g * x.prod(&d)));
            Ok(vec![Some(dx), dinit])
        }
        ReduceKind::And | ReduceKind::Or => Ok(vec![None, None]),
    }
}

/// The cotangent of one `dot_general` operand: `g` contracted with the
/// other operand, transposed back into the operand's axis order.
fn dot_transpose(
    g: Tensor,
    other: Tensor,
    dims: &DotDims,
    precision: crate::config::Precision,
    for_lhs: bool,
    dtype: DType,
) -> Tensor {
    let (mine_b, other_b, mine_c, other_c) = if for_lhs {
        (
            &dims.lhs_batch,
            &dims.rhs_batch,
            &dims.lhs_contract,
            &dims.rhs_contract,
        )
    } else {
        (
            &dims.rhs_batch,
            &dims.lhs_batch,
            &dims.rhs_contract,
            &dims.lhs_contract,
        )
    };
    let other_rank = other.rank();
    let mine_rank = mine_b.len() + mine_c.len() + (g.rank() - mine_b.len())
        - (other_rank - other_b.len() - other_c.len());
    let free = |rank: usize, b: &[usize], c: &[usize]| -> Vec<usize> {
        (0..rank)
            .filter(|a| !b.contains(a) && !c.contains(a))
            .collect()
    };
    let mine_free = free(mine_rank, mine_b, mine_c);
    let other_free = free(other_rank, other_b, other_c);
    let nb = mine_b.len();
    // g is [batch, lhs free, rhs free].
    let g_other_free = if for_lhs {
        nb + mine_free.len()..g.rank()
    } else {
        nb..nb + other_free.len()
    };
    let new = DotDims {
        lhs_batch: (0..nb).collect(),
        rhs_batch: other_b.clone(),
        lhs_contract: g_other_free.collect(),
        rhs_contract: other_free.clone(),
    };
    // The result is [batch, g's remaining (my free axes), other's remaining
    // (its contracted axes, in increasing order)].
    let mut rest: Vec<usize> = other_c.clone();
    rest.sort_unstable();
    let mut order: Vec<usize> = mine_b.clone();
    order.extend(&mine_free);
    for r in rest {
        let p = other_c.iter().position(|&c| c == r).unwrap_or(0);
        order.push(mine_c[p]);
    }
    let other = if other.dtype() != g.dtype() {
        other.cast(g.dtype())
    } else {
        other
    };
    let r = g.dot_general(other, new, Some(precision), Some(g.dtype()));
    let mut perm = vec![0; order.len()];
    for (pos, &axis) in order.iter().enumerate() {
        perm[axis] = pos;
    }
    let r = if perm.iter().enumerate().all(|(i, &p)| i == p) {
        r
    } else {
        r.transpose(&perm)
    };
    r.cast(dtype)
}
