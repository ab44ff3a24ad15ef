//! Traced control flow: `while_loop`, `fori_loop`, `cond`, and the
//! optimization barrier.
//!
//! Loop bodies may use any tensor of the enclosing code; such captured
//! tensors are threaded through the XLA `while` as extra carried values.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{RegionId, RegionKind, ValueId};
use crate::ops::check;
use crate::ops::constant::full_at;
use crate::ops::elementwise::{binary_at, compare_at, Operand};
use crate::ops::{BinaryOp, Comparison, Op};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::{build, with_state};

pub use super::carry::{flat, Carry};

mod checks;

/// Opens a region under the current one with arguments of `specs`; returns
/// (region, previous region, argument handles).
fn enter(kind: RegionKind, specs: &[TensorSpec]) -> Option<(RegionId, RegionId, Vec<Tensor>)> {
    with_state(|s| {
        let prev = s.region;
        let r = s.graph.add_region(prev, kind);
        let args = specs
            .iter()
            .map(|sp| Tensor {
                trace: s.id,
                value: s.graph.add_arg(r, sp.clone()),
            })
            .collect();
        s.region = r;
        (r, prev, args)
    })
}

/// Resolves `outs` inside the current region as its results, checks them
/// against `expect`, and returns to `prev`. Returns false on error.
fn leave(
    op: &str,
    region: RegionId,
    prev: RegionId,
    outs: &[Tensor],
    expect: &[TensorSpec],
    what: &str,
    loc: &Location,
) -> bool {
    with_state(|s| {
        let mut results = Vec::new();
        let mut ok = true;
        for (i, &t) in outs.iter().enumerate() {
            match s.operand(t) {
                Ok(Some(v)) => {
                    let got = &s.graph.values[v].spec;
                    if let Some(want) = expect.get(i) {
                        if got != want {
                            let m = format!("{what} {i} is {got} but must be {want}");
                            s.fail(op, outs, m, loc);
                            ok = false;
                        }
                    }
                    results.push(v);
                }
                Ok(None) => ok = false,
                Err(m) => {
                    s.fail(op, outs, m, loc);
                    ok = false;
                }
            }
        }
        if outs.len() != expect.len() {
            let m = format!("{} {what}s returned, {} expected", outs.len(), expect.len());
            s.fail(op, outs, m, loc);
            ok = false;
        }
        s.graph.regions[region].results = results;
        s.region = prev;
        ok
    })
    .unwrap_or(false)
}

/// Orders an explicit region's arguments as `n` own arguments then one per
/// outer value in `captured` (adding unused arguments for values it did not use).
fn align_captures(region: RegionId, n: usize, captured: &[ValueId]) -> Vec<ValueId> {
    with_state(|s| {
        let own: Vec<ValueId> = s.graph.regions[region].args[..n].to_vec();
        let mut args = own;
        let mut inners = Vec::new();
        for &outer in captured {
            let found = s.graph.regions[region]
                .captures
                .iter()
                .find(|(o, _)| *o == outer)
                .map(|&(_, i)| i);
            let inner = match found {
                Some(i) => i,
                None => {
                    let spec = s.graph.values[outer].spec.clone();
                    s.graph.add_arg(region, spec)
                }
            };
            args.push(inner);
            inners.push(inner);
        }
        s.graph.regions[region].args = args;
        inners
    })
    .unwrap_or_default()
}

/// Builds one XLA `while` step by step, for code that cannot be written as
/// closures (the kernel macros' inline loops): [`WhileBuilder::begin`] opens
/// the condition region, [`WhileBuilder::cond_done`] closes it and opens the
/// body, [`WhileBuilder::finish`] closes the body and appends the loop.
pub struct WhileBuilder {
    inits: Vec<Tensor>,
    specs: Vec<TensorSpec>,
    prev: RegionId,
    cond_region: RegionId,
    body_region: Option<RegionId>,
    ok: bool,
    loc: Location,
    trip_count: Option<usize>,
    stacked: std::ops::Range<usize>,
}

