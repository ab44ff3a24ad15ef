//! Re-emitting a traced function's nodes over a batch: each recorded value
//! maps to a new one, batched along its axis 0 or not batched at all.

use std::collections::HashMap;

use crate::error::Location;
use crate::ir::{Node, NodeId, Op, RegionId, ValueId};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::emit;

/// A value of the batched program: `t`, whose axis 0 is the batch axis
/// when `batched` (and which is the same for every example otherwise).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BVal {
    pub(crate) t: Tensor,
    pub(crate) batched: bool,
}

impl BVal {
    pub(crate) fn batched(t: Tensor) -> BVal {
        BVal { t, batched: true }
    }
    pub(crate) fn plain(t: Tensor) -> BVal {
        BVal { t, batched: false }
    }
}

/// The replay of recorded nodes over a batch of `size` examples.
pub(crate) struct Batcher {
    pub(super) trace: u32,
    pub(super) size: usize,
    map: HashMap<ValueId, BVal>,
}

/// The recorded type of value `v`.
pub(super) fn spec(v: ValueId) -> TensorSpec {
    with_state(|s| s.graph.values[v].spec.clone())
        .unwrap_or_else(|| TensorSpec::scalar(crate::dtype::DType::F32))
}

/// A copy of node `n`.
pub(super) fn node(n: NodeId) -> Option<Node> {
    with_state(|s| s.graph.nodes.get(n).cloned()).flatten()
}

/// The region a node was recorded in, and the region being appended to.
fn regions_of(node: &Node) -> (Option<RegionId>, RegionId) {
    with_state(|s| {
        let home = node.results.first().map(|&r| s.graph.values[r].region);
        (home, s.region)
    })
    .unwrap_or((None, 0))
}

/// The values a node reads: its operands and, for a node with regions,
/// the outer values its regions use.
pub(super) fn inputs(node: &Node) -> Vec<ValueId> {
    let mut v = node.operands.clone();
    if !node.regions.is_empty() {
        let free = with_state(|s| crate::autodiff::free_values_of(&s.graph, &node.regions));
        v.extend(free.unwrap_or_default());
    }
    v
}

impl Batcher {
    /// A batcher for `size` examples in trace `trace`.
    pub(crate) fn new(trace: u32, size: usize) -> Batcher {
        Batcher {
            trace,
            size,
            map: HashMap::new(),
        }
    }

    /// What recorded value `v` became (itself, not batched, if nothing
    /// replaced it: a value from outside the function).
    pub(crate) fn get(&self, v: ValueId) -> BVal {
        self.map.get(&v).copied().unwrap_or(BVal::plain(Tensor {
            trace: self.trace,
            value: v,
        }))
    }

    /// Records that `v` became `b`.
    pub(crate) fn bind(&mut self, v: ValueId, b: BVal) {
        self.map.insert(v, b);
    }

    /// `[size] + shape` of `spec`'s shape.
    pub(super) fn batched_shape(&self, spec: &TensorSpec) -> Vec<usize> {
        let mut s = Vec::with_capacity(spec.rank() + 1);
        s.push(self.size);
        s.extend_from_slice(&spec.shape);
        s
    }

    /// `spec` with the batch axis in front.
    pub(super) fn batched_spec(&self, spec: &TensorSpec) -> TensorSpec {
        TensorSpec::new(self.batched_shape(spec), spec.dtype)
    }

    /// `b` with a batch axis: itself if it has one, else broadcast along a
    /// new axis 0 (`example` is its type for one example).
    pub(super) fn full(&self, b: BVal, example: &TensorSpec, loc: &Location) -> Tensor {
        if b.batched {
            return b.t;
        }
        let dims = (1..=example.rank()).collect();
        emit::broadcast(b.t, self.batched_shape(example), dims, loc)
    }

    /// Re-emits `nodes` over the batch, in order, keeping the gradients of
    /// their own that spans of them have.
    pub(crate) fn run(&mut self, nodes: &[NodeId]) {
        let appended = || with_state(|s| s.graph.regions[s.region].nodes.len()).unwrap_or(0);
        let mut emitted = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let before = appended();
            if let Some(node) = node(n) {
                self.node(&node);
            }
            let span = with_state(|s| {
                let new = &s.graph.regions[s.region].nodes[before..];
                Some((*new.first()?, *new.last()?))
            });
            emitted.push(span.flatten());
        }
        super::records::carry_over(self, nodes, &emitted);
    }

    fn node(&mut self, node: &Node) {
        let ins = inputs(node);
        let any_batched = ins.iter().any(|&v| self.get(v).batched);
        if !any_batched {
            let (home, here) = regions_of(node);
            let same = ins.iter().all(|&v| self.get(v).t.value == v);
            // Computed as recorded, where it was recorded: kept as it is.
            if same && home == Some(here) {
                return;
            }
        }
        let outs = self.rule(node);
        for (&r, o) in node.results.iter().zip(outs) {
            self.bind(r, o);
        }
    }

    /// The batching rule of `node`'s op: its results over the batch.
    fn rule(&mut self, node: &Node) -> Vec<BVal> {
        let ops: Vec<BVal> = node.operands.iter().map(|&v| self.get(v)).collect();
        let loc = &node.location;
        let res: Vec<TensorSpec> = node.results.iter().map(|&r| spec(r)).collect();
        let any = ops.iter().any(|o| o.batched);
        let name = super::rules::op_name(&node.op);
        if !any && node.regions.is_empty() {
            // Nothing batched, but in another region or over other values.
            let ts: Vec<Tensor> = ops.iter().map(|o| o.t).collect();
            let outs = emit::op_at(name, &ts, node.op.clone(), res, loc);
            return outs.into_iter().map(BVal::plain).collect();
        }
        match &node.op {
            Op::While { .. } => super::control::while_loop(self, node),
            Op::If => super::control::cond(self, node),
            Op::DynamicSlice { sizes } => super::indexing::dynamic_slice(self, node, &ops, sizes),
            Op::DynamicUpdateSlice => super::indexing::dynamic_update_slice(self, node, &ops),
            Op::Gather { dims, slice_sizes } => {
                vec![super::indexing::gather(self, node, &ops, dims, slice_sizes)]
            }
            Op::Scatter { dims, combine } => {
                vec![super::indexing::scatter(self, node, &ops, dims, *combine)]
            }
            _ => super::rules::batch(self, node, &ops, &res),
        }
    }
}
