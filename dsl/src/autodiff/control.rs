//! Gradients of traced control flow.
//!
//! A branch is differentiated by a branch on the same predicate whose arms
//! recompute the taken arm and pull the cotangents back through it. A loop
//! is run backwards: a forward pass counts the iterations (and, when the
//! trip count is known while tracing, saves every iteration's carried
//! values, except buffers the body only writes into), then a reverse loop
//! pulls the cotangent back through one body at a time. Without a known
//! trip count, iteration `j`'s state is recomputed from the initial values
//! (constant memory, quadratic work). The forward pass takes the place of
//! the loop it differentiates ([`tape::supersede`]), so the steps run once
//! forward; a loop-invariant tensor whose gradient is one product per
//! iteration gets it from one product after the backward loop
//! ([`loop_products`]).

use std::collections::{HashMap, HashSet};

use crate::dtype::DType;
use crate::ir::{Def, Node, NodeId, Op, RegionId, ValueId};
use crate::ops::control::{CondBuilder, WhileBuilder};
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::backprop::{activity, backprop, differentiable, Cotangents};
use super::loop_products;
use super::replay::{inline_region, inline_region_with};
use super::tape::{self, Tape};

type Grads = Result<Vec<Option<Tensor>>, String>;

fn zeros_of(t: Tensor) -> Tensor {
    t.zeros_like()
}

fn s32(v: f64) -> Tensor {
    Tensor::scalar(v, DType::S32)
}

/// The gradient of an `if`: `read` is the predicate and then the values
/// the branches use from outside.
pub(crate) fn if_vjp(
    trace: u32,
    node: &Node,
    outs: &[Option<Tensor>],
    read: &[ValueId],
    want: &[bool],
) -> Grads {
    let pred = tape::handle(trace, node.operands[0]);
    let targets: Vec<ValueId> = read
        .iter()
        .zip(want)
        .skip(1)
        .filter(|(_, &w)| w)
        .map(|(&v, _)| v)
        .collect();
    let Some(mut b) = CondBuilder::begin(pred, node.location.clone()) else {
        return Err("not tracing".into());
    };
    let arm = |region: RegionId| -> Vec<Tensor> {
        let (results, nodes, _) = inline_region(region, &[]);
        let here = tape::current().map(|(_, r)| r).unwrap_or(0);
        let mut cts = Cotangents::new();
        for (r, ct) in results.iter().zip(outs) {
            if let Some(ct) = ct {
                if differentiable(r.value) {
                    super::backprop::accumulate(&mut cts, r.value, *ct);
                }
            }
        }
        let tp = Tape::new(trace, here, nodes);
        let res = backprop(&tp, &targets, cts);
        targets
            .iter()
            .map(|&v| {
                res.get(&v)
                    .copied()
                    .unwrap_or_else(|| zeros_of(tape::handle(trace, v)))
            })
            .collect()
    };
    let t = arm(node.regions[0]);
    b.then_done(&t);
    let e = arm(node.regions[1]);
    let mut merged = b.finish(&e).into_iter();
    Ok(read
        .iter()
        .zip(want)
        .enumerate()
        .map(|(i, (_, &w))| if i > 0 && w { merged.next() } else { None })
        .collect())
}

/// Which loop positions can carry a gradient: those whose initial value is
/// active, and those the body makes depend on an active position.
fn loop_activity(
    trace: u32,
    body: RegionId,
    args: &[ValueId],
    results: &[ValueId],
    want: &[bool],
) -> Vec<bool> {
    let mut act: Vec<bool> = want
        .iter()
        .zip(args)
        .map(|(&w, &a)| w && differentiable(a))
        .collect();
    let nodes = with_state(|s| s.graph.regions[body].nodes.clone()).unwrap_or_default();
    let tp = Tape::new(trace, body, nodes);
    loop {
        let inputs: Vec<ValueId> = args
            .iter()
            .zip(&act)
            .filter(|(_, &a)| a)
            .map(|(&v, _)| v)
            .collect();
        let live = activity(&tp, &inputs);
        let mut changed = false;
        for (i, r) in results.iter().enumerate() {
            if !act[i] && live.contains(r) && differentiable(args[i]) {
                act[i] = true;
                changed = true;
            }
        }
        if !changed {
            return act;
        }
    }
}