impl WhileBuilder {
    /// Declares how many times the loop runs, when that is known while
    /// tracing (it must be exact: reverse-mode autodiff sizes its saved
    /// residuals by it).
    pub fn set_trip_count(&mut self, n: usize) {
        self.trip_count = Some(n);
    }

    /// Opens the condition region; returns the builder and the condition's
    /// view of the carried values (`None` outside a trace).
    pub fn begin(inits: Vec<Tensor>, loc: Location) -> Option<(WhileBuilder, Vec<Tensor>)> {
        let specs: Vec<TensorSpec> = inits.iter().map(|t| t.spec()).collect();
        let Some((cr, prev, args)) = enter(RegionKind::Explicit, &specs) else {
            crate::trace::orphan("while_loop", &loc);
            return None;
        };
        let b = WhileBuilder {
            inits,
            specs,
            prev,
            cond_region: cr,
            body_region: None,
            ok: true,
            loc,
            trip_count: None,
            stacked: 0..0,
        };
        Some((b, args))
    }

    /// Closes the condition region with `pred` (a scalar `pred` tensor) and
    /// opens the body; returns the body's view of the carried values.
    pub fn cond_done(&mut self, pred: Tensor) -> Vec<Tensor> {
        let want = [TensorSpec::scalar(DType::Pred)];
        self.ok &= leave(
            "while_loop",
            self.cond_region,
            self.prev,
            &[pred],
            &want,
            "loop condition",
            &self.loc,
        );
        match enter(RegionKind::Explicit, &self.specs) {
            Some((br, _, args)) => {
                self.body_region = Some(br);
                args
            }
            None => self.inits.clone(),
        }
    }

    /// Adds a carried value while the body is open (after
    /// [`WhileBuilder::cond_done`]), for a value whose type is known only
    /// once the body has run (the stacked outputs of
    /// [`scan`](crate::ops::scan::scan)). `make` builds its initial value in
    /// the region that encloses the loop; the body's view of it is returned
    /// (`None` if the body is not open), and its next value goes last in the
    /// list given to [`WhileBuilder::finish`].
    pub fn add_carry(&mut self, make: impl FnOnce() -> Tensor) -> Option<Tensor> {
        let br = self.body_region?;
        let body_at = with_state(|s| std::mem::replace(&mut s.region, self.prev))?;
        let init = make();
        with_state(|s| s.region = body_at);
        let spec = init.spec();
        let n = self.inits.len();
        let inner = with_state(|s| {
            // Own arguments come first, captured values after them.
            let mut inner = None;
            for r in [self.cond_region, br] {
                let v = s.graph.add_arg(r, spec.clone());
                let args = &mut s.graph.regions[r].args;
                args.pop();
                args.insert(n, v);
                inner = Some(Tensor {
                    trace: s.id,
                    value: v,
                });
            }
            inner
        })??;
        self.inits.push(init);
        self.specs.push(spec);
        Some(inner)
    }

    /// Declares the carried values added last with
    /// [`WhileBuilder::add_carry`], from position `first` on, stacked
    /// outputs (see [`Op::While`]). The caller guarantees what that asks:
    /// a trip count equal to their first extent, and each iteration's
    /// body writing a row of each that no other iteration writes, into
    /// zeros, and reading nothing of them.
    pub(crate) fn set_stacked_from(&mut self, first: usize) {
        self.stacked = first..self.inits.len();
    }

    /// Closes the body with the next carried values and appends the loop;
    /// returns its results (poisoned handles after an error).
    ///
    /// Checks recorded in the body leave the loop as extra carried values
    /// (the code of the first failing iteration and its values) and are
    /// merged into the enclosing region's; a check in the condition is a
    /// kernel error.
    pub fn finish(mut self, mut outs: Vec<Tensor>) -> Vec<Tensor> {
        let user = self.inits.len();
        if let Some(cr) = check::take(self.cond_region) {
            let at = cr.values.first().map(|&(k, _)| k);
            let loc = at
                .and_then(|k| with_state(|s| s.checks.sites[k].location.clone()))
                .unwrap_or_else(|| self.loc.clone());
            let m = "a check in a loop condition cannot report its failure; check the values \
                     in the loop body or before the loop"
                .to_string();
            crate::trace::tensor::fail("check", &[], m, &loc);
        }
        let layout = match self.body_region.and_then(check::take) {
            Some(rc) => self.carry_checks(&rc, &mut outs),
            None => None,
        };
        let results = self.finish_loop(outs);
        let Some(layout) = layout else {
            return results;
        };
        check::merge(&results[user..], &layout);
        results[..user].to_vec()
    }

