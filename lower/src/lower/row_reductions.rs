//! Row reductions prepared for XLA's CPU backend.
//!
//! XLA's CPU compiler splits a reduction over a long minor axis into a
//! `reduce-window` of 32 and a second reduce, and cannot fuse what feeds the
//! window: `sum(x²)` over the rows of a `[4096, 1024]` tensor writes `x²`
//! out in full and reads it back. [`split_row_reductions`] rewrites each such
//! reduction into one over lanes of 8 first, which XLA fuses with its
//! producer, then one over the partial sums:
//!
//! ```text
//! reduce(x: [.., N]) over the last axis
//!   => reduce(optimization_barrier(reduce(reshape(x): [.., N/8, 8]) over 8)) over N/8
//! ```
//!
//! The barrier keeps XLA from merging the two reduces back into one (which it
//! would then split into the window again). Only reductions whose operand an
//! elementwise op makes for them alone are rewritten: that is the case the
//! fusion saves a pass over memory. On the CPU plugin this made
//! `rms_norm` and `layer_norm` over `[4096, 1024]` f32 1.3–1.5× faster (the
//! PERFORMANCE.md's "Against JAX" section has the figures). Only programs compiled
//! for a CPU device are rewritten; the graph a kernel traced, and the
//! interpreter's evaluation of it, are not.

use crate::ir::{Def, Graph, Node, NodeId, Op, ReduceKind, Value, ValueId};
use crate::shape::TensorSpec;

/// The lanes the first reduce combines.
const LANES: usize = 8;

/// The shortest row worth splitting: XLA leaves rows of up to 32 whole.
const MIN_ROW: usize = 64;

/// The shortest row split when the kernel asks for it (`split_rows`): two
/// lanes of 8.
const MIN_ASKED_ROW: usize = 16;

/// `graph` with every float sum, max or min over just the last axis of a
/// tensor of rank 2 or more, whose length is a multiple of 8 and at least
/// 64, and which an elementwise op makes for this reduction alone, rewritten
/// as a reduce over lanes of 8, an optimization barrier and a reduce over the
/// partial results (see the module docs). The results and their types are
/// unchanged; only the order of the combining changes (for sums, within
/// float rounding).
///
/// Reductions of a parameter, of a loop value or of a result something else
/// also reads are left whole: XLA writes such an operand out anyway, and
/// splitting them measured slower (a row max of a `[4096, 1024]` parameter:
/// 0.46–0.58 ms against 0.31–0.34). A reduction traced with
/// [`Op::Reduce`]'s `split_rows` (rows of 16 or more, a multiple of 8) is
/// split whatever its operand: flash attention's row max and sum of each
/// block of scores, which split ran 1.7× faster on the pinned plugin.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, lower::{lower, split_row_reductions}, trace, TensorSpec, F32};
/// let x = [("x".into(), TensorSpec::new([16, 1024], F32))];
/// let g = trace("rows", &x, KernelConfig::default(), |a| a[0].square().sum(&[-1]))?;
/// let split = lower(&split_row_reductions(&g));
/// assert_eq!(split.matches("stablehlo.reduce\"").count(), 2);
/// assert!(split.contains("tensor<16x128x8xf32>"));
/// assert!(split.contains("stablehlo.optimization_barrier"));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn split_row_reductions(graph: &Graph) -> Graph {
    let uses = use_counts(graph);
    let mut out = graph.clone();
    for id in 0..graph.nodes.len() {
        if let Some((kind, row)) = splittable(graph, &uses, id) {
            split(&mut out, id, kind, row);
        }
    }
    out
}

/// How many times each value is read: as an operand, a region's result or
/// a loop's capture.
fn use_counts(graph: &Graph) -> Vec<usize> {
    let mut uses = vec![0usize; graph.values.len()];
    let reads = graph.nodes.iter().flat_map(|n| n.operands.iter());
    let returned = graph.regions.iter().flat_map(|r| r.results.iter());
    let captured = graph
        .regions
        .iter()
        .flat_map(|r| r.captures.iter().map(|(v, _)| v));
    for &v in reads.chain(returned).chain(captured) {
        uses[v] += 1;
    }
    uses
}

