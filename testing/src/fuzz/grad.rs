//! A fuzzer of reverse-mode autodiff (`tessel_dsl::autodiff::vjp`)
//! against central differences.
//!
//! Each seed's program ([`generate`]) is made all-f64 ([`widen_floats`]):
//! every float dtype in it becomes f64, so that a cast to a narrow float
//! does not quantize what the differences see. Its float arguments are
//! drawn again from a continuous range ([`grad_case`]), away from the
//! ties and kinks of the interpreter fuzzer's small dyadic values; its
//! integer arguments (indices, loop bounds) are kept. Clamp bounds that
//! may tie their operand are moved off it (`ties::untie_clamps`).
//!
//! [`check_grad`] runs, on the CPU plugin, the scalar loss
//! `L(x) = sum_k <y_k(x), r_k>` over the program's float outputs `y_k`
//! (random `r_k`) and the pullback of the program for the cotangents
//! `r_k`, and compares the directional derivative `<grad L, u>` for a
//! random direction `u` with `(L(x + h u) - L(x - h u)) / 2h`; so too
//! `sum_k <t_k, r_k>` for the tangents `t_k` of `autodiff::jvp` along `u`
//! (the pullback's transpose: the pullback's own rules differentiated). A
//! difference at one step `h` may be a kink the step crossed (a
//! `maximum`, a `floor`, a comparison), so a case is a mismatch only if
//! the differences at three steps agree with each other and all differ
//! from the pullback. Programs whose loss or gradient is not finite, or
//! whose differences disagree among steps, are skipped, with the reason.
//!
//! [`check_grads`] checks a batch of programs that way with three
//! compiles in all (`grad_check`): their losses, pullbacks and tangents
//! are traced side by side, and every program's differences come from the
//! same runs of the batch's loss. [`run_grads`] runs such batches on
//! several threads, as the interpreter fuzzer does.

use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec};

use super::build::build;
use super::generate::generate;
pub use super::grad_check::check_fns;
use super::grad_check::{decide_rest, skip, skip_because};
use super::program::{Case, Inst, Op, Program};
use super::shrink::{shrink_with, Budget};
use super::ties::{holds_a_huge_float, not_comparable, repeats_a_float, untie_clamps};
use super::types::retype;
use super::{in_batches, Config};
use crate::Rng;

/// How a case came out.
#[derive(Clone, Debug, PartialEq)]
pub enum GradVerdict {
    /// The pullback agrees with the differences.
    Agree,
    /// Not checked, and why.
    Skipped(Skip),
    /// The pullback differs from differences that agree among steps, or
    /// the gradient fails to trace where the program does.
    Mismatch(String),
}

/// Why a case is not checked (what [`GradReport::skipped`] counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipKind {
    /// The f64 program does not type (a fault of [`widen_floats`]).
    IllTyped,
    /// The function does not trace.
    DoesNotTrace,
    /// No float input or no float output: nothing to differentiate.
    NoFloat,
    /// A clamp's bound may tie its operand, where JAX's convention gives
    /// the tied values no gradient and differences do not see it (an
    /// integer bound, which is not moved off its operand, or one a shrink
    /// put back).
    TiedClamp,
    /// A multiplying scatter's updates depend on a parameter (JAX defines
    /// no gradient there).
    MultiplyingScatter,
    /// The loss, at the point or a moved one, does not run.
    LossFails,
    /// The loss is not finite at the point.
    LossNotFinite,
    /// The gradient or the tangents are not finite.
    GradientNotFinite,
    /// The loss is not finite at a moved point.
    MovedLossNotFinite,
    /// The differences change with the step: it crossed a kink.
    Kink,
    /// A 64-bit integer cast to a float meets a value computed from a
    /// float parameter, which its magnitude may absorb: the program is
    /// then constant in that parameter to f64, though its gradient is not
    /// zero.
    Absorbed,
}

impl std::fmt::Display for SkipKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipKind::IllTyped => "the f64 program is ill-typed",
            SkipKind::DoesNotTrace => "the function does not trace",
            SkipKind::NoFloat => "no float input or output",
            SkipKind::TiedClamp => "a clamp's bound may tie its operand",
            SkipKind::MultiplyingScatter => {
                "no gradient is defined for a multiplying scatter's updates"
            }
            SkipKind::LossFails => "the loss does not run",
            SkipKind::LossNotFinite => "the loss is not finite",
            SkipKind::GradientNotFinite => "the gradient is not finite",
            SkipKind::MovedLossNotFinite => "a moved loss is not finite",
            SkipKind::Kink => "the differences depend on the step (a kink)",
            SkipKind::Absorbed => "a 64-bit integer cast to a float may absorb a parameter",
        })
    }
}

/// A skipped case: the reason, and the error behind it where there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct Skip {
    /// The reason.
    pub kind: SkipKind,
    /// The error met, for the reasons that come from one.
    pub detail: Option<String>,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{}: {d}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

/// A function under test: inputs to outputs.
pub type Func = Rc<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// Every float dtype in `p` (parameters, constants, iotas, casts, dot
/// results) made f64, and the types recomputed.
pub fn widen_floats(p: &mut Program) -> Result<(), String> {
    fn wide(d: DType) -> DType {
        if d.is_float() {
            DType::F64
        } else {
            d
        }
    }
    fn spec(s: &mut TensorSpec) {
        s.dtype = wide(s.dtype);
    }
    fn insts(list: &mut [Inst]) {
        for inst in list {
            match &mut inst.op {
                Op::Full { spec: s, .. } | Op::Iota { spec: s, .. } => spec(s),
                Op::Cast(_, d) => *d = wide(*d),
                Op::Dot { out: Some(d), .. } => *d = wide(*d),
                _ => {}
            }
            for b in inst.op.blocks_mut() {
                insts(&mut b.insts);
            }
        }
    }
    for &v in &p.params {
        spec(&mut p.specs[v]);
    }
    insts(&mut p.insts);
    retype(p)
}

