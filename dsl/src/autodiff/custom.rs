//! Functions with their own gradient: [`custom_vjp`] (a user-written
//! backward) and [`checkpoint`] (a backward that recomputes the forward
//! instead of keeping its intermediates).
//!
//! Both record the span of nodes their forward appended; when a pullback
//! reaches that span it runs the recorded backward instead of the op rules.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::error::Location;
use crate::ir::{Node, NodeId, Op, RegionId, ValueId};
use crate::ops::carry::{flat, Carry};
use crate::ops::control::optimization_barrier;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::backprop::{backprop, differentiable, fail_at, Cotangents};
use super::replay::replay;
use super::tape::{self, Tape};

/// What a [`checkpoint`] keeps from the forward pass instead of recomputing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Remat {
    /// Keep only the inputs; recompute everything in the backward pass
    /// (the least memory).
    Nothing,
    /// Keep the results of matrix products (`dot_general`, `matmul`) and
    /// recompute the cheap elementwise work around them (JAX's
    /// `dots_saveable`).
    Dots,
}

/// A user backward: (residuals, output cotangents) to input cotangents.
pub(crate) type Backward = Rc<dyn Fn(&[Tensor], &[Tensor]) -> Vec<Tensor>>;

#[derive(Clone)]
pub(crate) enum Kind {
    Custom(Backward),
    Checkpoint(Remat),
    /// No gradient flows through the span.
    Stop,
}

/// A span of recorded nodes with its own backward.
pub(crate) struct Record {
    pub(crate) trace: u32,
    pub(crate) region: RegionId,
    pub(crate) first: NodeId,
    pub(crate) last: NodeId,
    pub(crate) inputs: Vec<ValueId>,
    pub(crate) outputs: Vec<ValueId>,
    /// The tensors a custom backward reads (recorded so that a replay of
    /// the span can substitute its own).
    pub(crate) residuals: Vec<ValueId>,
    pub(crate) kind: Kind,
}

thread_local! {
    static RECORDS: RefCell<Vec<Rc<Record>>> = const { RefCell::new(Vec::new()) };
}

fn push(rec: Record) {
    let live = crate::trace::live_trace_ids();
    RECORDS.with(|r| {
        let mut r = r.borrow_mut();
        r.retain(|x| live.contains(&x.trace));
        r.push(Rc::new(rec));
    });
}

/// The records whose whole span lies in `tape`.
pub(crate) fn records_in(tape: &Tape) -> Vec<Rc<Record>> {
    RECORDS.with(|r| {
        r.borrow()
            .iter()
            .filter(|x| {
                x.trace == tape.trace
                    && x.region == tape.region
                    && tape.nodes.contains(&x.first)
                    && tape.nodes.contains(&x.last)
            })
            .cloned()
            .collect()
    })
}

/// The records of trace `trace` whose span lies in `nodes` (recorded in
/// one region): what a transform that re-emits those nodes elsewhere
/// carries over to its own nodes with [`record_again`].
pub(crate) fn records_among(trace: u32, nodes: &[NodeId]) -> Vec<Rc<Record>> {
    RECORDS.with(|r| {
        r.borrow()
            .iter()
            .filter(|x| x.trace == trace && nodes.contains(&x.first) && nodes.contains(&x.last))
            .cloned()
            .collect()
    })
}

/// Records a span of the current trace with its own backward (a span a
/// transform re-emitted, see [`records_among`]).
pub(crate) fn record_again(rec: Record) {
    push(rec);
}

