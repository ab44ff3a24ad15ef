//! The thread-local trace context.
//!
//! While a kernel is traced, its Rust body runs with a `TraceState` on this
//! thread's stack; every op on a [`Tensor`] appends a node to that state's
//! [`Graph`]. Ops never panic and never return `Result` (so that operators
//! read as plain Rust): the first error is recorded with the op, the operand
//! types and the user's source line, later ops on its poisoned results are
//! skipped, and [`trace`] returns the error when the body finishes (or
//! when Rust code in the body panics on a poisoned result's type, see
//! `after_error`).

mod after_error;
pub mod carry;
pub(crate) mod checks;
pub mod tensor;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::config::KernelConfig;
use crate::error::{KernelError, Location, Result};
use crate::ir::tree::TreeDef;
use crate::ir::Op;
use crate::ir::{Def, Graph, MeshAxes, RegionId, RegionKind, ValueId};
use crate::shape::TensorSpec;
use tensor::Tensor;

static NEXT_TRACE_ID: AtomicU32 = AtomicU32::new(1);
static TRACE_COUNT: AtomicU64 = AtomicU64::new(0);

/// How many kernel traces have run in this process (a cache hit does not trace).
pub fn trace_count() -> u64 {
    TRACE_COUNT.load(Ordering::Relaxed)
}

/// How many kernel traces have run on this thread.
pub fn thread_trace_count() -> u64 {
    THREAD_TRACES.with(|c| c.get())
}

/// The state of one trace in progress.
pub(crate) struct TraceState {
    pub(crate) id: u32,
    pub(crate) graph: Graph,
    pub(crate) region: RegionId,
    pub(crate) error: Option<KernelError>,
    pub(crate) options: KernelConfig,
    /// The mesh of a `shard_map` trace, whose collectives group its devices.
    pub(crate) mesh: Option<MeshAxes>,
    /// The checks recorded so far (see [`checks`]).
    pub(crate) checks: checks::CheckState,
}

