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

use std::rc::Rc;

use tessel_dsl::autodiff::{jvp, vjp};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec};

use super::build::build;
use super::generate::generate;
use super::program::{Case, Inst, Op, Program};
use super::shrink::{shrink_with, Budget};
use super::ties::{not_comparable, untie_clamps};
use super::types::retype;
use crate::{device, fresh_name, Rng};

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

/// The verdict of a case skipped for `kind`.
fn skip(kind: SkipKind) -> GradVerdict {
    GradVerdict::Skipped(Skip { kind, detail: None })
}

/// The verdict of a case skipped for `kind`, because of the error `detail`.
fn skip_because(kind: SkipKind, detail: impl std::fmt::Display) -> GradVerdict {
    GradVerdict::Skipped(Skip {
        kind,
        detail: Some(detail.to_string()),
    })
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

/// The steps of the central differences, largest first.
const STEPS: [f64; 3] = [1e-3, 1e-5, 1e-7];
/// Relative tolerance of a directional derivative (of the sum of the
/// magnitudes of its terms).
const RTOL: f64 = 1e-5;

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

/// Random data of `spec` in `[-1, 1]`.
fn random_like(rng: &mut Rng, spec: &TensorSpec) -> HostTensor {
    HostTensor::from_fn(spec.clone(), |_| rng.uniform(-1.0, 1.0))
}

/// `sum_i <a_i, b_i>` and `sum_i sum_j |a_ij b_ij|`.
fn dot_and_scale(a: &[Vec<f64>], b: &[Vec<f64>]) -> (f64, f64) {
    let mut dot = 0.0;
    let mut scale = 0.0;
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            dot += p * q;
            scale += (p * q).abs();
        }
    }
    (dot, scale)
}

/// The loss `sum_k <y_k, r_k>` over the outputs `outs`: arguments, then
/// one `r_k` per output.
fn loss_kernel(f: &Func, n: usize, outs: &[usize]) -> Kernel<impl Fn(&[Tensor]) -> Vec<Tensor>> {
    let (f, outs) = (f.clone(), outs.to_vec());
    Kernel::new(fresh_name("grad_fuzz_loss"), move |a: &[Tensor]| {
        let ys = f(&a[..n]);
        let mut total = Tensor::scalar(0.0, DType::F64);
        for (j, &k) in outs.iter().enumerate() {
            let y = ys[k];
            let axes: Vec<isize> = (0..y.rank() as isize).collect();
            total = total + (y * a[n + j]).sum(&axes);
        }
        vec![total]
    })
}

/// The pullback of the program for the cotangents `r_k` of the outputs
/// `outs` (zeros for the others): arguments, then the `r_k`.
fn pullback_kernel(
    f: &Func,
    n: usize,
    outs: &[usize],
) -> Kernel<impl Fn(&[Tensor]) -> Vec<Tensor>> {
    let (f, outs) = (f.clone(), outs.to_vec());
    Kernel::new(fresh_name("grad_fuzz_grad"), move |a: &[Tensor]| {
        let (ys, pb) = vjp(|xs: Vec<Tensor>| f(&xs), a[..n].to_vec());
        let cts: Vec<Tensor> = ys
            .iter()
            .enumerate()
            .map(|(k, y)| match outs.iter().position(|&o| o == k) {
                Some(j) => a[n + j],
                None => y.zeros_like(),
            })
            .collect();
        pb.call(cts)
    })
}

/// The tangents of the outputs `outs` (`autodiff::jvp`, the transpose of
/// the pullback) along the direction of the float parameters `floats`:
/// arguments, then one direction per float parameter.
fn tangent_kernel(
    f: &Func,
    n: usize,
    outs: &[usize],
    floats: &[usize],
) -> Kernel<impl Fn(&[Tensor]) -> Vec<Tensor>> {
    let (f, outs, floats) = (f.clone(), outs.to_vec(), floats.to_vec());
    Kernel::new(fresh_name("grad_fuzz_jvp"), move |a: &[Tensor]| {
        let dirs: Vec<Tensor> = (0..n)
            .map(|i| match floats.iter().position(|&f| f == i) {
                Some(j) => a[n + j],
                None => a[i].zeros_like(),
            })
            .collect();
        let (_, ts) = jvp(|xs: Vec<Tensor>| f(&xs), a[..n].to_vec(), dirs);
        outs.iter().map(|&k| ts[k]).collect::<Vec<_>>()
    })
}