    /// [`finish`](Self::finish) once the checks are carried.
    fn finish_loop(self, outs: Vec<Tensor>) -> Vec<Tensor> {
        let (n, loc) = (self.inits.len(), self.loc.clone());
        let Some(br) = self.body_region else {
            return self.inits;
        };
        let mut ok = self.ok;
        ok &= leave(
            "while_loop",
            br,
            self.prev,
            &outs,
            &self.specs,
            "carried value",
            &loc,
        );
        let mut captured: Vec<ValueId> = Vec::new();
        with_state(|s| {
            for r in [self.cond_region, br] {
                for &(o, _) in &s.graph.regions[r].captures {
                    if !captured.contains(&o) {
                        captured.push(o);
                    }
                }
            }
        });
        align_captures(self.cond_region, n, &captured);
        let passthrough = align_captures(br, n, &captured);
        with_state(|s| s.graph.regions[br].results.extend(passthrough));
        let poisoned =
            |inits: &[Tensor]| build("while_loop", inits, loc.clone(), n, |_| Err(String::new()));
        if !ok {
            return poisoned(&self.inits);
        }
        let (prev, cr, specs) = (self.prev, self.cond_region, self.specs.clone());
        let (trip_count, stacked) = (self.trip_count, self.stacked.clone());
        let results = with_state(|s| {
            let mut operands = Vec::new();
            for &t in &self.inits {
                match s.operand(t) {
                    Ok(Some(v)) => operands.push(v),
                    _ => return None,
                }
            }
            operands.extend(&captured);
            let mut rs = specs;
            rs.extend(captured.iter().map(|&c| s.graph.values[c].spec.clone()));
            let ids = s.graph.add_node(
                prev,
                Op::While {
                    trip_count,
                    stacked,
                },
                operands,
                rs,
                vec![cr, br],
                loc.clone(),
            );
            Some(
                ids[..n]
                    .iter()
                    .map(|&value| Tensor { trace: s.id, value })
                    .collect::<Vec<_>>(),
            )
        })
        .flatten();
        results.unwrap_or_else(|| poisoned(&self.inits))
    }
}

/// An XLA `while`: starting from `init`, runs `body` while `cond` (a scalar
/// `pred` tensor) holds, and returns the final carried value. The body must
/// return the same structure, shapes and dtypes it receives.
///
/// ```
/// use tessel_dsl::{trace, kernel::KernelConfig, ops::while_loop, Tensor, TensorSpec, F32, S32};
/// let g = trace("count", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| {
///     let (_, y) = while_loop(
///         (Tensor::scalar(0.0, S32), a[0]),
///         |(i, _)| i.lt(10),
///         |(i, y)| (i + 1, y * 2.0),
///     );
///     y
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn while_loop<C: Carry>(
    init: C,
    cond: impl FnOnce(C) -> Tensor,
    body: impl FnOnce(C) -> C,
) -> C {
    let loc = Location::caller();
    let Some((mut b, cargs)) = WhileBuilder::begin(flat(&init), loc) else {
        return init;
    };
    let p = cond(init.rebuild(&mut cargs.into_iter()));
    let bargs = b.cond_done(p);
    let out = flat(&body(init.rebuild(&mut bargs.into_iter())));
    init.rebuild(&mut b.finish(out).into_iter())
}

