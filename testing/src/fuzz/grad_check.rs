//! Checking the gradients of several functions at once: each function's
//! loss, pullback and tangents are traced side by side into one kernel
//! each, so that XLA compiles three programs for a whole batch, and the
//! central differences of every function come from the same runs of the
//! batch's loss kernel. A batch that fails as a whole (an error on one
//! side) is checked one function at a time instead, where the error is
//! the verdict of the function that raised it.

use tessel_dsl::autodiff::{jvp, vjp};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec};

use super::grad::{Func, GradVerdict, Skip, SkipKind};
use crate::{device, fresh_name, Rng};

/// The steps of the central differences, largest first.
const STEPS: [f64; 3] = [1e-3, 1e-5, 1e-7];
/// Relative tolerance of a directional derivative (of the sum of the
/// magnitudes of its terms).
const RTOL: f64 = 1e-5;

/// The verdict of a case skipped for `kind`.
pub(super) fn skip(kind: SkipKind) -> GradVerdict {
    GradVerdict::Skipped(Skip { kind, detail: None })
}

/// The verdict of a case skipped for `kind`, because of the error `detail`.
pub(super) fn skip_because(kind: SkipKind, detail: impl std::fmt::Display) -> GradVerdict {
    GradVerdict::Skipped(Skip {
        kind,
        detail: Some(detail.to_string()),
    })
}

/// A function to check, with what its seed chose: the cotangents of its
/// float outputs and the direction of its float arguments.
#[derive(Clone)]
struct Prepared {
    f: Func,
    inputs: Vec<HostTensor>,
    /// The float outputs.
    outs: Vec<usize>,
    /// The float parameters.
    floats: Vec<usize>,
    /// One cotangent per float output.
    cts: Vec<HostTensor>,
    /// One direction per float parameter.
    dirs: Vec<HostTensor>,
}

/// Random data of `spec` in `[-1, 1]`.
fn random_like(rng: &mut Rng, spec: &TensorSpec) -> HostTensor {
    HostTensor::from_fn(spec.clone(), |_| rng.uniform(-1.0, 1.0))
}

/// Traces `f` for `args`' specs and draws its cotangents and direction
/// from `seed`; a function with nothing to differentiate is skipped.
fn prepare(seed: u64, args: &[HostTensor], f: Func) -> Result<Prepared, GradVerdict> {
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let traced = {
        let f = f.clone();
        Kernel::new(fresh_name("grad_fuzz_specs"), move |a: &[Tensor]| f(a)).trace(&specs)
    };
    let out_specs = match traced {
        Ok(g) => g.output_specs(),
        Err(e) => return Err(skip_because(SkipKind::DoesNotTrace, e)),
    };
    let outs: Vec<usize> = (0..out_specs.len())
        .filter(|&k| out_specs[k].dtype.is_float())
        .collect();
    let floats: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].dtype.is_float())
        .collect();
    if outs.is_empty() || floats.is_empty() {
        return Err(skip(SkipKind::NoFloat));
    }
    let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(7));
    let cts = outs
        .iter()
        .map(|&k| random_like(&mut rng, &out_specs[k]))
        .collect();
    let dirs = floats
        .iter()
        .map(|&i| random_like(&mut rng, &specs[i]))
        .collect();
    Ok(Prepared {
        f,
        inputs: args.to_vec(),
        outs,
        floats,
        cts,
        dirs,
    })
}

/// A kernel whose arguments are, for each function in turn, its inputs
/// and then `extra(p)` more, and whose outputs are `body(p, inputs,
/// extra)` for each function in turn.
fn batch_kernel(
    name: &str,
    items: &[Prepared],
    extra: fn(&Prepared) -> usize,
    body: fn(&Prepared, &[Tensor], &[Tensor]) -> Vec<Tensor>,
) -> Kernel<impl Fn(&[Tensor]) -> Vec<Tensor>> {
    let items = items.to_vec();
    Kernel::new(fresh_name(name), move |a: &[Tensor]| {
        let mut outs = Vec::new();
        let mut at = 0;
        for p in &items {
            let (n, m) = (p.inputs.len(), extra(p));
            outs.extend(body(p, &a[at..at + n], &a[at + n..at + n + m]));
            at += n + m;
        }
        outs
    })
}