/// The gradient of a `while`, for every operand (carried values then
/// captured values).
///
/// `primal` is the loop's node when `node` is that node as recorded: the
/// gradient's forward loop, which computes the loop's results too, then
/// takes its place ([`tape::supersede`]), so the forward steps run once
/// (JAX's scan partial-evaluates into one such loop).
pub(crate) fn while_vjp(
    trace: u32,
    node: &Node,
    primal: Option<NodeId>,
    outs: &[Option<Tensor>],
    want: &[bool],
) -> Grads {
    let Op::While {
        trip_count,
        stacked,
    } = &node.op
    else {
        return Err("internal: not a loop".into());
    };
    let (cond_r, body_r) = (node.regions[0], node.regions[1]);
    let k = node.operands.len();
    let (args, results) = with_state(|s| {
        let r = &s.graph.regions[body_r];
        (r.args.clone(), r.results.clone())
    })
    .ok_or("not tracing")?;
    let invariant: Vec<bool> = (0..k).map(|i| results[i] == args[i]).collect();
    let act = loop_activity(trace, body_r, &args, &results, want);
    let inits: Vec<Tensor> = node
        .operands
        .iter()
        .map(|&v| tape::handle(trace, v))
        .collect();
    let loc = node.location.clone();
    // The positions whose values the backward body reads: those that
    // change, except those the body only writes into (stacked outputs).
    let only_written: Vec<bool> = (0..k).map(|i| written_only(body_r, i)).collect();
    let variant: Vec<usize> = (0..k)
        .filter(|&i| !invariant[i] && !only_written[i])
        .collect();
    let saved = trip_count.filter(|&n| n > 0);
    // A scan's stacked outputs need no carried cotangent: each row is
    // written by one iteration only, so that iteration reads its row of
    // the result's cotangent as it is (JAX's scan transpose). Carrying it
    // instead, with the written row zeroed, costs XLA a copy of the whole
    // buffer per iteration.
    let read_only: Vec<bool> = (0..k)
        .map(|i| saved.is_some() && stacked.contains(&i) && only_written[i] && act[i])
        .collect();

    // The products of the body's top-level dots, saved per iteration with
    // the carried values, so the backward body does not compute them again
    // (JAX's scan saves them among its residuals): the gradient of an RNN
    // step `tanh(h W + x)` then takes two products per step, not three.
    // A body with a custom span (a checkpoint, `stop_gradient`,
    // `custom_vjp`) is differentiated by its records, which recompute their
    // own nodes: its dots are not saved.
    let dots: Vec<ValueId> = match saved {
        Some(_) => with_state(|s| {
            let nodes = &s.graph.regions[body_r].nodes;
            if !super::custom::records_among(trace, nodes).is_empty() {
                return Vec::new();
            }
            nodes
                .iter()
                .filter(|&&n| matches!(s.graph.nodes[n].op, Op::DotGeneral { .. }))
                .flat_map(|&n| s.graph.nodes[n].results.clone())
                .collect()
        })
        .unwrap_or_default(),
        None => Vec::new(),
    };

    // Forward: count the iterations, saving the carried values when the
    // trip count is known.
    let outer = tape::current().map(|(_, r)| r).unwrap_or(0);
    let fwd_from = tape::region_len(outer);
    let mut fwd_init = vec![s32(0.0)];
    fwd_init.extend(&inits);
    if let Some(n) = saved {
        let specs = variant.iter().map(|&i| tape::spec(node.operands[i]));
        for sp in specs.chain(dots.iter().map(|&d| tape::spec(d))) {
            let mut shape = vec![n];
            shape.extend(sp.shape.iter().copied());
            fwd_init.push(Tensor::zeros(shape, sp.dtype));
        }
    }
    let (mut fb, cargs) = WhileBuilder::begin(fwd_init, loc.clone()).ok_or("not tracing")?;
    let (pred, _, _) = inline_region(cond_r, &cargs[1..1 + k]);
    let bargs = fb.cond_done(pred[0]);
    let counter = bargs[0];
    let state = &bargs[1..1 + k];
    let mut next = vec![counter + 1];
    let (stepped, _, fmap) = inline_region(body_r, state);
    next.extend(&stepped);
    if saved.is_some() {
        let products = dots
            .iter()
            .map(|d| tape::handle(trace, fmap.get(d).copied().unwrap_or(*d)));
        let rows: Vec<Tensor> = variant.iter().map(|&i| state[i]).chain(products).collect();
        for (slot, row) in rows.into_iter().enumerate() {
            let buf = bargs[1 + k + slot];
            let mut starts = vec![counter];
            starts.extend((0..row.rank()).map(|_| s32(0.0)));
            next.push(buf.dynamic_update_slice(row.expand_dims(0), &starts));
        }
    }
    let fwd = fb.finish(next);
    if let (Some(p), Some(f)) = (primal, tape::defining_node(fwd[0])) {
        tape::supersede(p, f, 1, k, outer, fwd_from);
    }
    let trips = fwd[0];
    let bufs: Vec<Tensor> = fwd[1 + k..].to_vec();
    // Row `j` of a saved buffer, as a value of the backward body.
    let row_of = |buf: Tensor, j: Tensor| {
        let sp = buf.spec();
        let mut starts = vec![j];
        starts.extend((1..sp.rank()).map(|_| s32(0.0)));
        let mut sizes = sp.shape.clone();
        sizes[0] = 1;
        let shape: Vec<isize> = sp.shape[1..].iter().map(|&d| d as isize).collect();
        buf.dynamic_slice(&starts, &sizes).reshape(&shape)
    };

    // Backward: j = trips-1 down to 0.
    let ct_pos: Vec<usize> = (0..k).filter(|&i| act[i] && !read_only[i]).collect();
    let mut bwd_init = vec![trips - 1];
    for &i in &ct_pos {
        let start = if invariant[i] {
            zeros_of(inits[i])
        } else {
            outs[i].unwrap_or_else(|| zeros_of(inits[i]))
        };
        bwd_init.push(start);
    }
    let (mut bb, cargs) = WhileBuilder::begin(bwd_init, loc.clone()).ok_or("not tracing")?;
    let bargs = bb.cond_done(cargs[0].ge(0));
    let j = bargs[0];
    let carried: Vec<Tensor> = bargs[1..].to_vec();
    let state_j: Vec<Tensor> = match saved {
        Some(_) => {
            // Positions neither unchanged nor kept are only written into:
            // no rule reads their values, so zeros stand in for them (one
            // constant each, so no two positions share a value).
            let mut st: Vec<Tensor> = (0..k)
                .map(|i| match invariant[i] || variant.contains(&i) {
                    true => inits[i],
                    false => inits[i].zeros_like(),
                })
                .collect();
            for (slot, &i) in variant.iter().enumerate() {
                st[i] = row_of(bufs[slot], j);
            }
            st
        }
        None => recompute_state(cond_r, body_r, &inits, j, &loc),
    };
    let here = tape::current().map(|(_, r)| r).unwrap_or(0);
    let arg_ids: Vec<ValueId> = state_j
        .iter()
        .map(|&t| tape::value_here(t, "while_loop", &loc).unwrap_or(t.value))
        .collect();
    let handles: Vec<Tensor> = arg_ids.iter().map(|&v| tape::handle(trace, v)).collect();
    let known: Vec<(ValueId, Tensor)> = dots
        .iter()
        .enumerate()
        .map(|(slot, &d)| (d, row_of(bufs[variant.len() + slot], j)))
        .collect();
    let (outs_b, nodes_b, map_b) = inline_region_with(body_r, &handles, &known);
    let mut cts: Cotangents = HashMap::new();
    for (slot, &i) in ct_pos.iter().enumerate() {
        if !invariant[i] {
            super::backprop::accumulate(&mut cts, outs_b[i].value, carried[slot]);
        }
    }
    for i in (0..k).filter(|&i| read_only[i]) {
        if let Some(ct) = outs[i] {
            super::backprop::accumulate(&mut cts, outs_b[i].value, ct);
        }
    }
    let inputs: Vec<ValueId> = ct_pos.iter().map(|&i| arg_ids[i]).collect();
    let mut tp = Tape::new(trace, here, nodes_b);
    if !known.is_empty() {
        // The kept dots are read with this iteration's operands and saved
        // products.
        tp.subst = map_b;
    }
    let res = backprop(&tp, &inputs, cts);
    let mut next = vec![j - 1];
    // Loop-invariant positions with the same initial value (a tensor
    // carried twice, or carried and also captured) share one value in this
    // body, whose gradient is the sum over all of them: it goes to the
    // first, as the enclosing code adds up the positions' gradients.
    let mut taken = HashSet::new();
    let gs: Vec<Option<Tensor>> = ct_pos
        .iter()
        .map(|&i| match taken.insert(arg_ids[i]) {
            true => res.get(&arg_ids[i]).copied(),
            false => None,
        })
        .collect();
    // An invariant position whose gradient is one product per iteration
    // is summed by one product after the loop (`loop_products`).
    let mut hoisted: Vec<(usize, loop_products::Product)> = Vec::new();
    let mut stacked_next = Vec::new();
    if let Some(n) = saved {
        hoisted = ct_pos
            .iter()
            .enumerate()
            .filter(|&(_, &i)| invariant[i])
            .filter_map(|(slot, _)| Some((slot, loop_products::product_behind(trace, gs[slot]?)?)))
            .collect();
        if !loop_products::fit(hoisted.iter().map(|(_, p)| p), n) {
            hoisted.clear();
        }
        for (_, p) in &hoisted {
            let rows = p.stack(&mut bb, n, j);
            stacked_next.extend(rows.ok_or("internal: the backward loop is not open")?);
        }
    }
    for (slot, &i) in ct_pos.iter().enumerate() {
        let g = gs[slot].filter(|_| !hoisted.iter().any(|(h, _)| *h == slot));
        next.push(match (invariant[i], g) {
            (true, Some(g)) => add_cotangent(trace, carried[slot], g),
            (true, None) => carried[slot],
            (false, Some(g)) => g,
            (false, None) => zeros_of(carried[slot]),
        });
    }
    next.extend(stacked_next);
    let done = bb.finish(next);
    let mut sums: HashMap<usize, Tensor> = HashMap::new();
    for (h, (slot, p)) in hoisted.iter().enumerate() {
        let at = 1 + ct_pos.len() + 2 * h;
        sums.insert(*slot, p.total(done[at], done[at + 1]));
    }
    let mut grads = vec![None; k];
    for (slot, &i) in ct_pos.iter().enumerate() {
        let mut g = match sums.remove(&slot) {
            Some(sum) => done[1 + slot] + sum,
            None => done[1 + slot],
        };
        if invariant[i] {
            if let Some(o) = outs[i] {
                g = g + o;
            }
        }
        if want[i] {
            grads[i] = Some(g);
        }
    }
    // Every row of a stacked output's initial zeros is overwritten.
    for i in (0..k).filter(|&i| read_only[i] && want[i]) {
        grads[i] = Some(zeros_of(inits[i]));
    }
    Ok(grads)
}