/// Runs the backward of `rec` on the cotangents of its outputs; returns one
/// cotangent per input.
pub(crate) fn run_backward(tape: &Tape, rec: &Record, outs: &[Tensor]) -> Vec<Tensor> {
    let zeros = || -> Vec<Tensor> {
        rec.inputs
            .iter()
            .map(|&v| tape::handle(tape.trace, v).zeros_like())
            .collect()
    };
    match &rec.kind {
        Kind::Custom(bwd) => {
            let res: Vec<Tensor> = rec
                .residuals
                .iter()
                .map(|&v| tape::handle(tape.trace, v))
                .collect();
            let got = bwd(&res, outs);
            let loc =
                with_state(|s| s.graph.nodes[rec.first].location.clone()).unwrap_or_else(unknown);
            if got.len() != rec.inputs.len() {
                let m = format!(
                    "the backward returned {} cotangents for {} inputs",
                    got.len(),
                    rec.inputs.len()
                );
                fail_at("custom_vjp", &got, m, &loc);
                return zeros();
            }
            for (i, (&v, t)) in rec.inputs.iter().zip(&got).enumerate() {
                let want = tape::spec(v);
                if t.spec() != want {
                    let m = format!(
                        "the backward's cotangent {i} is {} but input {i} is {want}",
                        t.spec()
                    );
                    fail_at("custom_vjp", &got, m, &loc);
                    return zeros();
                }
            }
            got
        }
        Kind::Stop => zeros(),
        Kind::Checkpoint(policy) => {
            let span: Vec<NodeId> = match (
                tape.nodes.iter().position(|&n| n == rec.first),
                tape.nodes.iter().position(|&n| n == rec.last),
            ) {
                (Some(a), Some(b)) => tape.nodes[a..=b].to_vec(),
                _ => return zeros(),
            };
            let ins: Vec<Tensor> = rec
                .inputs
                .iter()
                .map(|&v| tape::handle(tape.trace, v))
                .collect();
            // The barrier keeps XLA from merging the recomputation with the
            // forward pass (which would keep the intermediates alive).
            let mut both = ins.clone();
            both.extend(outs);
            let fenced = optimization_barrier(both);
            let mut map: HashMap<ValueId, ValueId> = HashMap::new();
            for (&v, t) in rec.inputs.iter().zip(&fenced) {
                map.insert(v, t.value);
            }
            let keep = |n: &Node| *policy == Remat::Dots && matches!(n.op, Op::DotGeneral { .. });
            let pairs = replay(&span, &mut map, &keep);
            // The replay copied this very record onto its own recomputation:
            // drop that copy, or the backward would recompute forever.
            let new_of = |n: NodeId| pairs.iter().find(|p| p.0 == n).map(|p| p.1);
            if let (Some(f), Some(l)) = (new_of(rec.first), new_of(rec.last)) {
                RECORDS.with(|r| {
                    r.borrow_mut()
                        .retain(|x| !(x.trace == tape.trace && x.first == f && x.last == l))
                });
            }
            let here = tape::current().map(|(_, r)| r).unwrap_or(0);
            let mut cts = Cotangents::new();
            for (&o, ct) in rec.outputs.iter().zip(&fenced[ins.len()..]) {
                if differentiable(o) {
                    let v = map.get(&o).copied().unwrap_or(o);
                    super::backprop::accumulate(&mut cts, v, *ct);
                }
            }
            let inputs: Vec<ValueId> = fenced[..ins.len()].iter().map(|t| t.value).collect();
            let mut tp = Tape::new(
                tape.trace,
                here,
                pairs.into_iter().map(|(_, n)| n).collect(),
            );
            tp.subst = map;
            let res = backprop(&tp, &inputs, cts);
            inputs
                .iter()
                .zip(&ins)
                .map(|(v, t)| res.get(v).copied().unwrap_or_else(|| t.zeros_like()))
                .collect()
        }
    }
}

fn unknown() -> Location {
    Location {
        file: "<gradient>".into(),
        line: 0,
        column: 0,
    }
}

/// The recorded ends of a span.
struct Span {
    trace: u32,
    region: RegionId,
    first: NodeId,
    last: NodeId,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
}

impl Span {
    fn record(self, kind: Kind, residuals: Vec<ValueId>) {
        push(Record {
            trace: self.trace,
            region: self.region,
            first: self.first,
            last: self.last,
            inputs: self.inputs,
            outputs: self.outputs,
            residuals,
            kind,
        });
    }
}

/// Copies the records whose span a replay re-emitted (`pairs`: recorded
/// node, new node; `map`: recorded value, new value) onto the new nodes in
/// `region`, so custom gradients and stopped gradients survive the
/// recomputation of loop bodies, branches and checkpoints.
pub(crate) fn remap_records(
    trace: u32,
    region: RegionId,
    pairs: &[(NodeId, NodeId)],
    map: &HashMap<ValueId, ValueId>,
) {
    let new_of = |n: NodeId| pairs.iter().find(|p| p.0 == n).map(|p| p.1);
    let val = |v: &ValueId| map.get(v).copied().unwrap_or(*v);
    let copies: Vec<Record> = RECORDS.with(|r| {
        r.borrow()
            .iter()
            .filter(|x| x.trace == trace)
            .filter_map(|x| {
                let (first, last) = (new_of(x.first)?, new_of(x.last)?);
                if (first, last) == (x.first, x.last) {
                    return None;
                }
                Some(Record {
                    trace,
                    region,
                    first,
                    last,
                    inputs: x.inputs.iter().map(val).collect(),
                    outputs: x.outputs.iter().map(val).collect(),
                    residuals: x.residuals.iter().map(val).collect(),
                    kind: x.kind.clone(),
                })
            })
            .collect()
    });
    // Called while the trace state is borrowed: no clean-up of dead traces here.
    RECORDS.with(|r| r.borrow_mut().extend(copies.into_iter().map(Rc::new)));
}

/// Runs `f` on fresh copies of `primals` and records the span of nodes it
/// appended (`None` outside a trace, or if `f` returned no tensor).
fn record_span<C: Carry, O: Carry>(
    primals: C,
    f: impl FnOnce(C) -> O,
    loc: &Location,
) -> (O, Option<Span>) {
    let Some((trace, region)) = tape::current() else {
        return (f(primals), None);
    };
    let ins: Vec<Tensor> = flat(&primals)
        .into_iter()
        .map(|t| tape::fresh(t, loc))
        .collect();
    let start = tape::node_count();
    let out = f(primals.rebuild(&mut ins.clone().into_iter()));
    let outs: Vec<Tensor> = flat(&out)
        .into_iter()
        .map(|t| tape::fresh(t, loc))
        .collect();
    let out = out.rebuild(&mut outs.clone().into_iter());
    let nodes = tape::region_nodes_since(region, start);
    let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) else {
        return (out, None);
    };
    if tape::current() != Some((trace, region)) || outs.is_empty() {
        return (out, None);
    }
    let span = Span {
        trace,
        region,
        first,
        last,
        inputs: ins.iter().map(|t| t.value).collect(),
        outputs: outs.iter().map(|t| t.value).collect(),
    };
    (out, Some(span))
}