/// The loss `sum_k <y_k, r_k>` over the float outputs `y_k`, for the
/// cotangents `r_k`.
fn loss(p: &Prepared, xs: &[Tensor], rs: &[Tensor]) -> Vec<Tensor> {
    let ys = (p.f)(xs);
    let mut total = Tensor::scalar(0.0, DType::F64);
    for (&k, &r) in p.outs.iter().zip(rs) {
        let y = ys[k];
        let axes: Vec<isize> = (0..y.rank() as isize).collect();
        total = total + (y * r).sum(&axes);
    }
    vec![total]
}

/// The pullback's values at the float parameters, for the cotangents
/// `rs` of the float outputs (zeros for the others).
fn pullback(p: &Prepared, xs: &[Tensor], rs: &[Tensor]) -> Vec<Tensor> {
    let (ys, pb) = vjp(|v: Vec<Tensor>| (p.f)(&v), xs.to_vec());
    let cts: Vec<Tensor> = ys
        .iter()
        .enumerate()
        .map(|(k, y)| match p.outs.iter().position(|&o| o == k) {
            Some(j) => rs[j],
            None => y.zeros_like(),
        })
        .collect();
    let g = pb.call(cts);
    p.floats.iter().map(|&i| g[i]).collect()
}

/// The tangents of the float outputs (`autodiff::jvp`, the transpose of
/// the pullback) along the directions `us` of the float parameters.
fn tangents(p: &Prepared, xs: &[Tensor], us: &[Tensor]) -> Vec<Tensor> {
    let dirs: Vec<Tensor> = (0..xs.len())
        .map(|i| match p.floats.iter().position(|&f| f == i) {
            Some(j) => us[j],
            None => xs[i].zeros_like(),
        })
        .collect();
    let (_, ts) = jvp(|v: Vec<Tensor>| (p.f)(&v), xs.to_vec(), dirs);
    p.outs.iter().map(|&k| ts[k]).collect()
}

/// What one function's runs gave: its loss at the point, its gradient,
/// its tangents, and its loss at each point moved by `±h`.
struct Runs {
    l0: f64,
    grad: Vec<Vec<f64>>,
    tangents: Vec<Vec<f64>>,
    /// `(h, L(x + h u), L(x - h u))` for each step.
    moved: Vec<(f64, f64, f64)>,
}

/// The arguments of the loss kernel, with each function's float
/// parameters moved by `h` along its direction.
fn loss_args(items: &[Prepared], h: f64) -> Vec<HostTensor> {
    let mut args = Vec::new();
    for p in items {
        let mut inputs = p.inputs.clone();
        if h != 0.0 {
            for (&i, u) in p.floats.iter().zip(&p.dirs) {
                let (x, u) = (inputs[i].to_f64_vec(), u.to_f64_vec());
                let v: Vec<f64> = x.iter().zip(&u).map(|(x, u)| x + h * u).collect();
                inputs[i] = HostTensor::from_fn(inputs[i].spec().clone(), |j| v[j]);
            }
        }
        args.extend(inputs);
        args.extend(p.cts.iter().cloned());
    }
    args
}

/// Runs `k` on `device` for `args`.
fn run_on(
    device: &Device,
    k: &Kernel<impl Fn(&[Tensor]) -> Vec<Tensor>>,
    args: &[HostTensor],
) -> Result<Vec<HostTensor>, String> {
    let refs: Vec<&HostTensor> = args.iter().collect();
    k.run(device, &refs).map_err(|e| e.to_string())
}