/// Checks the pullback of `case`'s program, and its tangents (the
/// pullback's transpose, so the pullback's own rules are exercised), against
/// central differences.
pub fn check_grad(case: &Case) -> GradVerdict {
    if let Some(why) = not_comparable(&case.program) {
        return skip(why);
    }
    let p = case.program.clone();
    check_fn(
        case.seed,
        &case.args,
        Rc::new(move |a: &[Tensor]| build(&p, a)),
    )
}

/// The function `f` at `args`, checked as [`check_grad`] checks a
/// program; `seed` chooses the cotangents and the direction.
pub fn check_fn(seed: u64, args: &[HostTensor], f: Func) -> GradVerdict {
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let traced = {
        let f = f.clone();
        Kernel::new(fresh_name("grad_fuzz_specs"), move |a: &[Tensor]| f(a)).trace(&specs)
    };
    let out_specs = match traced {
        Ok(g) => g.output_specs(),
        Err(e) => return skip_because(SkipKind::DoesNotTrace, e),
    };
    let outs: Vec<usize> = (0..out_specs.len())
        .filter(|&k| out_specs[k].dtype.is_float())
        .collect();
    let floats: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].dtype.is_float())
        .collect();
    if outs.is_empty() || floats.is_empty() {
        return skip(SkipKind::NoFloat);
    }
    let n = args.len();
    let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(7));
    let cts: Vec<HostTensor> = outs
        .iter()
        .map(|&k| random_like(&mut rng, &out_specs[k]))
        .collect();
    let dirs: Vec<HostTensor> = floats
        .iter()
        .map(|&i| random_like(&mut rng, &specs[i]))
        .collect();
    let dirs_f64: Vec<Vec<f64>> = dirs.iter().map(HostTensor::to_f64_vec).collect();

    let dev = device();
    let loss = loss_kernel(&f, n, &outs);
    let inputs = args;
    let mut args: Vec<HostTensor> = inputs.to_vec();
    args.extend(cts.iter().cloned());
    let run_loss = |args: &[HostTensor]| -> Result<f64, String> {
        let refs: Vec<&HostTensor> = args.iter().collect();
        let out = loss.run(&dev, &refs).map_err(|e| e.to_string())?;
        Ok(out[0].to_f64_vec()[0])
    };
    let l0 = match run_loss(&args) {
        Ok(l) if l.is_finite() => l,
        Ok(_) => return skip(SkipKind::LossNotFinite),
        Err(e) => return skip_because(SkipKind::LossFails, e),
    };

    let refs: Vec<&HostTensor> = args.iter().collect();
    let g = match pullback_kernel(&f, n, &outs).run(&dev, &refs) {
        Ok(g) => g,
        Err(e) => return GradVerdict::Mismatch(format!("the gradient does not run: {e}")),
    };
    let g: Vec<Vec<f64>> = floats.iter().map(|&i| g[i].to_f64_vec()).collect();
    let mut tangent_args: Vec<HostTensor> = inputs.to_vec();
    tangent_args.extend(dirs.iter().cloned());
    let refs: Vec<&HostTensor> = tangent_args.iter().collect();
    let t = match tangent_kernel(&f, n, &outs, &floats).run(&dev, &refs) {
        Ok(t) => t,
        Err(e) => return GradVerdict::Mismatch(format!("the tangents do not run: {e}")),
    };
    let t: Vec<Vec<f64>> = t.iter().map(HostTensor::to_f64_vec).collect();
    let r: Vec<Vec<f64>> = cts.iter().map(HostTensor::to_f64_vec).collect();
    if g.iter().chain(&t).flatten().any(|x| !x.is_finite()) {
        return skip(SkipKind::GradientNotFinite);
    }
    let (along, scale) = dot_and_scale(&g, &dirs_f64);
    let (tangent, tangent_scale) = dot_and_scale(&t, &r);
    let scale = scale.max(tangent_scale);

    let at: Vec<Vec<f64>> = floats.iter().map(|&i| inputs[i].to_f64_vec()).collect();
    let moved = |h: f64| -> Result<f64, String> {
        let mut a = args.clone();
        for ((&i, x), u) in floats.iter().zip(&at).zip(&dirs_f64) {
            let v: Vec<f64> = x.iter().zip(u).map(|(x, u)| x + h * u).collect();
            a[i] = HostTensor::from_fn(inputs[i].spec().clone(), |j| v[j]);
        }
        run_loss(&a)
    };
    let mut fds = Vec::new();
    for h in STEPS {
        let fd = match (moved(h), moved(-h)) {
            (Ok(up), Ok(down)) => (up - down) / (2.0 * h),
            (Err(e), _) | (_, Err(e)) => return skip_because(SkipKind::LossFails, e),
        };
        if !fd.is_finite() {
            return skip(SkipKind::MovedLossNotFinite);
        }
        fds.push((h, fd));
    }
    // What a step may add: truncation (relative) and rounding of L.
    let tol = |h: f64, fd: f64| RTOL * (scale + fd.abs()) + 1e-14 * (1.0 + l0.abs()) / h + 1e-12;
    let agrees = |x: f64| fds.iter().any(|&(h, fd)| (x - fd).abs() <= tol(h, fd));
    if agrees(along) && agrees(tangent) {
        return GradVerdict::Agree;
    }
    let (_, mid) = fds[1];
    let steady = fds.iter().all(|&(h, fd)| (fd - mid).abs() <= tol(h, fd));
    if !steady {
        return skip(SkipKind::Kink);
    }
    GradVerdict::Mismatch(format!(
        "<grad, u> = {along:e} and <jvp(u), r> = {tangent:e}, but central differences give {} (loss \
         {l0:e}, sum of |terms| {scale:e})",
        fds.iter()
            .map(|(h, fd)| format!("{fd:e} at h = {h:e}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// What [`run_grads`] did.
#[derive(Clone, Debug, Default)]
pub struct GradReport {
    /// Programs whose pullback was compared.
    pub checked: usize,
    /// Programs skipped, counted by reason.
    pub skipped: std::collections::BTreeMap<SkipKind, usize>,
    /// Mismatches: seed and message.
    pub mismatches: Vec<(u64, String)>,
}

/// Checks the programs of `seeds` one after the other until they run out
/// or `deadline` passes; `found` sees each mismatching case, shrunk, and
/// its message as it is found.
pub fn run_grads(
    seeds: impl IntoIterator<Item = u64>,
    deadline: Option<std::time::Instant>,
    found: &dyn Fn(&Case, &str),
) -> GradReport {
    let mut report = GradReport::default();
    for seed in seeds {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            break;
        }
        let verdict = match grad_case(seed) {
            Ok(case) => {
                let v = check_grad(&case);
                if let GradVerdict::Mismatch(m) = &v {
                    let fails = |c: &Case| match check_grad(c) {
                        GradVerdict::Mismatch(m) => Some(m),
                        _ => None,
                    };
                    let s = shrink_with(&case, m, Budget::default(), &fails);
                    found(&s.case, &s.message);
                }
                v
            }
            Err(e) => skip_because(SkipKind::IllTyped, e),
        };
        match verdict {
            GradVerdict::Agree => report.checked += 1,
            GradVerdict::Skipped(why) => *report.skipped.entry(why.kind).or_default() += 1,
            GradVerdict::Mismatch(m) => {
                report.checked += 1;
                report.mismatches.push((seed, m));
            }
        }
    }
    report
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