/// The all-f64 program of `seed` with continuous float arguments in
/// `[-2, 2]` (integer arguments as [`generate`] made them).
pub fn grad_case(seed: u64) -> Result<Case, String> {
    let mut case = generate(seed);
    widen_floats(&mut case.program)?;
    untie_clamps(&mut case.program);
    let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    for (arg, &v) in case.args.iter_mut().zip(&case.program.params) {
        let s = case.program.specs[v].clone();
        if s.dtype.is_float() {
            *arg = HostTensor::from_fn(s, |_| rng.uniform(-2.0, 2.0));
        }
    }
    Ok(case)
}

/// Checks the pullback of `case`'s program, and its tangents (the
/// pullback's transpose, so the pullback's own rules are exercised), against
/// central differences.
pub fn check_grad(case: &Case) -> GradVerdict {
    check_grads(std::slice::from_ref(case)).remove(0)
}

/// The verdicts of `cases`, as [`check_grad`] gives them, with the
/// programs traced side by side: three compiles for the whole batch.
pub fn check_grads(cases: &[Case]) -> Vec<GradVerdict> {
    decide_rest(
        cases,
        |case| match not_comparable(&case.program) {
            Some(why) => Err(skip(why)),
            None => {
                let p = case.program.clone();
                let f: Func = Rc::new(move |a: &[Tensor]| build(&p, a));
                Ok((case.seed, case.args.as_slice(), f))
            }
        },
        check_fns,
    )
}

/// The function `f` at `args`, checked as [`check_grad`] checks a
/// program; `seed` chooses the cotangents and the direction.
pub fn check_fn(seed: u64, args: &[HostTensor], f: Func) -> GradVerdict {
    check_fns(vec![(seed, args, f)]).remove(0)
}

/// What [`run_grads`] did.
#[derive(Clone, Debug, Default)]
pub struct GradReport {
    /// Programs whose pullback was compared.
    pub checked: usize,
    /// Programs skipped, counted by reason.
    pub skipped: std::collections::BTreeMap<SkipKind, usize>,
    /// Mismatches: seed and message, by seed.
    pub mismatches: Vec<(u64, String)>,
}

/// Checks the programs of `seeds` in batches of `config.batch`
/// ([`check_grads`]) on `config.workers` threads, until the seeds run out
/// or, when given, `deadline` passes (no batch starts after it). A
/// program that differs in its batch is checked again alone, and only a
/// mismatch alone is shrunk (with `config.shrink`) and given to `found`
/// as it is found; one that differs only inside its batch is reported
/// unshrunk, with a message that says so.
pub fn run_grads(
    seeds: impl Iterator<Item = u64> + Send,
    config: &Config,
    deadline: Option<Instant>,
    found: &(dyn Fn(&Case, &str) + Sync),
) -> GradReport {
    let report = Mutex::new(GradReport::default());
    let work = |batch: Vec<u64>| {
        let verdicts = decide_rest(
            batch.iter(),
            |&seed| grad_case(seed).map_err(|e| skip_because(SkipKind::IllTyped, e)),
            |cases| {
                let verdicts = check_grads(&cases);
                cases
                    .iter()
                    .zip(verdicts)
                    .map(|(case, v)| match v {
                        GradVerdict::Mismatch(m) => alone(case, m, config.shrink, found),
                        v => v,
                    })
                    .collect()
            },
        );
        let mut r = report.lock().unwrap_or_else(|e| e.into_inner());
        for (seed, v) in batch.into_iter().zip(verdicts) {
            match v {
                GradVerdict::Agree => r.checked += 1,
                GradVerdict::Skipped(why) => *r.skipped.entry(why.kind).or_default() += 1,
                GradVerdict::Mismatch(m) => {
                    r.checked += 1;
                    r.mismatches.push((seed, m));
                }
            }
        }
    };
    in_batches(seeds, config, deadline, &work);
    let mut r = report.into_inner().unwrap_or_else(|e| e.into_inner());
    r.mismatches.sort_by_key(|m| m.0);
    r
}

/// The verdict of `case`, which differed in its batch with `message`,
/// checked alone: a mismatch alone is shrunk and given to `found`.
fn alone(
    case: &Case,
    message: String,
    budget: Budget,
    found: &(dyn Fn(&Case, &str) + Sync),
) -> GradVerdict {
    match check_grad(case) {
        GradVerdict::Mismatch(m) => {
            let fails = |c: &Case| match repeats_a_float(c) || holds_a_huge_float(c) {
                true => None,
                false => match check_grad(c) {
                    GradVerdict::Mismatch(m) => Some(m),
                    _ => None,
                },
            };
            let s = shrink_with(case, &m, budget, &fails);
            found(&s.case, &s.message);
            GradVerdict::Mismatch(m)
        }
        _ => {
            let m = format!("only inside its batch: {message}");
            found(case, &m);
            GradVerdict::Mismatch(m)
        }
    }
}

/// Panics unless the pullback and the tangents of `body` at `args` agree
/// with central differences (or the check is skipped, for a reason
/// printed), as [`check_grad`] decides; `seed` chooses the cotangents and
/// the direction. The gradient fuzzer prints its findings as tests calling
/// this.
#[track_caller]
pub fn assert_grad(
    args: &[HostTensor],
    seed: u64,
    body: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static,
) {
    match check_fn(seed, args, Rc::new(body)) {
        GradVerdict::Mismatch(m) => panic!("{m}"),
        GradVerdict::Skipped(why) => eprintln!("not checked: {why}"),
        GradVerdict::Agree => {}
    }
}
