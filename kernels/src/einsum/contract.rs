//! Evaluating a parsed einsum inside a kernel: each operand's diagonals
//! and lone labels reduced first, then the pairwise contractions of the
//! path, each one `dot_general`, and one transpose into the output's order.

use tessel::prelude::*;
use tessel::tensor::trace_error;
use tessel::DotDims;

use super::parse::{parse, Equation, ELLIPSIS};
use super::path::{order, Labels};

/// `Some(F32)` for the narrow floats (bf16, f16, fp8), whose reductions
/// and dot accumulation run in f32; `None` for f32, f64 and integers.
fn accumulation(d: DType) -> Option<DType> {
    (d.is_float() && d != F32 && d != F64).then_some(F32)
}

/// Takes the diagonal of every label `x` repeats and sums out the labels
/// `keep` rejects; gives the new operand and its labels. A narrow-float
/// operand that was reduced comes back in f32 (its sums are not rounded
/// before the dot); otherwise the operand is returned unchanged.
#[track_caller]
fn prepare(x: Tensor, labels: &[u8], keep: impl Fn(u8) -> bool) -> (Tensor, Vec<u8>) {
    let dtype = x.dtype();
    let mut labels = labels.to_vec();
    let mut x = x;
    let repeated = (0..labels.len()).any(|i| labels[..i].contains(&labels[i]));
    let summed = labels.iter().any(|&l| !keep(l));
    if !repeated && !summed {
        return (x, labels);
    }
    if let Some(acc) = accumulation(dtype) {
        x = x.cast(acc);
    }
    // Diagonals: for a label at axes p < q, keep x where index p == index q,
    // then sum axis q away.
    while let Some(q) = (0..labels.len()).find(|&q| labels[..q].contains(&labels[q])) {
        let p = labels.iter().position(|&l| l == labels[q]).unwrap_or(q);
        let shape = x.shape();
        let on_diagonal = Tensor::iota(shape.clone(), p, S32).eq(Tensor::iota(shape, q, S32));
        x = on_diagonal.select(x, 0.0).sum(&[q as isize]);
        labels.remove(q);
    }
    let drop: Vec<isize> = (0..labels.len())
        .filter(|&i| !keep(labels[i]))
        .map(|i| i as isize)
        .collect();
    if !drop.is_empty() {
        x = x.sum(&drop);
        labels.retain(|&l| keep(l));
    }
    (x, labels)
}

/// Transposes `x`, whose axes carry `have`, into the order `want` (a
/// permutation of `have`); no op when they agree.
#[track_caller]
fn arrange(x: Tensor, have: &[u8], want: &[u8]) -> Tensor {
    if have == want {
        return x;
    }
    let perm: Vec<usize> = want
        .iter()
        .map(|l| have.iter().position(|h| h == l).unwrap_or(0))
        .collect();
    x.transpose(&perm)
}

/// Shared checks: operand dtypes. `Err` is the poisoned result.
#[track_caller]
fn check_dtypes(op: &str, eq: &str, operands: &[Tensor]) -> Result<DType, Tensor> {
    let d = operands[0].dtype();
    if d.is_pred() {
        return Err(trace_error(
            op,
            operands,
            format!("equation {eq:?}: pred operands cannot be multiplied; cast them first"),
        ));
    }
    if let Some(other) = operands.iter().map(|t| t.dtype()).find(|&o| o != d) {
        return Err(trace_error(
            op,
            operands,
            format!(
                "equation {eq:?}: operands have different dtypes {d} and {other}; cast one first"
            ),
        ));
    }
    Ok(d)
}

