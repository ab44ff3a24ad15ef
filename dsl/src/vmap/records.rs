//! Gradients of their own across `vmap`: a span of the function with a
//! stopped gradient, a checkpoint or a custom backward (`custom_vjp`) keeps
//! it over the batch. A custom backward written for one example runs
//! batched itself, and the cotangent of an input shared by every example
//! is the sum of the examples' cotangents.

use std::rc::Rc;

use crate::autodiff::{record_again, records_among, Backward, SpanKind, SpanRecord};
use crate::ir::NodeId;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::batcher::Batcher;
use super::{vmap_with, Axes};

/// Carries the records whose spans lie in `nodes` over to the nodes their
/// replay appended (`emitted[i]`: the first and last node appended to the
/// current region for `nodes[i]`, if any).
pub(super) fn carry_over(b: &Batcher, nodes: &[NodeId], emitted: &[Option<(NodeId, NodeId)>]) {
    let Some(region) = with_state(|s| s.region) else {
        return;
    };
    for rec in records_among(b.trace, nodes) {
        let at = |n: NodeId| nodes.iter().position(|&m| m == n);
        let (Some(a), Some(z)) = (at(rec.first), at(rec.last)) else {
            continue;
        };
        let span: Vec<(NodeId, NodeId)> = emitted[a..=z].iter().flatten().copied().collect();
        let (Some(first), Some(last)) = (span.first(), span.last()) else {
            // Nothing of the span was re-emitted: the record stands.
            continue;
        };
        let map = |vs: &[usize]| -> (Vec<usize>, Vec<bool>) {
            vs.iter()
                .map(|&v| b.get(v))
                .map(|x| (x.t.value, x.batched))
                .unzip()
        };
        let (inputs, in_batched) = map(&rec.inputs);
        let (outputs, out_batched) = map(&rec.outputs);
        let (residuals, res_batched) = map(&rec.residuals);
        let kind = match &rec.kind {
            SpanKind::Stop => SpanKind::Stop,
            SpanKind::Checkpoint(p) => SpanKind::Checkpoint(*p),
            SpanKind::Custom(bwd) => SpanKind::Custom(batched_backward(
                bwd.clone(),
                res_batched,
                out_batched,
                in_batched,
            )),
        };
        record_again(SpanRecord {
            trace: b.trace,
            region,
            first: first.0,
            last: last.1,
            inputs,
            outputs,
            residuals,
            kind,
        });
    }
}

/// A backward for one example run over the batch: its residuals and
/// cotangents batched as the span's values are, its input cotangents
/// batched, then summed over the batch for an input shared by all.
fn batched_backward(bwd: Backward, res: Vec<bool>, outs: Vec<bool>, ins: Vec<bool>) -> Backward {
    Rc::new(move |r: &[Tensor], c: &[Tensor]| {
        let axes: Vec<Option<isize>> = res.iter().chain(&outs).map(|&x| x.then_some(0)).collect();
        if !axes.iter().any(Option::is_some) {
            // Nothing the backward reads differs between examples.
            return bwd(r, c);
        }
        let n = r.len();
        let mut args = r.to_vec();
        args.extend_from_slice(c);
        let got = vmap_with(
            |a: Vec<Tensor>| bwd(&a[..n], &a[n..]),
            args,
            &Axes::new().inputs(axes),
        );
        got.into_iter()
            .zip(&ins)
            .map(|(g, &batched)| if batched { g } else { g.sum(&[0]) })
            .collect()
    })
}
