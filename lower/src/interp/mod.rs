//! A pure-Rust interpreter of traced graphs: runs a [`Graph`] on host
//! tensors with XLA's semantics (those of the XLA CPU plugin), op by op,
//! and watches for NaNs and clamped indices on the way ([`Checks`]).
//!
//! ```
//! use tessel_dsl::interp::{evaluate, Checks};
//! use tessel_dsl::{kernel::KernelConfig, trace, HostTensor, TensorSpec, F32};
//! let g = trace("double", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| a[0] * 2.0)?;
//! let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
//! let e = evaluate(&g, &[x], Checks::default())?;
//! assert_eq!(e.outputs[0].to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
//! assert!(e.findings.is_empty());
//! # Ok::<(), tessel_dsl::Error>(())
//! ```
//!
//! # Semantics
//!
//! Every op of [`Op`] and every [`DType`](crate::dtype::DType) is
//! evaluated. Where XLA leaves the result open or the interpreter had to
//! choose, this is what it does:
//!
//! * **Floats** are held as `f64` and each op's result is rounded to its
//!   dtype (round to nearest, ties to even). f16 and bf16 round through
//!   f32, as XLA computes them in f32; an f64 result converted to bf16 or
//!   f16 is thus rounded twice. f8e4m3fn overflows to NaN (it has no
//!   infinity) and f8e5m2 to infinity. XLA, which allows excess precision
//!   by default, may skip the rounding of a narrow intermediate that feeds
//!   a conversion to a wider float (`(a * b).cast(F32)` on bf16 operands
//!   can keep the f32 product); the interpreter always rounds, as the
//!   program says, so such results may differ by one ulp of the narrow
//!   type. XLA also divides by a constant (or by a value it proves
//!   constant, such as a select on `i < i`) as a product with the
//!   constant's reciprocal, which may be one ulp from the quotient the
//!   interpreter computes.
//! * **Transcendental functions** (`exp`, `log`, `tanh`, `erf`, `pow`, ...)
//!   are Rust's `f64` functions (and a series/continued-fraction `erf`)
//!   rounded to the dtype; XLA uses its own approximations, so f32 results
//!   may differ from the plugin's by a few ulps (its f32 `cbrt`, by
//!   several at large magnitudes). `logistic` is computed as XLA expands
//!   it, `1 / (1 + exp(-x))` with each op rounded to the dtype (to f32 for
//!   bf16 and fp8, rounded to the dtype once at the end), so an f16
//!   logistic is 0 from about -11.1 down (`exp(-x)` overflows f16).
//! * **Subnormals**: the XLA CPU runtime computes with flush-to-zero and
//!   denormals-are-zero, so arithmetic (unary math, binary ops,
//!   comparisons, reductions, dots, scatter combiners, and conversions
//!   between f64 and f32 or bf16) reads a subnormal f32, bf16 or f64
//!   operand as a zero of its sign and flushes a subnormal result to zero.
//!   f16 and fp8 keep their subnormals (they are normal numbers in the f32
//!   the CPU computes them in), and so do ops that only move bits
//!   (negation, `abs`, selects, slices, gathers, bf16 to f32). XLA's
//!   simplifier removes some arithmetic outright (`x * 1`, a conversion
//!   to f64 and back), which then keeps a subnormal the interpreter
//!   flushes; and bf16 `maximum` of subnormals may give zero there, where
//!   the interpreter returns the winner's bits.
//! * **NaN and infinity through a mask**: XLA's simplifier turns a product
//!   with a `pred` converted to f32 or f64 (`p.cast(F32) * y`, also
//!   broadcast, and after removing `+ 0.0`) into a select, so where `p` is
//!   false the product is 0 even when `y` is NaN or infinite; the
//!   interpreter multiplies, giving NaN. The rewrite depends on what XLA
//!   sees (not across a branch's boundary, not for bf16), so the
//!   interpreter does not imitate it: write `p.select(y, 0.0)` for a mask
//!   that must stop NaNs on every backend.
//! * **`maximum`/`minimum`** propagate NaN and order `-0` below `+0`
//!   (IEEE 754-2019 `maximum`/`minimum`); operands compare as read above,
//!   the winner keeps its bits. `clamp(lo, x, hi)` is `min(max(x, lo), hi)`.
//! * **Integers** wrap at their width. `x / 0` is -1 for signed types and
//!   all ones for unsigned; `x % 0` is `x`; `MIN / -1` is `MIN` and
//!   `MIN % -1` is 0. A shift by the bit width or more gives 0 (left,
//!   logical right) or the sign fill (arithmetic right); the shift amount
//!   is read as unsigned. Integer `power` squares and wraps; a negative
//!   exponent gives 1 for base 1 and 0 otherwise (the tracer only makes
//!   float `power`). Unsigned types stay unsigned throughout: a u64 from
//!   2^63 up compares, sorts, divides and converts as the large number it
//!   is, and its exponent is never negative.
//! * **`convert`** float to integer truncates toward zero and saturates at
//!   the target's range, NaN giving 0 (XLA's CPU behaviour); integer to
//!   integer wraps; to `pred` is `!= 0`; integer to a narrow float rounds
//!   through f32.
//! * **`reduce`** combines in row-major order from the init value. Float
//!   sums and products accumulate in `f64` and round once to the dtype:
//!   XLA's CPU backend sums bf16 and f16 in f32 and f32 in several partial
//!   sums, so a long sum does not stall as one accumulator of the dtype
//!   would (twenty million f32 ones sum to twenty million); XLA also splits
//!   long reductions into pieces whose partial sums it rounds to the
//!   dtype, so results agree within the accumulation error of the order
//!   it picks (a few ulps of bf16 over thousands of terms). A partial sum
//!   that overflows f32 on the device while the total does not stays
//!   finite here.
//! * **`dot_general`** accumulates floats in `f64` and rounds once to the
//!   result dtype (XLA accumulates in the operand precision, in an order of
//!   its choosing); integers accumulate in wrapping 64-bit arithmetic and
//!   wrap once to the result width.
//! * **`dynamic_slice`, `dynamic_update_slice`, `gather`** clamp each start
//!   index so the window fits. **`scatter`** skips every window that does
//!   not fit entirely, and applies the others in row-major order of their
//!   index positions, so with duplicate indices a `set` keeps the last
//!   update.
//! * **`sort`** is stable and orders floats totally (`-NaN < -inf < ... <
//!   -0 < +0 < ... < +inf < +NaN`), descending being the reverse order
//!   with ties kept in place; **`top_k`** takes the first `k` of the
//!   descending order.
//! * **argmax/argmin** follow the lowering's selector: the extreme wins,
//!   ties go to the smaller index, the first NaN wins.
//! * **`while`** runs until its condition is false (no iteration limit
//!   unless [`Checks::max_loop_iterations`] sets one). Carried values are
//!   shared, not copied, between iterations, so a loop costs what its
//!   body's ops cost: N iterations over a carry of C elements cost at most
//!   O(N·C) (a `dynamic_update_slice` of a carried tensor copies it).
//!   **`if`** runs one branch. `optimization_barrier` is the identity.
//!
//! Where the plugin departs from these semantics (XLA rewrites that change
//! values, and bugs), the interpreter keeps them; the differential fuzzer
//! (`tessel_testing::fuzz`, which found most of these) does not generate
//! these cases, and `dsl/tests/interp_regressions.rs` pins both results
//! of each one it found:
//!
//! * an integer division or remainder of operands XLA knows while
//!   compiling (`(a - a) % (a - a)`, `MIN / -1`) is folded on the host,
//!   where it traps (SIGFPE) and ends the process;
//! * a `dynamic_update_slice` whose update reads its operand at other
//!   positions (`x.dynamic_update_slice(x.dynamic_slice(&[i], ..), &[i +
//!   1])`) may be fused and run in place, reading elements it has already
//!   overwritten;
//! * a `dynamic_slice` of a `dynamic_slice` is folded into one slice at the
//!   sum of the starts, clamped once instead of twice, and so is a take or
//!   a scatter at one index into a `dynamic_slice` (XLA makes them dynamic
//!   slices and updates first);
//! * a product with a pred converted to a float (`x * p.cast(F32)`) becomes
//!   a select, so it is +0 where IEEE gives -0 (`x < 0`, `p` false), and
//!   `x + 0` is dropped, so it is -0 where IEEE gives +0 (`x = -0`);
//! * `sqrt(a) * sqrt(a)` becomes `a`, without the square roots' rounding;
//! * `atan2(0, 0)` is NaN (IEEE and the interpreter: 0) when XLA's fusion
//!   emitters (its default CPU codegen) see both zeros while compiling;
//! * `sign(-0)` is +0 (IEEE and the interpreter: -0) when XLA knows the
//!   zero while compiling (a sum over an empty axis, negated);
//! * the NaN of `inf % c` with the divisor `c` a constant is +NaN, where the
//!   interpreter (the host's `fmod`), and the plugin with the divisor an
//!   argument, give the processor's default NaN (-NaN on x86-64). IEEE
//!   leaves that sign unspecified; a sort shows it (floats sort totally).
//!
//! One departure is avoided in lowering instead: XLA folds
//! `maximum(clamp(lo, x, hi), lo)` to the clamp as if `lo <= hi` held, so a
//! clamp is lowered as the `maximum` and `minimum` it is defined as, and
//! bounds that cross give `hi` on both sides.
//!
//! # Checks
//!
//! With [`Checks::non_finite`], an op whose float result holds a NaN or an
//! infinity while all its float operands are finite is reported
//! ([`FindingKind::NonFinite`], with the first such element); constants
//! and iotas are not checked. With [`Checks::clamped_indices`], every
//! start index that `dynamic_slice`, `dynamic_update_slice` or `gather`
//! clamps is reported ([`FindingKind::ClampedIndex`]), and every `scatter`
//! window that is skipped ([`FindingKind::DroppedScatter`]). Each op gets
//! at most one finding of each kind per evaluation, holding the first
//! occurrence and the number of occurrences; findings are in the order
//! they were first seen.
//!
//! # Errors
//!
//! Nothing panics: arguments that do not match the parameters are an
//! [`InterpError::Arguments`], and an op the graph holds that cannot be
//! evaluated (malformed, or one that failed to trace) an
//! [`InterpError::Op`] naming it and its source line. Before an op runs,
//! the memory of its results (8 bytes an element, as the interpreter holds
//! them) is reserved and released: results that do not fit are an
//! [`InterpError::Op`] saying so, not an abort of the process.