/// Runs the batch's loss, pullback and tangent kernels and splits the
/// results by function; on an error, the verdict a function alone gets
/// for it.
fn run_batch(items: &[Prepared]) -> Result<Vec<Runs>, GradVerdict> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let dev = device();
    let loss_k = batch_kernel("grad_fuzz_loss", items, |p| p.outs.len(), loss);
    let losses = |h: f64| -> Result<Vec<f64>, GradVerdict> {
        let out = run_on(&dev, &loss_k, &loss_args(items, h))
            .map_err(|e| skip_because(SkipKind::LossFails, e))?;
        Ok(out.iter().map(|l| l.to_f64_vec()[0]).collect())
    };
    let l0 = losses(0.0)?;
    if items.len() == 1 && !l0[0].is_finite() {
        return Err(skip(SkipKind::LossNotFinite));
    }
    let pullback_k = batch_kernel("grad_fuzz_grad", items, |p| p.outs.len(), pullback);
    let g = run_on(&dev, &pullback_k, &loss_args(items, 0.0))
        .map_err(|e| GradVerdict::Mismatch(format!("the gradient does not run: {e}")))?;
    let tangent_k = batch_kernel("grad_fuzz_jvp", items, |p| p.floats.len(), tangents);
    let tangent_args: Vec<HostTensor> = items
        .iter()
        .flat_map(|p| p.inputs.iter().chain(&p.dirs).cloned())
        .collect();
    let t = run_on(&dev, &tangent_k, &tangent_args)
        .map_err(|e| GradVerdict::Mismatch(format!("the tangents do not run: {e}")))?;
    let mut moved = Vec::new();
    for h in STEPS {
        moved.push((h, losses(h)?, losses(-h)?));
    }
    let (mut g, mut t) = (g.iter(), t.iter());
    let runs = items
        .iter()
        .enumerate()
        .map(|(j, p)| Runs {
            l0: l0[j],
            grad: g
                .by_ref()
                .take(p.floats.len())
                .map(HostTensor::to_f64_vec)
                .collect(),
            tangents: t
                .by_ref()
                .take(p.outs.len())
                .map(HostTensor::to_f64_vec)
                .collect(),
            moved: moved
                .iter()
                .map(|(h, up, down)| (*h, up[j], down[j]))
                .collect(),
        })
        .collect();
    Ok(runs)
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

/// Compares one function's pullback and tangents with its central
/// differences.
fn judge(p: &Prepared, r: &Runs) -> GradVerdict {
    let l0 = r.l0;
    if !l0.is_finite() {
        return skip(SkipKind::LossNotFinite);
    }
    if r.grad
        .iter()
        .chain(&r.tangents)
        .flatten()
        .any(|x| !x.is_finite())
    {
        return skip(SkipKind::GradientNotFinite);
    }
    let dirs: Vec<Vec<f64>> = p.dirs.iter().map(HostTensor::to_f64_vec).collect();
    let cts: Vec<Vec<f64>> = p.cts.iter().map(HostTensor::to_f64_vec).collect();
    let (along, scale) = dot_and_scale(&r.grad, &dirs);
    let (tangent, tangent_scale) = dot_and_scale(&r.tangents, &cts);
    let scale = scale.max(tangent_scale);
    let mut fds = Vec::new();
    for &(h, up, down) in &r.moved {
        let fd = (up - down) / (2.0 * h);
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

/// The verdicts of the functions `fns` (each a seed, which chooses the
/// cotangents and the direction, the arguments, and the function), in
/// order, each the one [`check_fn`](super::grad::check_fn) gives it alone;
/// see [`check_grad`](super::grad::check_grad).
pub fn check_fns(fns: Vec<(u64, &[HostTensor], Func)>) -> Vec<GradVerdict> {
    decide_rest(
        fns,
        |(seed, args, f)| prepare(seed, args, f),
        |items| match run_batch(&items) {
            Ok(runs) => items.iter().zip(&runs).map(|(p, r)| judge(p, r)).collect(),
            Err(v) if items.len() == 1 => vec![v],
            Err(_) => items
                .iter()
                .map(|p| match run_batch(std::slice::from_ref(p)) {
                    Ok(runs) => judge(p, &runs[0]),
                    Err(v) => v,
                })
                .collect(),
        },
    )
}

/// The verdicts of `xs`, in order: those `early` decides alone (its
/// error), and the others from one call of `rest` on what `early` made of
/// them (one verdict each, in order).
pub(super) fn decide_rest<X, T>(
    xs: impl IntoIterator<Item = X>,
    mut early: impl FnMut(X) -> Result<T, GradVerdict>,
    rest: impl FnOnce(Vec<T>) -> Vec<GradVerdict>,
) -> Vec<GradVerdict> {
    let mut verdicts = Vec::new();
    let mut items = Vec::new();
    let mut slots = Vec::new();
    for x in xs {
        match early(x) {
            Ok(t) => {
                slots.push(verdicts.len());
                items.push(t);
                verdicts.push(None);
            }
            Err(v) => verdicts.push(Some(v)),
        }
    }
    for (slot, v) in slots.into_iter().zip(rest(items)) {
        verdicts[slot] = Some(v);
    }
    verdicts.into_iter().flatten().collect()
}