thread_local! {
    static STACK: RefCell<Vec<TraceState>> = const { RefCell::new(Vec::new()) };
    static ORPHAN: RefCell<Option<KernelError>> = const { RefCell::new(None) };
    static THREAD_TRACES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Runs `f` on the innermost trace of this thread, if any.
pub(crate) fn with_state<R>(f: impl FnOnce(&mut TraceState) -> R) -> Option<R> {
    STACK.with(|s| s.borrow_mut().last_mut().map(f))
}

/// The ids of the traces in progress on this thread.
pub(crate) fn live_trace_ids() -> Vec<u32> {
    STACK.with(|s| s.borrow().iter().map(|t| t.id).collect())
}

/// Whether this thread is currently tracing a kernel.
pub fn is_tracing() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// The error of the last op called outside any trace on this thread, taken.
///
/// Tensor ops can only build graphs inside a kernel; called outside one they
/// return an inert handle and leave their error here.
pub fn take_orphan_error() -> Option<KernelError> {
    ORPHAN.with(|o| o.borrow_mut().take())
}

/// The kernel name of the innermost trace (for messages).
pub(crate) fn kernel_name(state: &TraceState) -> String {
    state.graph.name.clone()
}

fn describe(state: &TraceState, operands: &[Tensor]) -> Vec<String> {
    operands
        .iter()
        .map(|t| {
            if t.trace == state.id && t.value < state.graph.values.len() {
                state.graph.values[t.value].spec.to_string()
            } else {
                "<tensor from another trace>".to_string()
            }
        })
        .collect()
}

impl TraceState {
    /// Records `message` as the trace's error if it is the first.
    pub(crate) fn fail(&mut self, op: &str, operands: &[Tensor], message: String, loc: &Location) {
        if self.error.is_none() {
            self.error = Some(KernelError {
                kernel: kernel_name(self),
                op: op.to_string(),
                operands: describe(self, operands),
                message,
                location: loc.clone(),
                called_at: None,
            });
        }
    }

    /// A poisoned handle of `spec` in the current region.
    pub(crate) fn poisoned(&mut self, spec: TensorSpec) -> Tensor {
        let v = self.graph.add_poisoned(self.region, spec);
        Tensor {
            trace: self.id,
            value: v,
        }
    }

    /// Makes `value` usable in `region`, threading it through explicit
    /// (loop) regions as an extra block argument. `Err` if the value is not
    /// visible from `region` at all.
    pub(crate) fn resolve_in(
        &mut self,
        value: ValueId,
        region: RegionId,
    ) -> Result<ValueId, String> {
        let home = self.graph.values[value].region;
        if home == region {
            return Ok(value);
        }
        if !self.graph.encloses(home, region) {
            return Err(
                "a tensor is used outside the loop or branch body that created it; \
                 carry it out of the body as a loop or branch result instead"
                    .to_string(),
            );
        }
        let r = &self.graph.regions[region];
        let (Some(parent), kind) = (r.parent, r.kind) else {
            return Err("internal: value not visible from the function body".to_string());
        };
        match kind {
            RegionKind::Func | RegionKind::Implicit => self.resolve_in(value, parent),
            RegionKind::Explicit => {
                let outer = self.resolve_in(value, parent)?;
                if let Some(&(_, inner)) = self.graph.regions[region]
                    .captures
                    .iter()
                    .find(|(o, _)| *o == outer)
                {
                    return Ok(inner);
                }
                let spec = self.graph.values[outer].spec.clone();
                let inner = self.graph.add_arg(region, spec);
                self.graph.regions[region].captures.push((outer, inner));
                Ok(inner)
            }
        }
    }

    /// Checks that `t` belongs to this trace and is visible here; returns its
    /// value id in the current region, or `Ok(None)` if it is poisoned.
    pub(crate) fn operand(&mut self, t: Tensor) -> Result<Option<ValueId>, String> {
        if t.trace != self.id || t.value >= self.graph.values.len() {
            return Err(
                "a tensor from another kernel trace (or created outside any kernel) \
                        was used here; pass it in as a kernel argument"
                    .to_string(),
            );
        }
        if self.graph.values[t.value].def == Def::Poisoned {
            return Ok(None);
        }
        let region = self.region;
        self.resolve_in(t.value, region).map(Some)
    }
}

/// The spec of a tensor handle, if it belongs to the current trace.
pub(crate) fn spec_of(t: Tensor) -> Option<TensorSpec> {
    with_state(|s| {
        if t.trace == s.id && t.value < s.graph.values.len() {
            Some(s.graph.values[t.value].spec.clone())
        } else {
            None
        }
    })
    .flatten()
}

/// What an op checker returns: the op to record and the result types.
pub(crate) type Built = std::result::Result<(Op, Vec<TensorSpec>), String>;

/// Appends one op to the current trace.
///
/// `check` sees the operand specs and returns the op and its result specs, or
/// a message. The fallback specs are used for poisoned results.
pub(crate) fn build(
    op_name: &str,
    operands: &[Tensor],
    loc: Location,
    num_results: usize,
    check: impl FnOnce(&[TensorSpec]) -> Built,
) -> Vec<Tensor> {
    let loc = &loc;
    let out = with_state(|s| {
        let mut ids = Vec::with_capacity(operands.len());
        let mut poisoned = false;
        for &t in operands {
            match s.operand(t) {
                Ok(Some(v)) => ids.push(v),
                Ok(None) => poisoned = true,
                Err(m) => {
                    s.fail(op_name, operands, m, loc);
                    poisoned = true;
                }
            }
        }
        let fallback = ids
            .first()
            .map(|&v| s.graph.values[v].spec.clone())
            .unwrap_or_else(|| TensorSpec::scalar(crate::dtype::DType::F32));
        if poisoned {
            return (0..num_results)
                .map(|_| s.poisoned(fallback.clone()))
                .collect();
        }
        let specs: Vec<TensorSpec> = ids
            .iter()
            .map(|&v| s.graph.values[v].spec.clone())
            .collect();
        let checked = check(&specs).and_then(|(op, result_specs)| {
            // A result beyond the size limits would abort XLA's compiler.
            for r in &result_specs {
                if let Err(e) = r.check_size() {
                    return Err(format!("the result {e}"));
                }
            }
            Ok((op, result_specs))
        });
        match checked {
            Ok((op, result_specs)) => {
                let region = s.region;
                s.graph
                    .add_node(region, op, ids, result_specs, Vec::new(), loc.clone())
                    .into_iter()
                    .map(|value| Tensor { trace: s.id, value })
                    .collect()
            }
            Err(m) => {
                s.fail(op_name, operands, m, loc);
                (0..num_results)
                    .map(|_| s.poisoned(fallback.clone()))
                    .collect()
            }
        }
    });
    match out {
        Some(v) => v,
        None => {
            orphan(op_name, loc);
            (0..num_results).map(|_| Tensor::INERT).collect()
        }
    }
}

/// Records the error of an op called outside any kernel.
pub(crate) fn orphan(op_name: &str, loc: &Location) {
    ORPHAN.with(|o| {
        let mut o = o.borrow_mut();
        if o.is_none() {
            *o = Some(KernelError {
                kernel: "<none>".to_string(),
                op: op_name.to_string(),
                operands: Vec::new(),
                message: "tensor ops can only run while a kernel is traced; \
                          call them inside a #[tpu_kernel] function or a Kernel closure"
                    .to_string(),
                location: loc.clone(),
                called_at: None,
            });
        }
    });
}

/// Pops the trace even if the kernel body panics.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        STACK.with(|s| s.borrow_mut().pop());
    }
}

