//! Reverse accumulation over a [`Tape`]: which values carry a gradient
//! (activity), the walk from the outputs back to the inputs, and the sum of
//! the cotangents each value receives.

use std::collections::{HashMap, HashSet};

use crate::error::Location;
use crate::ir::{Node, Op, ValueId};
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::custom::{self, Record};
use super::tape::{self, Tape};
use super::{control, rules};

/// Cotangents by value id.
pub(crate) type Cotangents = HashMap<ValueId, Tensor>;

/// Whether values of this node's results can carry a gradient: floating
/// point (integer and predicate values get no cotangent).
pub(crate) fn differentiable(v: ValueId) -> bool {
    tape::spec(v).dtype.is_float()
}

/// The values a node reads: its operands, plus for a branch the values its
/// regions use from the enclosing code.
pub(crate) fn reads(node: &Node) -> Vec<ValueId> {
    match node.op {
        Op::If => {
            let mut v = node.operands.clone();
            v.extend(tape::free_values_now(&node.regions));
            v
        }
        _ => node.operands.clone(),
    }
}

/// The values of `tape` that depend on `inputs` and can carry a gradient.
pub(crate) fn activity(tape: &Tape, inputs: &[ValueId]) -> HashSet<ValueId> {
    let mut active: HashSet<ValueId> = inputs
        .iter()
        .copied()
        .filter(|&v| differentiable(v))
        .collect();
    let records = custom::records_in(tape);
    for &n in &tape.nodes {
        if custom::stops(&records, tape, n) {
            continue;
        }
        let Some(node) = tape.node(n) else { continue };
        if reads(&node).iter().any(|v| active.contains(v)) {
            active.extend(node.results.iter().copied().filter(|&v| differentiable(v)));
        }
    }
    active
}

/// Adds `ct` to the cotangent of `v`.
pub(crate) fn accumulate(cts: &mut Cotangents, v: ValueId, ct: Tensor) {
    let sum = match cts.remove(&v) {
        Some(prev) => prev + ct,
        None => ct,
    };
    cts.insert(v, sum);
}

/// Records a gradient error on the trace, at the forward op's line.
pub(crate) fn fail_at(op: &str, operands: &[Tensor], message: String, loc: &Location) {
    with_state(|s| s.fail(op, operands, message, loc));
}

/// A short name of an op for messages.
pub(crate) fn op_name(op: &Op) -> String {
    let s = format!("{op:?}");
    let head = s
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .find(|p| !p.is_empty())
        .unwrap_or("op");
    let mut out = String::new();
    for (i, c) in head.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    match op {
        Op::Unary(u) => format!("{out} ({})", op_name_of(u)),
        Op::Binary(b) => format!("{out} ({})", op_name_of(b)),
        _ => out,
    }
}

fn op_name_of(x: &impl std::fmt::Debug) -> String {
    format!("{x:?}").to_lowercase()
}

/// Walks `tape` backwards from the cotangents in `cts` (keyed by the tape's
/// output values); returns every cotangent that reached a value defined
/// before the tape (the inputs among them). Errors are recorded on the
/// trace (a gradient rule that cannot apply names the op and its line).
pub(crate) fn backprop(tape: &Tape, inputs: &[ValueId], mut cts: Cotangents) -> Cotangents {
    let active = activity(tape, inputs);
    cts.retain(|v, _| active.contains(v));
    let records = custom::records_in(tape);
    let mut i = tape.nodes.len();
    while i > 0 {
        i -= 1;
        let n = tape.nodes[i];
        if let Some(rec) = records.iter().find(|r| r.last == n) {
            apply_record(tape, rec, &active, &mut cts);
            match tape.nodes.iter().position(|&m| m == rec.first) {
                Some(p) => i = p,
                None => break,
            }
            continue;
        }
        let Some(node) = tape.node(n) else { continue };
        let outs: Vec<Option<Tensor>> = node.results.iter().map(|r| cts.remove(r)).collect();
        if outs.iter().all(Option::is_none) {
            continue;
        }
        let read = reads(&node);
        let want: Vec<bool> = read.iter().map(|v| active.contains(v)).collect();
        if !want.iter().any(|&w| w) {
            continue;
        }
        let before = tape::node_count();
        let grads = match &node.op {
            Op::If => control::if_vjp(tape.trace, &node, &outs, &read, &want),
            Op::While { .. } => {
                // A loop read as recorded may be replaced by its gradient's
                // forward loop, which computes the same values.
                let recorded = tape.subst.is_empty().then_some(n);
                control::while_vjp(tape.trace, &node, recorded, &outs, &want)
            }
            _ => rules::node_vjp(tape.trace, &node, &outs, &want),
        };
        tape::relocate_from(before, &node.location);
        match grads {
            Ok(g) => {
                for ((&v, w), ct) in read.iter().zip(&want).zip(g) {
                    if let (true, Some(ct)) = (*w, ct) {
                        accumulate(&mut cts, v, ct);
                    }
                }
            }
            Err(m) => {
                let operands: Vec<Tensor> = node
                    .operands
                    .iter()
                    .map(|&v| tape::handle(tape.trace, v))
                    .collect();
                fail_at(
                    &format!("gradient of {}", op_name(&node.op)),
                    &operands,
                    m,
                    &node.location,
                );
                return Cotangents::new();
            }
        }
    }
    cts
}

/// Applies a custom-gradient record (a `custom_vjp` or a `checkpoint`) in
/// place of the nodes it covers.
fn apply_record(tape: &Tape, rec: &Record, active: &HashSet<ValueId>, cts: &mut Cotangents) {
    let outs: Vec<Tensor> = rec
        .outputs
        .iter()
        .map(|&v| {
            cts.remove(&v)
                .unwrap_or_else(|| tape::handle(tape.trace, v).zeros_like())
        })
        .collect();
    let grads = custom::run_backward(tape, rec, &outs);
    for (&v, ct) in rec.inputs.iter().zip(grads) {
        if active.contains(&v) {
            accumulate(cts, v, ct);
        }
    }
}