/// A counted loop: `body(i, carry)` for `i` in `lo..hi` (s32 scalars; either
/// bound may be a traced tensor), as one XLA `while`.
///
/// ```
/// use tessel_dsl::{trace, kernel::KernelConfig, ops::fori_loop, TensorSpec, F32};
/// let g = trace("sum", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| {
///     fori_loop(0, 4, a[0], |_i, acc| acc + 1.0)
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn fori_loop<C: Carry>(
    lo: impl Operand,
    hi: impl Operand,
    init: C,
    body: impl FnOnce(Tensor, C) -> C,
) -> C {
    let loc = Location::caller();
    let trips = match (lo.static_value(), hi.static_value()) {
        (Some(a), Some(b)) => Some((b as i64).saturating_sub(a as i64).max(0) as usize),
        _ => None,
    };
    let like = full_at(Vec::new(), 0.0, DType::S32, loc.clone());
    let lo = lo.to_tensor(like, &loc);
    let hi = hi.to_tensor(like, &loc);
    let init = (lo, init);
    let Some((mut b, cargs)) = WhileBuilder::begin(flat(&init), loc.clone()) else {
        return init.1;
    };
    if let Some(n) = trips {
        b.set_trip_count(n);
    }
    let (i, _) = init.rebuild(&mut cargs.into_iter());
    let bargs = b.cond_done(compare_at(i, hi, Comparison::Lt, loc.clone()));
    let (i, c) = init.rebuild(&mut bargs.into_iter());
    let next = body(i, c);
    let one = full_at(Vec::new(), 1.0, i.dtype(), loc.clone());
    let out = flat(&(binary_at(i, one, BinaryOp::Add, loc.clone()), next));
    init.rebuild(&mut b.finish(out).into_iter()).1
}

/// The deepest nest of conditionals a trace may build: 128. XLA's CPU
/// compiler takes time growing faster than the square of the depth (80
/// nested conditionals compiled in about 1 s, 160 in 8 s, 320 in 80 s, and
/// 1,000 did not finish), so a deeper nest is a kernel error at the `if`
/// that would pass the limit. Loops are not limited (1,000 nested loops
/// compile in under a minute).
pub const MAX_COND_DEPTH: usize = 128;

/// How many conditionals enclose the current region (`None` outside a trace).
fn cond_depth() -> Option<usize> {
    with_state(|s| {
        let mut depth = 0;
        let mut at = Some(s.region);
        while let Some(r) = at.and_then(|r| s.graph.regions.get(r)) {
            depth += usize::from(r.kind == RegionKind::Implicit);
            at = r.parent;
        }
        depth
    })
}

/// Builds one XLA conditional step by step (the kernel macros' inline
/// `if`): [`CondBuilder::begin`] opens the then-region,
/// [`CondBuilder::then_done`] closes it and opens the else-region,
/// [`CondBuilder::finish`] closes that and appends the conditional.
pub struct CondBuilder {
    pred: Tensor,
    prev: RegionId,
    then_region: RegionId,
    else_region: Option<RegionId>,
    specs: Vec<TensorSpec>,
    ok: bool,
    loc: Location,
}

impl CondBuilder {
    /// Opens the then-region of a conditional on `pred` (`None` outside a
    /// trace, or after recording a kernel error when it would nest more
    /// than [`MAX_COND_DEPTH`] conditionals).
    pub fn begin(pred: Tensor, loc: Location) -> Option<CondBuilder> {
        if cond_depth().is_some_and(|d| d >= MAX_COND_DEPTH) {
            let m = format!(
                "conditionals nested more than {MAX_COND_DEPTH} deep: XLA's compile time grows \
                 faster than the square of the depth; compute the branches and select, or use a loop"
            );
            crate::trace::tensor::fail("cond", &[pred], m, &loc);
            return None;
        }
        let Some((tr, prev, _)) = enter(RegionKind::Implicit, &[]) else {
            crate::trace::orphan("cond", &loc);
            return None;
        };
        Some(CondBuilder {
            pred,
            prev,
            then_region: tr,
            else_region: None,
            specs: Vec::new(),
            ok: true,
            loc,
        })
    }

