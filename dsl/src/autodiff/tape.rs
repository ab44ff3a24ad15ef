//! The recorded part of a trace that a pullback differentiates, and the
//! small graph queries the rules need.

use std::collections::{HashMap, HashSet};

use crate::error::Location;
use crate::ir::{Graph, Node, NodeId, Op, RegionId, ValueId};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::{build, with_state};

/// The nodes a differentiated function appended to one region of one trace.
#[derive(Clone, Debug)]
pub(crate) struct Tape {
    /// The trace they belong to.
    pub(crate) trace: u32,
    /// The region they were appended to.
    pub(crate) region: RegionId,
    /// The nodes, in order.
    pub(crate) nodes: Vec<NodeId>,
    /// Operands to read in place of the recorded ones (a checkpoint's
    /// recomputation reuses a kept node with recomputed operands).
    pub(crate) subst: HashMap<ValueId, ValueId>,
}

impl Tape {
    /// A tape of `nodes` read as recorded.
    pub(crate) fn new(trace: u32, region: RegionId, nodes: Vec<NodeId>) -> Tape {
        Tape {
            trace,
            region,
            nodes,
            subst: HashMap::new(),
        }
    }

    /// Node `n` as this tape reads it: its operands and results through
    /// [`subst`](Self::subst) (a kept node's results are its recorded ones,
    /// or the values a loop's forward pass saved for them).
    pub(crate) fn node(&self, n: NodeId) -> Option<Node> {
        let mut node = node(n)?;
        if !self.subst.is_empty() {
            for v in node.operands.iter_mut().chain(node.results.iter_mut()) {
                if let Some(&w) = self.subst.get(v) {
                    *v = w;
                }
            }
        }
        Some(node)
    }
}

/// The current trace's id and region (`None` outside a trace).
pub(crate) fn current() -> Option<(u32, RegionId)> {
    with_state(|s| (s.id, s.region))
}

/// How many nodes `region` holds now.
pub(crate) fn region_len(region: RegionId) -> usize {
    with_state(|s| s.graph.regions[region].nodes.len()).unwrap_or(0)
}

/// The nodes of `region` made since the trace held `since` nodes, in the
/// region's order: what a function called meanwhile appended to it. (By
/// id, not position: a loop's gradient may move the nodes it made to an
/// earlier place in the region, see [`supersede`].)
pub(crate) fn region_nodes_since(region: RegionId, since: usize) -> Vec<NodeId> {
    with_state(|s| {
        let nodes = &s.graph.regions[region].nodes;
        nodes.iter().copied().filter(|&n| n >= since).collect()
    })
    .unwrap_or_default()
}

/// A copy of node `n`.
pub(crate) fn node(n: NodeId) -> Option<Node> {
    with_state(|s| s.graph.nodes.get(n).cloned()).flatten()
}

/// The type of value `v`.
pub(crate) fn spec(v: ValueId) -> TensorSpec {
    with_state(|s| s.graph.values[v].spec.clone())
        .unwrap_or_else(|| TensorSpec::scalar(crate::dtype::DType::F32))
}

/// The handle of value `v` in trace `trace`.
pub(crate) fn handle(trace: u32, v: ValueId) -> Tensor {
    Tensor { trace, value: v }
}

/// The value id behind a handle of the current trace, resolved into the
/// current region (`None` if it is poisoned or foreign; the error is then
/// already recorded).
pub(crate) fn value_here(t: Tensor, op: &str, loc: &Location) -> Option<ValueId> {
    with_state(|s| match s.operand(t) {
        Ok(v) => v,
        Err(m) => {
            s.fail(op, &[t], m, loc);
            None
        }
    })
    .flatten()
}

/// A fresh value equal to `t` (an identity reshape XLA folds away), so that
/// a differentiated function's inputs and outputs are values of their own.
pub(crate) fn fresh(t: Tensor, loc: &Location) -> Tensor {
    build("vjp", &[t], loc.clone(), 1, |s| {
        Ok((Op::Reshape, vec![s[0].clone()]))
    })[0]
}

/// Sets the location of every node from index `from` on to `loc`, so that
/// the ops a gradient rule emits point at the user's forward op.
pub(crate) fn relocate_from(from: usize, loc: &Location) {
    with_state(|s| {
        for n in &mut s.graph.nodes[from..] {
            n.location = loc.clone();
        }
    });
}

/// How many nodes the current trace holds.
pub(crate) fn node_count() -> usize {
    with_state(|s| s.graph.nodes.len()).unwrap_or(0)
}