/// Whether `value` is made by an elementwise op that nothing else reads: the
/// producer XLA fuses into the lane reduce, and would otherwise write out.
fn fusable_producer(graph: &Graph, uses: &[usize], value: ValueId) -> bool {
    let Def::Result { node, .. } = graph.values[value].def else {
        return false;
    };
    let elementwise = matches!(
        graph.nodes[node].op,
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Clamp | Op::Convert
    );
    elementwise && uses[value] == 1
}

/// The combiner and row length of node `id` when it is a reduction to split.
fn splittable(graph: &Graph, uses: &[usize], id: NodeId) -> Option<(ReduceKind, usize)> {
    let node = &graph.nodes[id];
    let Op::Reduce {
        kind,
        dims,
        split_rows,
    } = &node.op
    else {
        return None;
    };
    if !matches!(kind, ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min) {
        return None;
    }
    let operand = *node.operands.first()?;
    if !split_rows && !fusable_producer(graph, uses, operand) {
        return None;
    }
    let x = &graph.values[operand].spec;
    let rank = x.rank();
    let row = *x.shape.last()?;
    let shortest = if *split_rows { MIN_ASKED_ROW } else { MIN_ROW };
    let ok = x.dtype.is_float()
        && rank >= 2
        && dims.as_slice() == [rank - 1]
        && row >= shortest
        && row % LANES == 0;
    ok.then_some((*kind, row))
}

/// Rewrites reduction `id` (combining with `kind` over rows of `row`) in
/// place: the reshape, the lane reduce and the barrier go before it in its
/// region, and it reduces the barrier's result over the same (last) axis.
fn split(g: &mut Graph, id: NodeId, kind: ReduceKind, row: usize) {
    let node = g.nodes[id].clone();
    let region = g.values[node.results[0]].region;
    let Some(at) = g.regions[region].nodes.iter().position(|&n| n == id) else {
        return;
    };
    let (x, init) = (node.operands[0], node.operands[1]);
    let spec = g.values[x].spec.clone();
    let lead = &spec.shape[..spec.rank() - 1];
    let with = |tail: &[usize]| {
        let shape: Vec<usize> = lead.iter().chain(tail).copied().collect();
        TensorSpec::new(shape, spec.dtype)
    };
    let lanes = push(
        g,
        region,
        &node,
        Op::Reshape,
        vec![x],
        with(&[row / LANES, LANES]),
    );
    let partial = push(
        g,
        region,
        &node,
        Op::Reduce {
            kind,
            dims: vec![spec.rank()],
            split_rows: false,
        },
        vec![lanes, init],
        with(&[row / LANES]),
    );
    let fenced = push(
        g,
        region,
        &node,
        Op::OptimizationBarrier,
        vec![partial],
        with(&[row / LANES]),
    );
    g.nodes[id].operands[0] = fenced;
    let added = g.nodes.len() - 3..g.nodes.len();
    g.regions[region].nodes.splice(at..at, added);
}

/// Appends a node of `op` on `operands` with one result of `spec` to
/// `region`'s arena (not yet to its node order), located where `like` is;
/// returns the result.
fn push(
    g: &mut Graph,
    region: usize,
    like: &Node,
    op: Op,
    operands: Vec<ValueId>,
    spec: TensorSpec,
) -> ValueId {
    let node = g.nodes.len();
    let value = g.values.len();
    g.values.push(Value {
        spec,
        region,
        def: Def::Result { node, index: 0 },
    });
    g.nodes.push(Node {
        op,
        operands,
        results: vec![value],
        regions: Vec::new(),
        location: like.location.clone(),
    });
    value
}
