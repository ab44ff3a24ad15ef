//! A differential fuzzer of the host interpreter
//! (`tessel_dsl::interp::evaluate`) against the XLA CPU plugin.
//!
//! Each seed gives a random well-typed program ([`generate`]): elementwise
//! ops with broadcasting, casts, broadcasts, reshapes, transposes, slices,
//! pads, concatenations, reductions, arg-reductions, sorts, dynamic slices
//! and updates, gathers and scatters with in- and out-of-range indices,
//! clamps, small dots, and `fori_loop`s (some carrying stacked outputs),
//! `scan`s (forward and reversed, with and without `xs`), `while_loop`s and
//! `cond`s nested two deep, transcendental functions (`exp`, `expm1`, `log`, `log1p`,
//! `tanh`, `sigmoid`, `sin`, `cos`, `tan`, `erf`, `rsqrt`, `cbrt`, `atan2`,
//! `pow`) whose results are compared within a few ulps, over f32, f64,
//! f16, bf16, s32, s8, u8 and pred tensors with
//! extents 0, 1 and odd sizes, and float rows of 64 to 128 elements whose
//! max, min and sum the CPU compile splits into lanes
//! (`tessel_dsl::lower::split_row_reductions`). A program is data ([`Program`]), so it can
//! be traced ([`build`]), printed as a Rust test ([`to_rust`]) and
//! shrunk ([`shrink`]).
//!
//! [`run`] traces a batch of programs side by side into one kernel (XLA
//! compiles once per batch), evaluates it with the interpreter and on the
//! plugin, and compares every output with the tolerances of [`compare`].
//! A case that differs is run alone, shrunk, and reported with its Rust
//! reproduction.
//!
//! What the generator avoids, because the plugin is wrong or the result is
//! not defined, is listed in the interpreter's docs (`# Semantics`); each
//! such place in the generator says why.

mod blocks;
mod build;
mod check;
pub mod compare;
mod generate;
pub mod grad;
mod grad_check;
mod inexact;
mod program;
mod rust;
mod shrink;
mod steps;
#[cfg(test)]
mod tests;
mod ties;
mod types;
mod vmap_check;

use std::sync::Mutex;
use std::time::Instant;

use tessel_dsl::interp::evaluate;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{HostTensor, Tensor, TensorSpec};

pub use build::build;
pub use check::{check, check_batch, Verdict};
pub use compare::{assert_same, mismatch, tolerance, ulp};
pub use generate::{all_outputs, generate, random_arg, DTYPES, EXTENTS, MAX_ELEMENTS};
pub use program::{
    Binary, Block, Bound, Case, Cmp, Inst, Op, Output, Program, Reduce, Unary, MAX_TRIPS, V,
};
pub use rust::{float, tensor_literal, to_rust, to_rust_grad};
pub use shrink::{renumber, shrink, shrink_with, Budget, Fails, Shrunk};
pub use types::{infer, retype};
pub use vmap_check::{check_vmap, vmap_case, VmapCase};

use crate::{device, fresh_name};

/// How [`run`] works through its seeds.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Programs per kernel.
    pub batch: usize,
    /// Threads, each compiling and running its own batches.
    pub workers: usize,
    /// The effort spent shrinking each mismatch.
    pub shrink: Budget,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batch: 50,
            workers: 2,
            shrink: Budget::default(),
        }
    }
}

/// A case on which the interpreter and the plugin differ.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The seed of the program.
    pub seed: u64,
    /// What differs (for the shrunk case, when it was shrunk).
    pub message: String,
    /// A Rust test that reproduces it.
    pub rust: String,
    /// Whether it differs when run alone (else only inside its batch, and
    /// the test is of the whole, unshrunk program).
    pub alone: bool,
}

/// What [`run`] did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Programs evaluated both ways.
    pub graphs: usize,
    /// Mismatches, by seed.
    pub findings: Vec<Finding>,
    /// Programs that did not trace (generator bugs), by seed.
    pub invalid: Vec<(u64, String)>,
}

/// XLA CPU options that cut compile time about fourfold: the older IR
/// emitters instead of the fusion emitters, no LLVM optimization, one
/// codegen module per program. XLA's HLO passes (where its rewrites are)
/// run as by default; only the machine code differs.
pub const FAST_COMPILE_FLAGS: &str = "--xla_cpu_use_fusion_emitters=false \
     --xla_backend_optimization_level=0 --xla_cpu_parallel_codegen_split_count=1";

/// Adds [`FAST_COMPILE_FLAGS`] to the `XLA_FLAGS` environment variable
/// (unless it already sets the emitters). The plugin reads it once, when
/// it starts: call this first, before any other thread runs.
pub fn use_fast_compile() {
    let mut flags = std::env::var("XLA_FLAGS").unwrap_or_default();
    if !flags.contains("xla_cpu_use_fusion_emitters") {
        flags.push(' ');
        flags.push_str(FAST_COMPILE_FLAGS);
        std::env::set_var("XLA_FLAGS", flags.trim());
    }
}