/// Values used inside `regions` (at any depth) but defined outside them:
/// what an `if` reads from the enclosing code.
pub(crate) fn free_values(g: &Graph, regions: &[RegionId]) -> Vec<ValueId> {
    let mut inside: HashSet<RegionId> = HashSet::new();
    let mut stack: Vec<RegionId> = regions.to_vec();
    while let Some(r) = stack.pop() {
        if inside.insert(r) {
            for &n in &g.regions[r].nodes {
                stack.extend(&g.nodes[n].regions);
            }
        }
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut visit = |v: ValueId, out: &mut Vec<ValueId>| {
        if !inside.contains(&g.values[v].region) && seen.insert(v) {
            out.push(v);
        }
    };
    let mut order: Vec<RegionId> = inside.iter().copied().collect();
    order.sort_unstable();
    for r in order {
        for &n in &g.regions[r].nodes {
            for &v in &g.nodes[n].operands {
                visit(v, &mut out);
            }
        }
        for &v in &g.regions[r].results {
            visit(v, &mut out);
        }
        for &(o, _) in &g.regions[r].captures {
            visit(o, &mut out);
        }
    }
    out
}

/// [`free_values`] on the current trace's graph.
pub(crate) fn free_values_now(regions: &[RegionId]) -> Vec<ValueId> {
    with_state(|s| free_values(&s.graph, regions)).unwrap_or_default()
}

/// The node whose result `t` is (`None` for an argument or a poisoned value).
pub(crate) fn defining_node(t: Tensor) -> Option<NodeId> {
    with_state(|s| match s.graph.values.get(t.value)?.def {
        crate::ir::Def::Result { node, .. } => Some(node),
        _ => None,
    })
    .flatten()
}

/// Makes the loop `by` compute, in node `node`'s place, what loop `node`
/// computed: node `node` takes `by`'s op (with `node`'s trip count, and its
/// stacked outputs at their new positions), operands, regions and results,
/// with `node`'s results `0..k` as `by`'s results `offset..offset + k`, so
/// that every use of them, and every tape that lists `node`, reads the new
/// loop; node `by` takes the old loop, with fresh result ids that nothing
/// reads. The nodes appended to `region` from position `from` on (the new
/// loop and the values it starts from) move to just before `node`, where
/// everything they read is already defined.
///
/// Returns whether it did: `node` must be in `region` before `from`, and
/// the result types must match.
pub(crate) fn supersede(
    node: NodeId,
    by: NodeId,
    offset: usize,
    k: usize,
    region: RegionId,
    from: usize,
) -> bool {
    with_state(|s| {
        let g = &mut s.graph;
        let (Some(old), Some(new)) = (g.nodes.get(node), g.nodes.get(by)) else {
            return false;
        };
        let (
            Op::While {
                trip_count,
                stacked,
            },
            Op::While { .. },
        ) = (&old.op, &new.op)
        else {
            return false;
        };
        if old.results.len() < k || new.results.len() < offset + k {
            return false;
        }
        let same = (0..k).all(|i| {
            let (a, b) = (
                &g.values[old.results[i]],
                &g.values[new.results[offset + i]],
            );
            a.spec == b.spec && a.region == region && b.region == region
        });
        let order = &g.regions[region].nodes;
        let at = order.iter().position(|&m| m == node);
        let Some(at) = at.filter(|&at| same && at < from && from <= order.len()) else {
            return false;
        };
        if !order[from..].contains(&by) {
            return false;
        }
        let op = Op::While {
            trip_count: *trip_count,
            stacked: stacked.start + offset..stacked.end + offset,
        };
        let mut old = g.nodes[node].clone();
        let mut new = std::mem::replace(&mut g.nodes[by], old.clone());
        for i in 0..k {
            std::mem::swap(&mut old.results[i], &mut new.results[offset + i]);
        }
        new.op = op;
        g.nodes[node] = new;
        g.nodes[by] = old;
        for n in [node, by] {
            for (index, &v) in g.nodes[n].results.iter().enumerate() {
                g.values[v].def = crate::ir::Def::Result { node: n, index };
            }
        }
        let order = &mut g.regions[region].nodes;
        let moved: Vec<NodeId> = order
            .drain(from..)
            .map(|m| if m == by { node } else { m })
            .collect();
        order.splice(at..=at, moved.into_iter().chain([by]));
        true
    })
    .unwrap_or(false)
}