/// `acc + g` for the cotangent a loop carries for a value it captures. A
/// `g` that is zeros with one window written — the gradient of the
/// `dynamic_slice` by which a body reads its row `j` of a captured tensor,
/// as `scan` reads its inputs — adds into that window only: a whole-tensor
/// add in every iteration made the gradient of a 512-step scan over
/// `[512, 8, 256]` inputs a pass over 4 MiB per step.
fn add_cotangent(trace: u32, acc: Tensor, g: Tensor) -> Tensor {
    let window = with_state(|s| {
        let Def::Result { node, .. } = s.graph.values.get(g.value)?.def else {
            return None;
        };
        let n = &s.graph.nodes[node];
        let base = s.graph.values.get(*n.operands.first()?)?;
        let Def::Result { node: z, .. } = base.def else {
            return None;
        };
        let zeros = matches!(&s.graph.nodes[z].op, Op::Constant { data } if *data == base.spec.dtype.encode_f64(0.0));
        (matches!(n.op, Op::DynamicUpdateSlice) && zeros).then(|| (n.operands[1], n.operands[2..].to_vec()))
    })
    .flatten();
    match window {
        Some((update, starts)) if g.trace == trace && acc.spec() == g.spec() => {
            let update = tape::handle(trace, update);
            let starts: Vec<Tensor> = starts.into_iter().map(|v| tape::handle(trace, v)).collect();
            let row = acc.dynamic_slice(&starts, &update.shape());
            acc.dynamic_update_slice(row + update, &starts)
        }
        _ => acc + g,
    }
}

