//! The batching rules of loops and conditionals, with JAX's semantics: a
//! carried value is batched when its initial value, a value the loop reads
//! or its next value is (found by iterating to a fixed point); a loop whose
//! condition differs between examples runs until every example is done,
//! each keeping its values once its own condition fails; a conditional on
//! a predicate that differs between examples computes both branches and
//! selects.

use std::collections::HashMap;

use crate::error::Location;
use crate::ir::{Node, Op, Region, RegionId, ValueId};
use crate::ops::control::{CondBuilder, WhileBuilder};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::batcher::{inputs, node, spec, BVal, Batcher};
use super::emit;

fn region(r: RegionId) -> Option<Region> {
    with_state(|s| s.graph.regions[r].clone())
}

/// Which values of a region are batched, without emitting anything.
struct Analysis<'a> {
    b: &'a Batcher,
    local: HashMap<ValueId, bool>,
}

impl Analysis<'_> {
    fn is_batched(&self, v: ValueId) -> bool {
        match self.local.get(&v) {
            Some(&x) => x,
            None => self.b.get(v).batched,
        }
    }

    /// The batchedness of `r`'s results given its arguments' (captured
    /// arguments follow from their outer values).
    fn region(&mut self, r: &Region, args: &[bool]) -> Vec<bool> {
        let own = r.args.len() - r.captures.len();
        for (i, &a) in r.args.iter().enumerate().take(own) {
            self.local.insert(a, args.get(i).copied().unwrap_or(false));
        }
        for &(outer, inner) in &r.captures {
            let x = self.is_batched(outer);
            self.local.insert(inner, x);
        }
        for &n in &r.nodes {
            if let Some(node) = node(n) {
                let outs = self.node(&node);
                for (&v, x) in node.results.iter().zip(outs) {
                    self.local.insert(v, x);
                }
            }
        }
        r.results.iter().map(|&v| self.is_batched(v)).collect()
    }

    fn node(&mut self, node: &Node) -> Vec<bool> {
        match node.op {
            Op::While { .. } => {
                let (carried, _) = self.loop_batching(node);
                let mut out = carried;
                out.resize(node.results.len(), false);
                out
            }
            Op::If => {
                let pred = self.is_batched(node.operands[0]);
                let (Some(t), Some(e)) = (region(node.regions[0]), region(node.regions[1])) else {
                    return vec![pred; node.results.len()];
                };
                let (tb, eb) = (self.region(&t, &[]), self.region(&e, &[]));
                tb.iter().zip(&eb).map(|(a, b)| pred || *a || *b).collect()
            }
            _ => {
                let any = inputs(node).iter().any(|&v| self.is_batched(v));
                vec![any; node.results.len()]
            }
        }
    }

    /// A loop's carried values that are batched, and whether its condition is.
    fn loop_batching(&mut self, node: &Node) -> (Vec<bool>, bool) {
        let (Some(c), Some(body)) = (region(node.regions[0]), region(node.regions[1])) else {
            return (Vec::new(), false);
        };
        let n = c.args.len() - c.captures.len();
        let mut carried: Vec<bool> = node.operands[..n]
            .iter()
            .map(|&v| self.is_batched(v))
            .collect();
        loop {
            let pred = self.region(&c, &carried)[0];
            let next = self.region(&body, &carried);
            let grown: Vec<bool> = (0..n).map(|i| pred || carried[i] || next[i]).collect();
            if grown == carried {
                return (carried, pred);
            }
            carried = grown;
        }
    }
}

/// Binds a recorded region's arguments: its own to `args`, its captured
/// ones to what their outer values became.
fn bind_args(b: &mut Batcher, r: &Region, args: &[BVal]) {
    let own = r.args.len() - r.captures.len();
    for (&a, &v) in r.args.iter().take(own).zip(args) {
        b.bind(a, v);
    }
    for &(outer, inner) in &r.captures {
        let v = b.get(outer);
        b.bind(inner, v);
    }
}

/// `v` with a batch axis if `batched` says it needs one.
fn shaped(b: &Batcher, v: BVal, batched: bool, example: &TensorSpec, loc: &Location) -> BVal {
    match batched && !v.batched {
        true => BVal::batched(b.full(v, example, loc)),
        false => v,
    }
}