/// Values a kernel body returns: any tree of traced tensors ([`Carry`]):
/// one tensor, a tuple, array or `Vec` of them, or a `#[derive(Tree)]`
/// struct. The program keeps the structure, so the caller gets the same
/// shape back.
///
/// [`Carry`]: crate::ops::Carry
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned from a kernel",
    label = "kernels return a `Tensor`, a tuple, array or `Vec` of them, or a `#[derive(Tree)]` struct"
)]
pub trait Outputs: carry::Carry {
    /// The tensors, in order.
    fn into_tensors(self) -> Vec<Tensor> {
        carry::flat(&self)
    }
    /// The structure the tensors make.
    fn output_tree(&self) -> TreeDef {
        Self::structure::<Tensor>(self)
    }
}

/// Checks the parameter specs against the size limits
/// ([`TensorSpec::check_size`]): a kernel error naming the parameter.
fn check_params(name: &str, params: &[(String, TensorSpec)]) -> Result<()> {
    for (param, spec) in params {
        if let Err(e) = spec.check_size() {
            return Err(KernelError {
                kernel: name.to_string(),
                op: "argument".into(),
                operands: vec![spec.to_string()],
                message: format!("parameter `{param}`: {e}"),
                location: Location {
                    file: "<kernel arguments>".into(),
                    line: 0,
                    column: 0,
                },
                called_at: None,
            }
            .into());
        }
    }
    Ok(())
}

/// Appends the checks' code and values to `@main`'s results and their
/// sites to the graph (nothing for a trace without checks), as
/// [`pack_body`](checks::pack_body) laid them out.
fn check_results(s: &mut TraceState, loc: &Location) {
    let body = s.checks.take(0);
    if let Some((_, stray)) = s.checks.regions.first() {
        let site = stray.values.first().map(|(k, _)| &s.checks.sites[*k]);
        let at = site.map_or_else(|| loc.clone(), |c| c.location.clone());
        let m = "a check inside a region that cannot carry its result out (a loop condition?); \
                 check the values in the loop body or before the loop"
            .to_string();
        s.fail("check", &[], m, &at);
        return;
    }
    let Some(body) = body else {
        return;
    };
    let mut tensors = vec![body.code];
    let mut values = body.values;
    values.sort_by_key(|(k, _)| *k);
    if values.len() != s.checks.sites.len() {
        s.fail(
            "check",
            &[],
            "internal: a check's values did not reach the function body".to_string(),
            loc,
        );
        return;
    }
    tensors.extend(values.into_iter().flat_map(|(_, v)| v));
    let mut results = Vec::with_capacity(tensors.len());
    for &t in &tensors {
        match s.operand(t) {
            Ok(Some(v)) => results.push(v),
            Ok(None) => return,
            Err(m) => return s.fail("check", &tensors, m, loc),
        }
    }
    s.graph.regions[0].results.extend(results);
    s.graph.checks = std::mem::take(&mut s.checks.sites);
}

