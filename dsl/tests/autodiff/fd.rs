//! Central finite differences in f64 against the pullback.

use std::rc::Rc;

use tessel_dsl::autodiff::vjp;
use tessel_dsl::kernel::{Kernel, KernelConfig};
use tessel_dsl::{trace, HostTensor, Tensor, TensorSpec, F64};
use tessel_testing::{device, fresh_name};
use tessel_testing::{random, tensor, Rng};

/// A function under test: inputs to outputs.
pub type Func = Rc<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// Absolute and relative tolerance of a gradient against central
/// differences with step `H` in f64 (truncation ~H², rounding ~1e-16/H).
pub const ATOL: f64 = 1e-6;
/// See [`ATOL`].
pub const RTOL: f64 = 1e-5;
const H: f64 = 1e-6;

/// Random f64 data of `shape` in `[lo, hi)`.
pub fn data(seed: u64, shape: &[usize], lo: f64, hi: f64) -> HostTensor {
    random(&mut Rng::new(seed), shape, F64, lo, hi)
}

fn float_outputs(f: &Func, inputs: &[HostTensor]) -> Vec<(usize, TensorSpec)> {
    let params: Vec<(String, TensorSpec)> = inputs
        .iter()
        .enumerate()
        .map(|(i, h)| (format!("x{i}"), h.spec().clone()))
        .collect();
    let f2 = f.clone();
    let g = trace("specs", &params, KernelConfig::default(), move |a| f2(a))
        .unwrap_or_else(|e| panic!("forward failed to trace: {e}"));
    g.output_specs()
        .into_iter()
        .enumerate()
        .filter(|(_, s)| s.dtype.is_float())
        .collect()
}

/// The pullback of `f` at `inputs` for random output cotangents, checked
/// element by element against central differences of
/// `sum_i <f(x)_i, r_i>` for every floating-point input.
#[track_caller]
pub fn check(name: &str, f: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static, inputs: &[HostTensor]) {
    check_tol(name, f, inputs, ATOL, RTOL)
}

/// [`check`] with explicit tolerances.
#[track_caller]
pub fn check_tol(
    name: &str,
    f: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static,
    inputs: &[HostTensor],
    atol: f64,
    rtol: f64,
) {
    let f: Func = Rc::new(f);
    let outs = float_outputs(&f, inputs);
    let n_in = inputs.len();
    let rs: Vec<HostTensor> = outs
        .iter()
        .enumerate()
        .map(|(k, (_, s))| data(1000 + k as u64, &s.shape, -1.0, 1.0))
        .collect();
    let which: Vec<usize> = outs.iter().map(|(i, _)| *i).collect();

    let fl = f.clone();
    let which_l = which.clone();
    let loss = Kernel::new(fresh_name("fd_loss"), move |a: &[Tensor]| {
        let ys = fl(&a[..n_in]);
        let mut total = Tensor::scalar(0.0, F64);
        for (k, &i) in which_l.iter().enumerate() {
            let y = ys[i].cast(F64);
            let axes: Vec<isize> = (0..y.rank() as isize).collect();
            total = total + (y * a[n_in + k]).sum(&axes);
        }
        total
    });
    let fg = f.clone();
    let which_g = which.clone();
    let grads = Kernel::new(fresh_name("fd_grad"), move |a: &[Tensor]| {
        let xs: Vec<Tensor> = a[..n_in].to_vec();
        let (ys, pb) = vjp(|xs: Vec<Tensor>| fg(&xs), xs);
        let cts: Vec<Tensor> = ys
            .iter()
            .enumerate()
            .map(|(i, y)| match which_g.iter().position(|&w| w == i) {
                Some(k) => a[n_in + k].cast(y.dtype()),
                None => y.zeros_like(),
            })
            .collect();
        pb.call(cts)
    });
    let dev = device();
    let mut args: Vec<HostTensor> = inputs.to_vec();
    args.extend(rs.iter().cloned());
    let refs: Vec<&HostTensor> = args.iter().collect();
    let g = grads
        .run(&dev, &refs)
        .unwrap_or_else(|e| panic!("{name}: gradient kernel failed: {e}"));
    for (i, x) in inputs.iter().enumerate() {
        if !x.spec().dtype.is_float() {
            continue;
        }
        let got = g[i].to_f64_vec();
        let base = x.to_f64_vec();
        for j in 0..base.len() {
            let eval = |delta: f64| -> f64 {
                let mut v = base.clone();
                v[j] += delta;
                let mut a = args.clone();
                a[i] = tensor(&v, x.shape(), x.spec().dtype);
                let refs: Vec<&HostTensor> = a.iter().collect();
                let out = loss
                    .run(&dev, &refs)
                    .unwrap_or_else(|e| panic!("{name}: loss kernel failed: {e}"));
                out[0].to_f64_vec()[0]
            };
            let fd = (eval(H) - eval(-H)) / (2.0 * H);
            let err = (got[j] - fd).abs();
            assert!(
                err <= atol + rtol * fd.abs(),
                "{name}: d/dx{i}[{j}] = {} but central differences give {fd} (error {err:e})",
                got[j]
            );
        }
    }
}

/// Runs `body` once on `inputs` and returns its results.
#[track_caller]
pub fn eval(
    body: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static,
    inputs: &[HostTensor],
) -> Vec<HostTensor> {
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    Kernel::new(fresh_name("eval"), body)
        .run(&device(), &refs)
        .unwrap_or_else(|e| panic!("kernel failed: {e}"))
}