/// `select(live, new, old)` with `live` (`pred [B]`) broadcast to the value.
fn keep_finished(live: Tensor, new: Tensor, old: Tensor, loc: &Location) -> Tensor {
    let mask = emit::broadcast(live, new.shape(), vec![0], loc);
    emit::select(mask, new, old, loc)
}

/// A `while` over the batch.
pub(super) fn while_loop(b: &mut Batcher, node: &Node) -> Vec<BVal> {
    let loc = &node.location;
    let (Some(c), Some(body)) = (region(node.regions[0]), region(node.regions[1])) else {
        return Vec::new();
    };
    let n = c.args.len() - c.captures.len();
    let (carried, pred_batched) = Analysis {
        b,
        local: HashMap::new(),
    }
    .loop_batching(node);
    let examples: Vec<TensorSpec> = node.results[..n].iter().map(|&v| spec(v)).collect();
    let inits: Vec<Tensor> = (0..n)
        .map(|i| shaped(b, b.get(node.operands[i]), carried[i], &examples[i], loc).t)
        .collect();
    let view = |ts: Vec<Tensor>| -> Vec<BVal> {
        ts.into_iter()
            .zip(&carried)
            .map(|(t, &batched)| BVal { t, batched })
            .collect()
    };
    let Some((mut wb, cargs)) = WhileBuilder::begin(inits.clone(), loc.clone()) else {
        return view(inits);
    };
    bind_args(b, &c, &view(cargs));
    b.run(&c.nodes);
    let p = b.get(c.results[0]);
    let pred = match p.batched {
        true => emit::any_over_batch(p.t, loc),
        false => p.t,
    };
    let bargs = view(wb.cond_done(pred));
    bind_args(b, &body, &bargs);
    b.run(&body.nodes);
    let mut outs: Vec<Tensor> = (0..n)
        .map(|i| shaped(b, b.get(body.results[i]), carried[i], &examples[i], loc).t)
        .collect();
    if pred_batched {
        // Each example keeps its values once its own condition fails.
        bind_args(b, &c, &bargs);
        b.run(&c.nodes);
        let live = b.get(c.results[0]).t;
        for (o, old) in outs.iter_mut().zip(&bargs) {
            *o = keep_finished(live, *o, old.t, loc);
        }
    } else if let Op::While {
        trip_count,
        stacked,
    } = &node.op
    {
        if let Some(trips) = trip_count {
            wb.set_trip_count(*trips);
        }
        // Stacked outputs stay stacked when the batch does not touch them.
        if !stacked.is_empty() && stacked.end == n && !carried[stacked.clone()].iter().any(|&x| x) {
            wb.set_stacked_from(stacked.start);
        }
    }
    view(wb.finish(outs))
}

/// A conditional over the batch.
pub(super) fn cond(b: &mut Batcher, node: &Node) -> Vec<BVal> {
    let loc = &node.location;
    let (Some(t), Some(e)) = (region(node.regions[0]), region(node.regions[1])) else {
        return Vec::new();
    };
    let examples: Vec<TensorSpec> = node.results.iter().map(|&v| spec(v)).collect();
    let batched = Analysis {
        b,
        local: HashMap::new(),
    }
    .node(node);
    let pred = b.get(node.operands[0]);
    let results = |b: &Batcher, r: &Region| -> Vec<Tensor> {
        r.results
            .iter()
            .zip(&batched)
            .zip(&examples)
            .map(|((&v, &x), ex)| shaped(b, b.get(v), x, ex, loc).t)
            .collect()
    };
    let builder = match pred.batched {
        false => CondBuilder::begin(pred.t, loc.clone()),
        true => None,
    };
    let outs = match builder {
        Some(mut cb) => {
            b.run(&t.nodes);
            let then = results(b, &t);
            cb.then_done(&then);
            b.run(&e.nodes);
            let other = results(b, &e);
            cb.finish(&other)
        }
        // Both branches, then the example's own.
        None => {
            b.run(&t.nodes);
            let then = results(b, &t);
            b.run(&e.nodes);
            let other = results(b, &e);
            then.iter()
                .zip(&other)
                .map(|(&x, &y)| match pred.batched {
                    true => keep_finished(pred.t, x, y, loc),
                    false => x,
                })
                .collect()
        }
    };
    outs.into_iter()
        .zip(&batched)
        .map(|(t, &batched)| BVal { t, batched })
        .collect()
}