/// Calls `fwd` on `primals` and gives the result a gradient of your own:
/// when a pullback ([`vjp`](super::vjp), [`grad`](super::grad)) reaches
/// this call, it runs `bwd(&residuals, output_cotangents)` instead of
/// differentiating `fwd`'s ops. `fwd` returns the outputs and the
/// residuals the backward needs (tensors: a [`Carry`]; Rust values the
/// backward needs can be captured by `bwd` itself); `bwd` returns one
/// cotangent per input, shaped like `primals`. The custom backward is kept
/// when the call is recomputed (inside a differentiated loop or branch, or
/// a [`checkpoint`]).
///
/// ```
/// use tessel_dsl::autodiff::{custom_vjp, grad};
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// // A clipped-gradient identity: forward is x, backward clips to [-1, 1].
/// let g = trace("clip_grad", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| {
///     grad(|x: Tensor| {
///         let y = custom_vjp(x, |x| (x, ()), |_, g: Tensor| g.clamp(-1.0, 1.0));
///         (y * 5.0).sum(&[0])
///     }, a[0])
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn custom_vjp<C, O, R>(
    primals: C,
    fwd: impl FnOnce(C) -> (O, R),
    bwd: impl Fn(&R, O) -> C + 'static,
) -> O
where
    C: Carry + 'static,
    O: Carry + 'static,
    R: Carry + 'static,
{
    let loc = Location::caller();
    let mut res: Option<R> = None;
    let (out, span) = record_span(
        primals,
        |p| {
            let (o, r) = fwd(p);
            res = Some(r);
            o
        },
        &loc,
    );
    let (Some(span), Some(res)) = (span, res) else {
        return out;
    };
    let residuals: Vec<ValueId> = flat(&res)
        .into_iter()
        .filter_map(|t| tape::value_here(t, "custom_vjp", &loc))
        .collect();
    let template = out.rebuild(&mut flat(&out).into_iter());
    let erased: Backward = Rc::new(move |r: &[Tensor], cts: &[Tensor]| {
        let res = res.rebuild(&mut r.iter().copied());
        let ct = template.rebuild(&mut cts.iter().copied());
        flat(&bwd(&res, ct))
    });
    span.record(Kind::Custom(erased), residuals);
    out
}

/// Calls `f` on `primals` without keeping its intermediates for the
/// backward pass: a pullback recomputes them (all of them with
/// [`Remat::Nothing`], all but the matrix products with [`Remat::Dots`]).
/// The gradient is the same as without the checkpoint; the peak memory of
/// a training step is lower, at the cost of a second forward pass of `f`.
///
/// ```
/// use tessel_dsl::autodiff::{checkpoint, grad, Remat};
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// let g = trace("remat", &[("x".into(), TensorSpec::new([4, 4], F32))], KernelConfig::default(), |a| {
///     grad(|x: Tensor| checkpoint(x, |x| x.matmul(x).tanh(), Remat::Dots).sum(&[0, 1]), a[0])
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn checkpoint<C: Carry, O: Carry>(primals: C, f: impl FnOnce(C) -> O, policy: Remat) -> O {
    let (out, span) = record_span(primals, f, &Location::caller());
    if let Some(span) = span {
        span.record(Kind::Checkpoint(policy), Vec::new());
    }
    out
}

/// `x` unchanged, with no gradient flowing back through it (JAX's
/// `lax.stop_gradient`): to a pullback its values are constants.
///
/// ```
/// use tessel_dsl::autodiff::{grad, stop_gradient};
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// // d/dx (x * stop(x)) = stop(x) = x, not 2x.
/// let g = trace("sg", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| {
///     grad(|x: Tensor| (x * stop_gradient(x)).sum(&[0]), a[0])
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn stop_gradient<C: Carry>(x: C) -> C {
    let (out, span) = record_span(x, |x| x, &Location::caller());
    if let Some(span) = span {
        span.record(Kind::Stop, Vec::new());
    }
    out
}

/// Whether node `n` of `tape` lies in a span no gradient flows through.
pub(crate) fn stops(records: &[Rc<Record>], tape: &Tape, n: NodeId) -> bool {
    records.iter().any(|r| {
        matches!(r.kind, Kind::Stop) && {
            let at = |m| tape.nodes.iter().position(|&x| x == m);
            match (at(r.first), at(r.last), at(n)) {
                (Some(a), Some(b), Some(i)) => a <= i && i <= b,
                _ => false,
            }
        }
    })
}
