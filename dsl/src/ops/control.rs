//! Traced control flow: `while_loop`, `fori_loop`, `cond`, and the
//! optimization barrier.
//!
//! Loop bodies may use any tensor of the enclosing code; such captured
//! tensors are threaded through the XLA `while` as extra carried values.

use crate::dtype::DType;
use crate::error::Location;
use crate::graph::{RegionId, RegionKind, ValueId};
use crate::ops::constant::full_at;
use crate::ops::elementwise::{binary_at, compare_at, Operand};
use crate::ops::{BinaryOp, Comparison, Op};
use crate::shape::TensorSpec;
use crate::tensor::Tensor;
use crate::trace::{build, with_state};

/// A value carried through a loop or returned by a branch: a [`Tensor`], or a
/// tuple, array or `Vec` of carries.
pub trait Carry: Sized {
    /// Appends the tensors, in order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// A value of the same structure as `self` made of the next tensors of `it`.
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self;
}

impl Carry for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(*self);
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        it.next().unwrap_or(Tensor::INERT)
    }
}

impl<T: Carry> Carry for Vec<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|c| c.flatten(out));
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.iter().map(|c| c.rebuild(it)).collect()
    }
}

impl<T: Carry, const N: usize> Carry for [T; N] {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|c| c.flatten(out));
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        std::array::from_fn(|i| self[i].rebuild(it))
    }
}

impl Carry for () {
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn rebuild(&self, _it: &mut dyn Iterator<Item = Tensor>) -> Self {}
}

macro_rules! carry_tuple {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Carry),+> Carry for ($($t,)+) {
            fn flatten(&self, out: &mut Vec<Tensor>) {
                $(self.$i.flatten(out);)+
            }
            fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
                ($(self.$i.rebuild(it),)+)
            }
        }
    };
}
carry_tuple!(A 0);
carry_tuple!(A 0, B 1);
carry_tuple!(A 0, B 1, C 2);
carry_tuple!(A 0, B 1, C 2, D 3);
carry_tuple!(A 0, B 1, C 2, D 3, E 4);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

fn flat<C: Carry>(c: &C) -> Vec<Tensor> {
    let mut v = Vec::new();
    c.flatten(&mut v);
    v
}

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

/// An XLA `while`: starting from `init`, runs `body` while `cond` (a scalar
/// `pred` tensor) holds, and returns the final carried value. The body must
/// return the same structure, shapes and dtypes it receives.
///
/// ```
/// use tessel_dsl::{trace, ops::while_loop, Tensor, TensorSpec, TraceOptions, F32, S32};
/// let g = trace("count", &[("x".into(), TensorSpec::new([3], F32))], TraceOptions::default(), |a| {
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
    let inits = flat(&init);
    let specs: Vec<TensorSpec> = inits.iter().map(|t| t.spec()).collect();
    let n = inits.len();
    let Some((cr, prev, cargs)) = enter(RegionKind::Explicit, &specs) else {
        crate::trace::orphan("while_loop", &loc);
        return init;
    };
    let p = cond(init.rebuild(&mut cargs.into_iter()));
    let mut ok = leave(
        "while_loop",
        cr,
        prev,
        &[p],
        &[TensorSpec::scalar(DType::Pred)],
        "loop condition",
        &loc,
    );
    let Some((br, _, bargs)) = enter(RegionKind::Explicit, &specs) else {
        return init;
    };
    let out = flat(&body(init.rebuild(&mut bargs.into_iter())));
    ok &= leave("while_loop", br, prev, &out, &specs, "carried value", &loc);
    let mut captured: Vec<ValueId> = Vec::new();
    with_state(|s| {
        for r in [cr, br] {
            for &(o, _) in &s.graph.regions[r].captures {
                if !captured.contains(&o) {
                    captured.push(o);
                }
            }
        }
    });
    align_captures(cr, n, &captured);
    let passthrough = align_captures(br, n, &captured);
    with_state(|s| s.graph.regions[br].results.extend(passthrough));
    if !ok {
        return init
            .rebuild(&mut build("while_loop", &inits, loc, n, |_| Err(String::new())).into_iter());
    }
    let results = with_state(|s| {
        let mut operands = Vec::new();
        for &t in &inits {
            match s.operand(t) {
                Ok(Some(v)) => operands.push(v),
                _ => return None,
            }
        }
        operands.extend(&captured);
        let mut rs = specs.clone();
        rs.extend(captured.iter().map(|&c| s.graph.values[c].spec.clone()));
        let ids = s
            .graph
            .add_node(prev, Op::While, operands, rs, vec![cr, br], loc.clone());
        Some(
            ids[..n]
                .iter()
                .map(|&value| Tensor { trace: s.id, value })
                .collect::<Vec<_>>(),
        )
    })
    .flatten();
    match results {
        Some(r) => init.rebuild(&mut r.into_iter()),
        None => init
            .rebuild(&mut build("while_loop", &inits, loc, n, |_| Err(String::new())).into_iter()),
    }
}

/// A counted loop: `body(i, carry)` for `i` in `lo..hi` (s32 scalars; either
/// bound may be a traced tensor), as one XLA `while`.
///
/// ```
/// use tessel_dsl::{trace, ops::fori_loop, TensorSpec, TraceOptions, F32};
/// let g = trace("sum", &[("x".into(), TensorSpec::new([3], F32))], TraceOptions::default(), |a| {
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
    let like = full_at(Vec::new(), 0.0, DType::S32, loc.clone());
    let lo = lo.to_tensor(like, &loc);
    let hi = hi.to_tensor(like, &loc);
    let (_, out) = while_loop(
        (lo, init),
        |(i, _)| compare_at(i, hi, Comparison::Lt, loc.clone()),
        |(i, c)| {
            let next = body(i, c);
            let one = full_at(Vec::new(), 1.0, i.dtype(), loc.clone());
            (binary_at(i, one, BinaryOp::Add, loc.clone()), next)
        },
    );
    out
}

/// An XLA conditional on a scalar `pred` tensor: the value of `then` or of
/// `otherwise`, which must agree in structure, shapes and dtypes. Both
/// branches are traced; only one runs.
#[track_caller]
pub fn cond<C: Carry>(pred: Tensor, then: impl FnOnce() -> C, otherwise: impl FnOnce() -> C) -> C {
    let loc = Location::caller();
    let Some((tr, prev, _)) = enter(RegionKind::Implicit, &[]) else {
        crate::trace::orphan("cond", &loc);
        return then();
    };
    let t = then();
    let touts = flat(&t);
    let specs: Vec<TensorSpec> = touts.iter().map(|x| x.spec()).collect();
    let mut ok = leave("cond", tr, prev, &touts, &specs, "branch result", &loc);
    let Some((er, _, _)) = enter(RegionKind::Implicit, &[]) else {
        return t;
    };
    let eouts = flat(&otherwise());
    ok &= leave("cond", er, prev, &eouts, &specs, "else-branch result", &loc);
    let n = touts.len().max(1);
    let r = build("cond", &[pred], loc, n, move |s| {
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
            if let crate::graph::Def::Result { node, .. } = s.graph.values[v.value].def {
                s.graph.nodes[node].regions = vec![tr, er];
            }
        }
    });
    t.rebuild(&mut r.into_iter())
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