mod checks;
mod control;
mod dispatch;
mod elementwise;
mod indexing;
mod linalg;
mod math;
mod names;
mod reduce;
mod shape_ops;
mod value;

pub use checks::{Checks, Finding, FindingKind};

use std::borrow::Borrow;
use std::rc::Rc;

use crate::error::{InterpError, Location, Result};
use crate::host::HostTensor;
use crate::ir::{Def, Graph, NodeId, Op, RegionId, ValueId};
use crate::lower::nesting_depth;
use checks::{IndexNotes, Recorder};
pub use names::op_name;
use value::{Data, Val};

/// What [`evaluate`] returns: the graph's outputs and what the checks found.
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// The results of the graph's body, in order.
    pub outputs: Vec<HostTensor>,
    /// What the enabled [`Checks`] found, in the order first seen.
    pub findings: Vec<Finding>,
}

/// Nesting depth evaluated on the caller's stack.
const SHALLOW: usize = 64;
/// The stack of the evaluating thread for deeper programs.
const DEEP_STACK: usize = 1 << 30;

/// Runs `graph` on `args` (one host tensor per parameter, of its type, given
/// as `&[HostTensor]` or `&[&HostTensor]`) and returns its outputs and the
/// findings of `checks`.
///
/// Errors: [`InterpError::Arguments`] when the arguments do not match the
/// parameters, [`InterpError::Op`] for an op the graph holds that cannot be
/// evaluated (a malformed graph or one with an op that failed to trace).
pub fn evaluate<A>(graph: &Graph, args: &[A], checks: Checks) -> Result<Evaluation>
where
    A: Borrow<HostTensor> + Sync,
{
    let bad = |message: String| -> crate::error::Error {
        InterpError::Arguments {
            kernel: graph.name.clone(),
            message,
        }
        .into()
    };
    if graph.regions.is_empty() {
        return Err(bad("the graph has no body".into()));
    }
    let specs: Vec<_> = graph.regions[0]
        .args
        .iter()
        .map(|&v| graph.values.get(v).map(|x| x.spec.clone()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("a parameter is not in the graph".into()))?;
    if args.len() != specs.len() {
        return Err(bad(format!(
            "the graph takes {} arguments, got {}",
            specs.len(),
            args.len()
        )));
    }
    for (i, (a, s)) in args.iter().zip(&specs).enumerate() {
        let a: &HostTensor = a.borrow();
        if a.spec() != s {
            let name = graph.param_names.get(i).cloned().unwrap_or_default();
            return Err(bad(format!(
                "argument {i} (`{name}`) is {}, the graph takes {s}",
                a.spec()
            )));
        }
    }
    if nesting_depth(graph) <= SHALLOW {
        return run(graph, args, checks);
    }
    // Evaluation recurses once per nested loop or branch: deep programs get
    // a thread with a stack to match.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("tessel-interp".into())
            .stack_size(DEEP_STACK)
            .spawn_scoped(scope, || run(graph, args, checks))
            .map_err(|e| bad(format!("cannot start the evaluating thread: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(bad("the evaluating thread failed".into())))
    })
}

fn run<A: Borrow<HostTensor>>(graph: &Graph, args: &[A], checks: Checks) -> Result<Evaluation> {
    let mut it = Interp {
        g: graph,
        env: vec![None; graph.values.len()],
        active: vec![false; graph.regions.len()],
        live: graph.live_nodes(),
        checks,
        rec: Recorder::default(),
    };
    let vals: Vec<Rc<Val>> = args
        .iter()
        .map(|a| Rc::new(Val::from_host(a.borrow())))
        .collect();
    let outs = it.region(0, &vals, None)?;
    let outputs = outs
        .iter()
        .map(|v| v.to_host())
        .collect::<Result<Vec<_>>>()?;
    Ok(Evaluation {
        outputs,
        findings: it.rec.findings,
    })
}

/// The interpreter's state: the graph, the current value of every SSA
/// value, and the findings so far.
pub(crate) struct Interp<'g> {
    g: &'g Graph,
    env: Vec<Option<Rc<Val>>>,
    /// The regions being evaluated (a region may not run inside itself).
    active: Vec<bool>,
    /// The nodes the results depend on ([`Graph::live_nodes`]): only they
    /// run, as only they are lowered for a device (a dead node, e.g. the
    /// one-example trace `vmap` leaves behind, is neither computed nor able
    /// to fail).
    live: Vec<bool>,
    checks: Checks,
    rec: Recorder,
}

impl<'g> Interp<'g> {
    /// An error of node `node` (or of the graph's body when `None`).
    fn fail(&self, node: Option<NodeId>, message: impl Into<String>) -> crate::error::Error {
        let (op, location) = match node.and_then(|n| self.g.nodes.get(n)) {
            Some(n) => (op_name(&n.op).to_string(), n.location.clone()),
            None => (
                "return".to_string(),
                Location {
                    file: String::new(),
                    line: 0,
                    column: 0,
                },
            ),
        };
        InterpError::Op {
            kernel: self.g.name.clone(),
            op,
            location,
            message: message.into(),
        }
        .into()
    }

    /// The current value of `v`.
    fn get(&self, v: ValueId, node: Option<NodeId>) -> Result<Rc<Val>> {
        match self.env.get(v) {
            Some(Some(x)) => Ok(x.clone()),
            _ => {
                let why = match self.g.values.get(v).map(|x| &x.def) {
                    Some(Def::Poisoned) => "an op that failed to trace",
                    Some(_) => "a value not computed before its use",
                    None => "a value that is not in the graph",
                };
                Err(self.fail(node, format!("operand %v{v} is {why}")))
            }
        }
    }

    /// Binds `args` to `region`'s arguments, runs its nodes and returns its
    /// results. `owner` is the node whose region it is.
    pub(crate) fn region(
        &mut self,
        region: RegionId,
        args: &[Rc<Val>],
        owner: Option<NodeId>,
    ) -> Result<Vec<Rc<Val>>> {
        let g = self.g;
        let r = g
            .regions
            .get(region)
            .ok_or_else(|| self.fail(owner, format!("region {region} is not in the graph")))?;
        if r.args.len() != args.len() {
            let m = format!(
                "region {region} takes {} arguments, got {}",
                r.args.len(),
                args.len()
            );
            return Err(self.fail(owner, m));
        }
        for (&v, a) in r.args.iter().zip(args) {
            let spec = g.values.get(v).map(|x| &x.spec);
            if spec.is_none_or(|s| s.dtype != a.dtype || s.shape != a.shape) {
                return Err(self.fail(
                    owner,
                    format!("region {region} argument %v{v} gets a {}", a.spec()),
                ));
            }
            self.env[v] = Some(a.clone());
        }
        if std::mem::replace(&mut self.active[region], true) {
            return Err(self.fail(owner, format!("region {region} runs inside itself")));
        }
        let ran = r.nodes.iter().try_for_each(|&n| match self.live.get(n) {
            Some(false) => Ok(()),
            _ => self.node(n),
        });
        self.active[region] = false;
        ran?;
        r.results.iter().map(|&v| self.get(v, owner)).collect()
    }

    /// Evaluates node `id` and stores its results.
    fn node(&mut self, id: NodeId) -> Result<()> {
        let g = self.g;
        let node = g
            .nodes
            .get(id)
            .ok_or_else(|| self.fail(None, format!("node {id} is not in the graph")))?;
        let ops = node
            .operands
            .iter()
            .map(|&v| self.get(v, Some(id)))
            .collect::<Result<Vec<_>>>()?;
        let mut notes = IndexNotes::default();
        let results: Vec<Rc<Val>> = match &node.op {
            Op::While { .. } => self.while_loop(id, ops.clone())?,
            Op::If => self.branch(id, &ops)?,
            Op::OptimizationBarrier => ops.clone(),
            op => {
                let specs = node
                    .results
                    .iter()
                    .map(|&v| g.values.get(v).map(|x| x.spec.clone()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| self.fail(Some(id), "a result is not in the graph"))?;
                if let Some(m) = unaffordable(&specs) {
                    return Err(self.fail(Some(id), m));
                }
                let refs: Vec<&Val> = ops.iter().map(|v| v.as_ref()).collect();
                dispatch::simple(op, &refs, &specs, &mut notes)
                    .map_err(|m| self.fail(Some(id), m))?
                    .into_iter()
                    .map(Rc::new)
                    .collect()
            }
        };
        if results.len() != node.results.len() {
            let m = format!(
                "made {} results, the graph has {}",
                results.len(),
                node.results.len()
            );
            return Err(self.fail(Some(id), m));
        }
        for (&v, r) in node.results.iter().zip(&results) {
            let spec = g.values.get(v).map(|x| &x.spec);
            if spec.is_none_or(|s| s.dtype != r.dtype || s.shape != r.shape) {
                return Err(self.fail(Some(id), format!("result %v{v} came out as {}", r.spec())));
            }
        }
        self.check(id, &ops, &results, notes);
        for (&v, r) in node.results.iter().zip(results) {
            self.env[v] = Some(r);
        }
        Ok(())
    }

    /// Runs the enabled checks on one evaluated node.
    fn check(&mut self, id: NodeId, ops: &[Rc<Val>], results: &[Rc<Val>], notes: IndexNotes) {
        let node = &self.g.nodes[id];
        let op = op_name(&node.op);
        if self.checks.clamped_indices {
            if let Some((axis, start, used, dropped)) = notes.first {
                let kind = if dropped {
                    FindingKind::DroppedScatter { axis, start }
                } else {
                    FindingKind::ClampedIndex {
                        axis,
                        start,
                        clamped: used,
                    }
                };
                self.rec
                    .record(&self.g.name, op, id, &node.location, kind, notes.count);
            }
        }
        let skip = matches!(
            node.op,
            Op::Constant { .. }
                | Op::Iota { .. }
                | Op::While { .. }
                | Op::If
                | Op::OptimizationBarrier
        );
        if !self.checks.non_finite || skip {
            return;
        }
        for (ri, r) in results.iter().enumerate() {
            let Data::F(v) = &r.data else { continue };
            let Some(pos) = v.iter().position(|x| !x.is_finite()) else {
                continue;
            };
            let finite_in = ops.iter().all(|o| match &o.data {
                Data::F(w) => w.iter().all(|x| x.is_finite()),
                Data::I(_) => true,
            });
            if finite_in {
                let kind = FindingKind::NonFinite {
                    result: ri,
                    index: unravel(pos, &r.shape),
                    value: v[pos],
                };
                let count = v.iter().filter(|x| !x.is_finite()).count();
                self.rec
                    .record(&self.g.name, op, id, &node.location, kind, count);
            }
            return;
        }
    }
}

/// The multi-index of row-major position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        if shape[a] > 0 {
            idx[a] = i % shape[a];
            i /= shape[a];
        }
    }
    idx
}

/// Why results of `specs` cannot be held, if they cannot: their elements
/// (8 bytes each here) overflow, or reserving that memory fails.
fn unaffordable(specs: &[crate::shape::TensorSpec]) -> Option<String> {
    let mut bytes: usize = 0;
    for s in specs {
        let n = s.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match n
            .and_then(|n| n.checked_mul(8))
            .and_then(|b| bytes.checked_add(b))
        {
            Some(b) => bytes = b,
            None => {
                return Some(format!(
                    "its results ({s}) have more elements than memory can hold"
                ))
            }
        }
    }
    // Small results are left to the allocator.
    if bytes < 1 << 30 {
        return None;
    }
    let mut probe: Vec<u8> = Vec::new();
    match probe.try_reserve_exact(bytes) {
        Ok(()) => None,
        Err(_) => Some(format!(
            "its results need {bytes} bytes in the interpreter, which could not be allocated"
        )),
    }
}