/// Whether the loop body uses carried position `p` only to write into it
/// with `dynamic_update_slice` (as operand 0, at the body's top level) and
/// to carry the result on to the same position: then no gradient rule reads
/// its value, and the backward pass need not keep it per iteration. This is
/// what a `scan` does with its stacked outputs; keeping them would take
/// memory quadratic in the number of steps.
fn written_only(body: RegionId, p: usize) -> bool {
    with_state(|s| {
        let g = &s.graph;
        let r = &g.regions[body];
        let (Some(&arg), Some(&last)) = (r.args.get(p), r.results.get(p)) else {
            return false;
        };
        let mut cur = arg;
        loop {
            let mut users = g
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.operands.contains(&cur));
            let results = g
                .regions
                .iter()
                .flat_map(|reg| &reg.results)
                .filter(|&&v| v == cur)
                .count();
            let (first, second) = (users.next(), users.next());
            if cur == last {
                return first.is_none() && results == 1;
            }
            let (Some((id, n)), None, 0) = (first, second, results) else {
                return false;
            };
            let writes = matches!(n.op, Op::DynamicUpdateSlice)
                && n.operands.iter().filter(|&&v| v == cur).count() == 1
                && n.operands[0] == cur
                && r.nodes.contains(&id);
            if !writes {
                return false;
            }
            cur = n.results[0];
        }
    })
    .unwrap_or(false)
}

/// The loop state after `j` iterations, recomputed from the initial values.
fn recompute_state(
    cond_r: RegionId,
    body_r: RegionId,
    inits: &[Tensor],
    j: Tensor,
    loc: &crate::error::Location,
) -> Vec<Tensor> {
    let _ = cond_r;
    let mut init = vec![s32(0.0)];
    init.extend(inits);
    let Some((mut b, cargs)) = WhileBuilder::begin(init, loc.clone()) else {
        return inits.to_vec();
    };
    let bargs = b.cond_done(cargs[0].lt(j));
    let (stepped, _, _) = inline_region(body_r, &bargs[1..]);
    let mut next = vec![bargs[0] + 1];
    next.extend(stepped);
    b.finish(next)[1..].to_vec()
}