/// Checks the program of `seed` alone; on a mismatch, shrinks it and
/// returns the finding.
pub fn check_seed(seed: u64, budget: Budget) -> Result<(), Finding> {
    let case = generate(seed);
    match check(&case) {
        Verdict::Agree => Ok(()),
        Verdict::Invalid(m) => Err(Finding {
            seed,
            message: format!("the program does not trace: {m}"),
            rust: to_rust(&case, &format!("interp_fuzz_{seed}"), "Does not trace."),
            alone: true,
        }),
        Verdict::Mismatch(m) => Err(finding(&case, &m, budget)),
    }
}

/// Shrinks failing `case` and describes it.
fn finding(case: &Case, message: &str, budget: Budget) -> Finding {
    let seed = case.seed;
    let s = shrink(case, message, budget);
    let note = format!(
        "Interpreter fuzzer, seed {seed}: {}",
        s.message.lines().next().unwrap_or("")
    );
    Finding {
        seed,
        message: s.message,
        rust: to_rust(&s.case, &format!("interp_fuzz_{seed}"), &note),
        alone: true,
    }
}

/// Runs the programs of `seeds` in batches of `config.batch` on
/// `config.workers` threads, until the seeds run out or, when given,
/// `deadline` passes (no batch starts after it). `found` sees each
/// finding as it is made.
pub fn run(
    seeds: impl Iterator<Item = u64> + Send,
    config: &Config,
    deadline: Option<Instant>,
    found: &(dyn Fn(&Finding) + Sync),
) -> Report {
    let report = Mutex::new(Report::default());
    let work = |batch: Vec<u64>| {
        let cases: Vec<Case> = batch.into_iter().map(generate).collect();
        let verdicts = check_batch(&cases);
        let mut found_here = Vec::new();
        let mut invalid = Vec::new();
        for (case, v) in cases.iter().zip(verdicts) {
            match v {
                Verdict::Agree => {}
                Verdict::Invalid(m) => invalid.push((case.seed, m)),
                Verdict::Mismatch(m) => {
                    let f = match check(case) {
                        Verdict::Mismatch(alone) => finding(case, &alone, config.shrink),
                        _ => Finding {
                            seed: case.seed,
                            message: format!("only inside its batch: {m}"),
                            rust: to_rust(
                                case,
                                &format!("interp_fuzz_{}", case.seed),
                                "Differs only when traced with other programs.",
                            ),
                            alone: false,
                        },
                    };
                    found(&f);
                    found_here.push(f);
                }
            }
        }
        let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
        r.graphs += cases.len();
        r.findings.extend(found_here);
        r.invalid.extend(invalid);
    };
    in_batches(seeds, config, deadline, &work);
    let mut r = report.into_inner().unwrap_or_else(|e| e.into_inner());
    r.findings.sort_by_key(|f| f.seed);
    r.invalid.sort_by_key(|f| f.0);
    r
}

/// Hands the seeds of `seeds`, `config.batch` at a time, to `work` on
/// `config.workers` threads, until they run out or, when given, `deadline`
/// passes (no batch starts after it).
pub(crate) fn in_batches(
    seeds: impl Iterator<Item = u64> + Send,
    config: &Config,
    deadline: Option<Instant>,
    work: &(dyn Fn(Vec<u64>) + Sync),
) {
    let seeds = Mutex::new(seeds);
    let next = || -> Vec<u64> {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Vec::new();
        }
        let mut it = seeds.lock().unwrap_or_else(|e| e.into_inner());
        it.by_ref().take(config.batch.max(1)).collect()
    };
    std::thread::scope(|s| {
        for _ in 0..config.workers.max(1) {
            s.spawn(|| loop {
                let batch = next();
                if batch.is_empty() {
                    break;
                }
                work(batch);
            });
        }
    });
}

/// Traces `body`, evaluates it with the interpreter and on the CPU plugin
/// for `args`, and asserts that output `i` agrees within `terms[i]` terms
/// (0: bit for bit; see [`compare`]). The fuzzer's reproductions call
/// this.
#[track_caller]
pub fn assert_agree(args: &[HostTensor], terms: &[usize], body: impl Fn(&[Tensor]) -> Vec<Tensor>) {
    let k = Kernel::new(fresh_name("fuzz_case"), body);
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let g = k
        .trace(&specs)
        .unwrap_or_else(|e| panic!("the kernel does not trace: {e}"));
    let e = evaluate(&g, args, tessel_dsl::interp::Checks::default())
        .unwrap_or_else(|e| panic!("the interpreter fails: {e}"));
    let refs: Vec<&HostTensor> = args.iter().collect();
    let xla = k
        .run(&device(), &refs)
        .unwrap_or_else(|e| panic!("the plugin fails: {e}"));
    assert_eq!(e.outputs.len(), terms.len(), "one `terms` per output");
    let bad: Vec<String> = e
        .outputs
        .iter()
        .zip(&xla)
        .zip(terms)
        .enumerate()
        .filter_map(|(i, ((g, w), &t))| mismatch(g, w, t).map(|m| format!("output {i}: {m}")))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