    /// Closes the then-region with its results and opens the else-region.
    pub fn then_done(&mut self, outs: &[Tensor]) {
        self.specs = outs.iter().map(|x| x.spec()).collect();
        self.ok &= leave(
            "cond",
            self.then_region,
            self.prev,
            outs,
            &self.specs,
            "branch result",
            &self.loc,
        );
        self.else_region = enter(RegionKind::Implicit, &[]).map(|(er, _, _)| er);
    }

    /// Closes the else-region without appending a conditional, for branches
    /// that give no result: they have no effect (the `if` of a kernel body
    /// that assigns nothing outside it). The condition is still checked,
    /// and errors inside the branches are still reported.
    pub fn discard(self) {
        let Some(er) = self.else_region else {
            return;
        };
        if self.has_checks(er) {
            // The branches' checks are their results.
            self.finish_checked(&[], true);
            return;
        }
        leave(
            "cond",
            er,
            self.prev,
            &[],
            &self.specs,
            "else-branch result",
            &self.loc,
        );
        let (pred, loc) = (self.pred, self.loc);
        with_state(|s| {
            let Ok(Some(v)) = s.operand(pred) else {
                return;
            };
            let spec = &s.graph.values[v].spec;
            if spec.dtype != DType::Pred || spec.rank() != 0 {
                let m = format!("the condition must be a scalar pred tensor, got {spec}");
                s.fail("cond", &[pred], m, &loc);
            }
        });
    }

    /// Closes the else-region with its results (same types as the then-region's)
    /// and appends the conditional; returns its results.
    ///
    /// Checks recorded in either branch leave the conditional as extra
    /// results (zeros from the branch that lacks them) and are merged into
    /// the enclosing region's.
    pub fn finish(self, outs: &[Tensor]) -> Vec<Tensor> {
        self.finish_checked(outs, false)
    }

    /// Closes the else-region `er` with `outs` and appends the conditional.
    fn finish_cond(self, outs: &[Tensor], er: RegionId) -> Vec<Tensor> {
        let mut ok = self.ok;
        ok &= leave(
            "cond",
            er,
            self.prev,
            outs,
            &self.specs,
            "else-branch result",
            &self.loc,
        );
        let n = self.specs.len().max(1);
        let (specs, regions) = (self.specs, vec![self.then_region, er]);
        let r = build("cond", &[self.pred], self.loc, n, move |s| {
            if s[0].dtype != DType::Pred || s[0].rank() != 0 {
                return Err(format!(
                    "the condition must be a scalar pred tensor, got {}",
                    s[0]
                ));
            }
            if specs.is_empty() {
                return Err("both branches must return at least one tensor".into());
            }
            if !ok {
                return Err(String::new());
            }
            Ok((Op::If, specs))
        });
        with_state(|s| {
            if let Some(&v) = r.first() {
                if let crate::ir::Def::Result { node, .. } = s.graph.values[v.value].def {
                    s.graph.nodes[node].regions = regions;
                }
            }
        });
        r
    }
}

/// An XLA conditional on a scalar `pred` tensor: the value of `then` or of
/// `otherwise`, which must agree in structure, shapes and dtypes. Both
/// branches are traced; only one runs.
#[track_caller]
pub fn cond<C: Carry>(pred: Tensor, then: impl FnOnce() -> C, otherwise: impl FnOnce() -> C) -> C {
    let Some(mut b) = CondBuilder::begin(pred, Location::caller()) else {
        return then();
    };
    let t = then();
    b.then_done(&flat(&t));
    let e = flat(&otherwise());
    t.rebuild(&mut b.finish(&e).into_iter())
}

/// Returns `values` unchanged, but XLA may not move computation across this point.
#[track_caller]
pub fn optimization_barrier<C: Carry>(values: C) -> C {
    let ts = flat(&values);
    let n = ts.len();
    let r = build("optimization_barrier", &ts, Location::caller(), n, |s| {
        Ok((Op::OptimizationBarrier, s.to_vec()))
    });
    values.rebuild(&mut r.into_iter())
}
