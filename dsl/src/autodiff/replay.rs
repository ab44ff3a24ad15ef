//! Re-emitting recorded nodes into the current region: how a backward pass
//! recomputes a loop body, a branch or a checkpointed function.

use std::collections::HashMap;

use crate::error::Location;
use crate::ir::{Node, NodeId, RegionId, ValueId};
use crate::trace::tensor::Tensor;
use crate::trace::{with_state, TraceState};

/// Which recorded nodes a replay reuses instead of recomputing.
pub(crate) type Keep<'a> = &'a dyn Fn(&Node) -> bool;

fn lookup(
    s: &mut TraceState,
    map: &HashMap<ValueId, ValueId>,
    v: ValueId,
    region: RegionId,
) -> ValueId {
    let m = map.get(&v).copied().unwrap_or(v);
    match s.resolve_in(m, region) {
        Ok(r) => r,
        Err(msg) => {
            let loc = Location {
                file: "<gradient>".into(),
                line: 0,
                column: 0,
            };
            s.fail("replay", &[], format!("internal: {msg}"), &loc);
            m
        }
    }
}

fn clone_region(
    s: &mut TraceState,
    src: RegionId,
    parent: RegionId,
    map: &mut HashMap<ValueId, ValueId>,
) -> RegionId {
    let kind = s.graph.regions[src].kind;
    let new = s.graph.add_region(parent, kind);
    for a in s.graph.regions[src].args.clone() {
        let spec = s.graph.values[a].spec.clone();
        let na = s.graph.add_arg(new, spec);
        map.insert(a, na);
    }
    for (o, inner) in s.graph.regions[src].captures.clone() {
        let mo = lookup(s, map, o, parent);
        let mi = map.get(&inner).copied().unwrap_or(inner);
        s.graph.regions[new].captures.push((mo, mi));
    }
    let nodes = s.graph.regions[src].nodes.clone();
    replay_in(s, &nodes, new, map, &|_| false);
    let results = s.graph.regions[src].results.clone();
    let mapped = results.iter().map(|&r| lookup(s, map, r, new)).collect();
    s.graph.regions[new].results = mapped;
    new
}

fn replay_in(
    s: &mut TraceState,
    nodes: &[NodeId],
    region: RegionId,
    map: &mut HashMap<ValueId, ValueId>,
    keep: Keep<'_>,
) -> Vec<(NodeId, NodeId)> {
    let mut out = Vec::with_capacity(nodes.len());
    for &n in nodes {
        let node = s.graph.nodes[n].clone();
        if keep(&node) {
            // A kept node's results are its recorded ones, unless the
            // caller mapped them already (a loop's backward body reads the
            // products its forward loop saved for the iteration).
            for &r in &node.results {
                map.entry(r)
                    .or_insert_with(|| lookup(s, &HashMap::new(), r, region));
            }
            out.push((n, n));
            continue;
        }
        let operands = node
            .operands
            .iter()
            .map(|&v| lookup(s, map, v, region))
            .collect();
        let regions = node
            .regions
            .iter()
            .map(|&r| clone_region(s, r, region, map))
            .collect();
        let specs = node
            .results
            .iter()
            .map(|&r| s.graph.values[r].spec.clone())
            .collect();
        let new = s.graph.add_node(
            region,
            node.op.clone(),
            operands,
            specs,
            regions,
            node.location,
        );
        for (&a, b) in node.results.iter().zip(new) {
            map.insert(a, b);
        }
        out.push((n, s.graph.nodes.len() - 1));
    }
    super::custom::remap_records(s.id, region, &out, map);
    out
}

/// Re-emits `nodes` into the current region with the values in `map`
/// substituted (outer values are threaded in as usual); nodes whose op
/// `keep` accepts are not recomputed, their recorded results are used (such
/// a node is paired with itself: a backward pass reads it with its operands
/// substituted through `map`). Returns (recorded node, new node) pairs, and
/// extends `map` with every recorded value's new counterpart.
pub(crate) fn replay(
    nodes: &[NodeId],
    map: &mut HashMap<ValueId, ValueId>,
    keep: Keep<'_>,
) -> Vec<(NodeId, NodeId)> {
    with_state(|s| {
        let region = s.region;
        replay_in(s, nodes, region, map, keep)
    })
    .unwrap_or_default()
}

/// Re-emits the body of `region` into the current region with its arguments
/// bound to `args`; returns the new counterparts of its results and of its
/// nodes, and the value map.
pub(crate) fn inline_region(
    region: RegionId,
    args: &[Tensor],
) -> (Vec<Tensor>, Vec<NodeId>, HashMap<ValueId, ValueId>) {
    inline_region_with(region, args, &[])
}

/// [`inline_region`] with the results of some of the region's top-level
/// nodes given (`known`: recorded value, value to read in its place): a
/// node whose results are all known is not recomputed; it is paired with
/// itself, to be read through the value map (see
/// [`Tape::subst`](super::tape::Tape)).
pub(crate) fn inline_region_with(
    region: RegionId,
    args: &[Tensor],
    known: &[(ValueId, Tensor)],
) -> (Vec<Tensor>, Vec<NodeId>, HashMap<ValueId, ValueId>) {
    let mut map = HashMap::new();
    let Some((trace, nodes, src_args, results)) = with_state(|s| {
        let r = &s.graph.regions[region];
        (s.id, r.nodes.clone(), r.args.clone(), r.results.clone())
    }) else {
        return (Vec::new(), Vec::new(), map);
    };
    for (&a, t) in src_args.iter().zip(args) {
        map.insert(a, t.value);
    }
    for (v, t) in known {
        map.insert(*v, t.value);
    }
    let keep = |n: &Node| {
        !n.results.is_empty() && n.results.iter().all(|r| known.iter().any(|(v, _)| v == r))
    };
    let pairs = replay(&nodes, &mut map, &keep);
    let outs = with_state(|s| {
        let here = s.region;
        results
            .iter()
            .map(|&r| Tensor {
                trace,
                value: lookup(s, &map, r, here),
            })
            .collect()
    })
    .unwrap_or_default();
    (outs, pairs.into_iter().map(|(_, n)| n).collect(), map)
}