/// Traces `body` into a [`Graph`] named `name` whose parameters have the given
/// names and types, under `options` (precision, compute dtype, block size).
///
/// The body runs once with one [`Tensor`] per parameter; the tensors it
/// returns become the results of `@main`. The first error any op recorded is
/// returned with its op, operand types and source line. A parameter or an
/// op result beyond the size limits ([`TensorSpec::check_size`]) is a kernel
/// error too, so no such program reaches the compiler.
///
/// ```
/// use tessel_dsl::{trace, kernel::KernelConfig, TensorSpec, F32};
/// let g = trace("double", &[("x".into(), TensorSpec::new([4], F32))], KernelConfig::default(), |a| a[0] * 2.0)?;
/// assert_eq!(g.output_specs(), vec![TensorSpec::new([4], F32)]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn trace<O: Outputs>(
    name: &str,
    params: &[(String, TensorSpec)],
    options: KernelConfig,
    body: impl FnOnce(&[Tensor]) -> O,
) -> Result<Graph> {
    trace_inner(name, params, options, None, body)
}

/// Traces a per-device (`shard_map`) kernel: `params` are one device's
/// (local) arguments, collectives inside `body` group the devices of
/// `mesh`, and the graph runs as one replica per mesh device
/// ([`Graph::replicas`]).
pub fn trace_on_mesh<O: Outputs>(
    name: &str,
    params: &[(String, TensorSpec)],
    options: KernelConfig,
    mesh: MeshAxes,
    body: impl FnOnce(&[Tensor]) -> O,
) -> Result<Graph> {
    let replicas = mesh.size();
    let mut graph = trace_inner(name, params, options, Some(mesh), body)?;
    graph.replicas = replicas;
    Ok(graph)
}

/// The mesh of the innermost trace, when it is a `shard_map` trace.
pub(crate) fn current_mesh() -> Option<MeshAxes> {
    with_state(|s| s.mesh.clone()).flatten()
}

fn trace_inner<O: Outputs>(
    name: &str,
    params: &[(String, TensorSpec)],
    options: KernelConfig,
    mesh: Option<MeshAxes>,
    body: impl FnOnce(&[Tensor]) -> O,
) -> Result<Graph> {
    TRACE_COUNT.fetch_add(1, Ordering::Relaxed);
    THREAD_TRACES.with(|c| c.set(c.get() + 1));
    check_params(name, params)?;
    let id = NEXT_TRACE_ID.fetch_add(1, Ordering::Relaxed);
    let graph = Graph::new(name, params);
    let args: Vec<Tensor> = graph.regions[0]
        .args
        .iter()
        .map(|&value| Tensor { trace: id, value })
        .collect();
    STACK.with(|s| {
        s.borrow_mut().push(TraceState {
            id,
            graph,
            region: 0,
            error: None,
            options,
            mesh,
            checks: checks::CheckState::default(),
        })
    });
    let guard = Guard;
    let Some((outs, tree)) = after_error::catching(|| {
        let out = body(&args);
        let tree = out.output_tree();
        (out.into_tensors(), tree)
    }) else {
        // A panic after the trace's first error (see `after_error`).
        let state = STACK.with(|s| s.borrow_mut().pop());
        std::mem::forget(guard);
        let error = state.and_then(|s| s.error);
        return Err(error
            .expect("`catching` returns None only after an error")
            .into());
    };
    let loc = Location {
        file: "<kernel outputs>".into(),
        line: 0,
        column: 0,
    };
    with_state(|s| s.region = 0);
    checks::pack_body(&loc);
    with_state(|s| {
        let mut results = Vec::new();
        for &t in &outs {
            match s.operand(t) {
                Ok(Some(v)) => results.push(v),
                Ok(None) => {}
                Err(m) => s.fail("return", &outs, m, &loc),
            }
        }
        s.graph.regions[0].results = results;
        check_results(s, &loc);
    });
    let state = STACK.with(|s| s.borrow_mut().pop());
    std::mem::forget(guard);
    let state = state.expect("trace state pushed above");
    match state.error {
        Some(e) => Err(e.into()),
        None => Ok(Graph {
            output_tree: Some(std::sync::Arc::new(tree)),
            ..state.graph
        }),
    }
}
