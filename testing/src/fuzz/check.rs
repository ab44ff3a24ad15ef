//! Running cases both ways: traced into one kernel (a batch of programs
//! side by side, so that XLA compiles once for all of them), evaluated by
//! the interpreter and run on the CPU plugin, and compared output by
//! output.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tessel_dsl::interp::{evaluate, Checks};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{HostTensor, Tensor, TensorSpec};

use super::build::build;
use super::compare::mismatch;
use super::program::{Case, Output, Program, V};
use crate::{device, fresh_name};

/// How a case came out.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every output agrees.
    Agree,
    /// An output differs, or one side failed where the other ran.
    Mismatch(String),
    /// The program does not trace (a malformed program: a generator or
    /// shrinker bug, not a finding).
    Invalid(String),
}

impl Verdict {
    /// Whether this is a [`Verdict::Mismatch`].
    pub fn is_mismatch(&self) -> bool {
        matches!(self, Verdict::Mismatch(_))
    }
}

/// The checks the interpreter runs (all of them, so that they run on
/// random graphs too), with a loop limit no generated loop reaches.
const CHECKS: Checks = Checks {
    non_finite: true,
    clamped_indices: true,
    max_loop_iterations: Some(1 << 16),
};

/// Where evaluating a kernel of several programs stopped.
enum Failure {
    Trace(String),
    Interp(String),
    Xla(String),
}

/// The text of a caught panic.
fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Traces `programs` side by side into one kernel (parameters and outputs
/// concatenated in order) and returns the interpreter's and the plugin's
/// outputs.
fn both(
    name: String,
    programs: &[&Program],
    args: &[&HostTensor],
) -> Result<(Vec<HostTensor>, Vec<HostTensor>), Failure> {
    let body = |a: &[Tensor]| {
        let mut outs = Vec::new();
        let mut at = 0;
        for p in programs {
            outs.extend(build(p, &a[at..at + p.params.len()]));
            at += p.params.len();
        }
        outs
    };
    let k = Kernel::new(name, body);
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let g = catch_unwind(AssertUnwindSafe(|| k.trace(&specs)))
        .map_err(|e| Failure::Trace(panic_text(e)))?
        .map_err(|e| Failure::Trace(e.to_string()))?;
    let interp = catch_unwind(AssertUnwindSafe(|| evaluate(&g, args, CHECKS)))
        .map_err(|e| Failure::Interp(format!("the interpreter panicked: {}", panic_text(e))))?
        .map_err(|e| Failure::Interp(e.to_string()))?;
    let xla = k
        .run(&device(), args)
        .map_err(|e| Failure::Xla(e.to_string()))?;
    Ok((interp.outputs, xla))
}

/// Compares the outputs of `p` (`got` from the interpreter, `want` from
/// the plugin).
fn verdict(p: &Program, got: &[HostTensor], want: &[HostTensor]) -> Verdict {
    let bad: Vec<String> = p
        .outputs
        .iter()
        .zip(got.iter().zip(want))
        .enumerate()
        .filter_map(|(i, (o, (g, w)))| {
            mismatch(g, w, o.terms).map(|m| format!("output {i} (v{}): {m}", o.value))
        })
        .collect();
    if bad.is_empty() {
        Verdict::Agree
    } else {
        Verdict::Mismatch(bad.join("\n"))
    }
}

/// A kernel name that is the same for the same program (so that a rerun
/// with other arguments is a compile-cache hit) and differs otherwise.
fn program_name(p: &Program) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{p:?}").hash(&mut h);
    format!("fuzz_{:016x}", h.finish())
}

/// Evaluates `case` alone both ways and compares.
pub fn check(case: &Case) -> Verdict {
    let args: Vec<&HostTensor> = case.args.iter().collect();
    match both(program_name(&case.program), &[&case.program], &args) {
        Ok((got, want)) => verdict(&case.program, &got, &want),
        Err(Failure::Trace(m)) => Verdict::Invalid(m),
        Err(Failure::Interp(m)) => Verdict::Mismatch(format!("the interpreter fails: {m}")),
        Err(Failure::Xla(m)) => Verdict::Mismatch(format!("the plugin fails: {m}")),
    }
}

/// Evaluates `cases` as one kernel and returns each one's verdict; when
/// the batch as a whole fails (an error on one side), each case is
/// checked alone instead.
pub fn check_batch(cases: &[Case]) -> Vec<Verdict> {
    let programs: Vec<&Program> = cases.iter().map(|c| &c.program).collect();
    let args: Vec<&HostTensor> = cases.iter().flat_map(|c| &c.args).collect();
    let Ok((got, want)) = both(fresh_name("fuzz_batch"), &programs, &args) else {
        return cases.iter().map(check).collect();
    };
    let mut at = 0;
    cases
        .iter()
        .map(|c| {
            let n = c.program.outputs.len();
            let v = verdict(&c.program, &got[at..at + n], &want[at..at + n]);
            at += n;
            v
        })
        .collect()
}

/// The indices of the outputs of `case` that differ (none when it agrees
/// or fails as a whole).
pub fn failing_outputs(case: &Case) -> Vec<usize> {
    let p = &case.program;
    let args: Vec<&HostTensor> = case.args.iter().collect();
    let Ok((got, want)) = both(program_name(p), &[p], &args) else {
        return Vec::new();
    };
    p.outputs
        .iter()
        .zip(got.iter().zip(&want))
        .enumerate()
        .filter(|(_, (o, (g, w)))| mismatch(g, w, o.terms).is_some())
        .map(|(i, _)| i)
        .collect()
}

/// The interpreter's values of top-level values `values` of `case`.
pub fn interpret(case: &Case, values: &[V]) -> Result<Vec<HostTensor>, String> {
    let mut p = case.program.clone();
    p.outputs = values
        .iter()
        .map(|&value| Output { value, terms: 0 })
        .collect();
    let k = Kernel::new(fresh_name("fuzz_values"), |a: &[Tensor]| build(&p, a));
    let specs: Vec<TensorSpec> = case.args.iter().map(|a| a.spec().clone()).collect();
    let g = catch_unwind(AssertUnwindSafe(|| k.trace(&specs)))
        .map_err(panic_text)?
        .map_err(|e| e.to_string())?;
    let e = catch_unwind(AssertUnwindSafe(|| evaluate(&g, &case.args, CHECKS)))
        .map_err(panic_text)?
        .map_err(|e| e.to_string())?;
    Ok(e.outputs)
}