/// Contracts `a` (axes `la`) with `b` (axes `lb`) into one operand whose
/// axes are the labels either carries that `keep` holds: batch axes first,
/// then `a`'s free axes, then `b`'s. Narrow floats accumulate in f32 and
/// stay f32 (rounded once, at the end of the einsum).
#[track_caller]
fn contract_pair(a: Tensor, la: &[u8], b: Tensor, lb: &[u8], keep: Labels) -> (Tensor, Vec<u8>) {
    let (a, la) = prepare(a, la, |l| keep.contains(l) || lb.contains(&l));
    let (b, lb) = prepare(b, lb, |l| keep.contains(l) || la.contains(&l));
    let pos = |labels: &[u8], l: u8| labels.iter().position(|&x| x == l).unwrap_or(0);
    let batch: Vec<u8> = la
        .iter()
        .copied()
        .filter(|&l| lb.contains(&l) && keep.contains(l))
        .collect();
    let contract: Vec<u8> = la
        .iter()
        .copied()
        .filter(|&l| lb.contains(&l) && !keep.contains(l))
        .collect();
    let dims = DotDims {
        lhs_batch: batch.iter().map(|&l| pos(&la, l)).collect(),
        rhs_batch: batch.iter().map(|&l| pos(&lb, l)).collect(),
        lhs_contract: contract.iter().map(|&l| pos(&la, l)).collect(),
        rhs_contract: contract.iter().map(|&l| pos(&lb, l)).collect(),
    };
    let mut result: Vec<u8> = batch;
    result.extend(la.iter().filter(|l| !lb.contains(l)));
    result.extend(lb.iter().filter(|l| !la.contains(l)));
    // A reduced narrow operand (or an earlier step's result) is f32: the
    // dot then runs on f32 operands.
    let (a, b) = if a.dtype() != b.dtype() {
        (a.cast(F32), b.cast(F32))
    } else {
        (a, b)
    };
    let acc = accumulation(a.dtype());
    (a.dot_general(b, dims, None, acc), result)
}

/// Removes the ellipsis axes of extent 1 that broadcast against a larger
/// extent (they carry no label of their own then).
#[track_caller]
fn squeeze_broadcast(x: Tensor, labels: &[u8], eq: &Equation) -> (Tensor, Vec<u8>) {
    let shape = x.shape();
    let drop = |k: usize| labels[k] >= ELLIPSIS && shape[k] == 1 && eq.size(labels[k]) != 1;
    if !(0..labels.len()).any(drop) {
        return (x, labels.to_vec());
    }
    let kept: Vec<usize> = (0..labels.len()).filter(|&k| !drop(k)).collect();
    let dims: Vec<isize> = kept.iter().map(|&k| shape[k] as isize).collect();
    (x.reshape(&dims), kept.iter().map(|&k| labels[k]).collect())
}

/// `eq` over `operands` inside a kernel, the errors recorded under `op`.
#[track_caller]
pub(super) fn einsum_traced(op: &str, eq: &str, operands: &[Tensor]) -> Tensor {
    if operands.is_empty() {
        return trace_error(op, &[], format!("equation {eq:?}: no operand"));
    }
    let dtype = match check_dtypes(op, eq, operands) {
        Ok(d) => d,
        Err(poisoned) => return poisoned,
    };
    let shapes: Vec<Vec<usize>> = operands.iter().map(|t| t.shape()).collect();
    let mut parsed = match parse(eq, &shapes) {
        Ok(p) => p,
        Err(m) => return trace_error(op, operands, format!("equation {eq:?}: {m}")),
    };
    let mut ops: Vec<(Tensor, Vec<u8>)> = operands
        .iter()
        .zip(&parsed.inputs)
        .map(|(&x, labels)| squeeze_broadcast(x, labels, &parsed))
        .collect();
    parsed.inputs = ops.iter().map(|(_, l)| l.clone()).collect();
    let output = Labels::of(&parsed.output);
    let ((_, _, steps), _) = order(&parsed);
    for (i, j) in steps {
        let (b, lb) = ops.remove(j);
        let (a, la) = ops.remove(i);
        let keep = ops
            .iter()
            .fold(output, |acc, (_, l)| acc.union(Labels::of(l)));
        ops.push(contract_pair(a, &la, b, &lb, keep));
    }
    let Some((x, labels)) = ops.pop() else {
        return trace_error(op, operands, format!("equation {eq:?}: no operand"));
    };
    let (x, labels) = prepare(x, &labels, |l| output.contains(l));
    arrange(x, &labels, &parsed.output).cast(dtype)
}
