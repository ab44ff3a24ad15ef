//! Gradients inside macro kernels: the guide's examples, run and checked
//! against the closed form of a least-squares gradient and against central
//! differences of a plain Rust moving average (a `scan`).

use tessel::autodiff::value_and_grad;
use tessel::prelude::*;

#[cpu_kernel(precision = "highest")]
fn loss_and_grads(w: Tensor, b: Tensor, x: Tensor, y: Tensor) -> (Tensor, Tensor, Tensor) {
    // The arguments to differentiate are the closure's arguments; captured tensors (x, y) are constants.
    let (loss, (dw, db)) = value_and_grad(
        |(w, b): (Tensor, Tensor)| (x.matmul(w) + b - y).square().mean(&[0, 1]),
        (w, b),
    );
    (loss, dw, db)
}

#[test]
fn least_squares_gradient_matches_its_closed_form() {
    let (n, d, m) = (5usize, 3usize, 2usize);
    let f = |i: usize, s: f64| (i as f64 * 0.37 + s).sin() * 0.5;
    let xv: Vec<f64> = (0..n * d).map(|i| f(i, 0.1)).collect();
    let wv: Vec<f64> = (0..d * m).map(|i| f(i, 0.7)).collect();
    let bv: Vec<f64> = (0..m).map(|i| f(i, 1.3)).collect();
    let yv: Vec<f64> = (0..n * m).map(|i| f(i, 2.1)).collect();
    let h = |v: &[f64], s: &[usize]| HostTensor::from_vec(v.to_vec(), s.to_vec()).unwrap();
    let dev = Device::cpu().unwrap();
    let (loss, dw, db) = loss_and_grads::run(
        &dev,
        &h(&wv, &[d, m]),
        &h(&bv, &[m]),
        &h(&xv, &[n, d]),
        &h(&yv, &[n, m]),
    )
    .unwrap();
    // r = xw + b - y; loss = mean(r^2); dw = 2/(nm) x^T r; db = 2/(nm) sum_rows r.
    let mut r = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            let mut acc = bv[j] - yv[i * m + j];
            for k in 0..d {
                acc += xv[i * d + k] * wv[k * m + j];
            }
            r[i * m + j] = acc;
        }
    }
    let scale = 2.0 / (n * m) as f64;
    let want_loss: f64 = r.iter().map(|v| v * v).sum::<f64>() / (n * m) as f64;
    assert!((loss.to_vec::<f64>().unwrap()[0] - want_loss).abs() < 1e-12);
    let dw = dw.to_vec::<f64>().unwrap();
    for k in 0..d {
        for j in 0..m {
            let want: f64 = (0..n).map(|i| xv[i * d + k] * r[i * m + j]).sum::<f64>() * scale;
            assert!((dw[k * m + j] - want).abs() < 1e-12, "dw[{k},{j}]");
        }
    }
    let db = db.to_vec::<f64>().unwrap();
    for j in 0..m {
        let want: f64 = (0..n).map(|i| r[i * m + j]).sum::<f64>() * scale;
        assert!((db[j] - want).abs() < 1e-12, "db[{j}]");
    }
}

/// A traced `for` over a Rust range inside a differentiated closure: the
/// loop knows its trip count, so its backward pass saves the carries.
#[cpu_kernel(precision = "highest")]
fn horner_grad(w: Tensor, x: Tensor) -> (Tensor, Tensor) {
    value_and_grad(
        |w: Tensor| {
            let mut acc = x.zeros_like();
            for _ in 0..4 {
                acc = acc * w + x;
            }
            acc.sum(&[0])
        },
        w,
    )
}

#[test]
fn gradient_through_a_traced_range_loop() {
    let dev = Device::cpu().unwrap();
    let w = HostTensor::from_vec(vec![0.5f64, -1.25, 2.0], [3]).unwrap();
    let x = HostTensor::from_vec(vec![1.5f64, 0.25, -0.75], [3]).unwrap();
    let (v, g) = horner_grad::run(&dev, &w, &x).unwrap();
    let (wv, xv) = (w.to_vec::<f64>().unwrap(), x.to_vec::<f64>().unwrap());
    let want_v: f64 = (0..3)
        .map(|i| xv[i] * (wv[i].powi(3) + wv[i].powi(2) + wv[i] + 1.0))
        .sum();
    assert!((v.to_vec::<f64>().unwrap()[0] - want_v).abs() < 1e-12);
    let g = g.to_vec::<f64>().unwrap();
    for i in 0..3 {
        let want = xv[i] * (3.0 * wv[i] * wv[i] + 2.0 * wv[i] + 1.0);
        assert!((g[i] - want).abs() < 1e-12, "d/dw[{i}]: {} vs {want}", g[i]);
    }
}

/// A loss kernel: the companion differentiates it.
#[cpu_kernel(precision = "highest")]
fn mse(w: Tensor, b: Tensor, x: Tensor, y: Tensor, scale: f64) -> Tensor {
    (x.matmul(w) + b - y).square().mean(&[0, 1]) * scale
}

#[test]
fn the_companion_differentiates_a_loss_kernel() {
    let dev = Device::cpu().unwrap();
    let h = |v: Vec<f64>, s: &[usize]| HostTensor::from_vec(v, s.to_vec()).unwrap();
    let w = h(vec![0.5, -0.25, 1.0, 0.75, -1.5, 0.125], &[3, 2]);
    let b = h(vec![0.1, -0.2], &[2]);
    let x = h(
        vec![
            1.0, 2.0, -1.0, 0.5, 0.0, 1.5, -0.5, 1.0, 2.0, 0.25, 0.75, -1.25,
        ],
        &[4, 3],
    );
    let y = h(vec![0.3, -0.6, 1.2, 0.0, -0.9, 0.45, 0.15, 2.0], &[4, 2]);
    // In the order asked for, and equal to the in-kernel gradient.
    let (v, g) = mse::value_and_grad(&dev, &["b", "w"], &w, &b, &x, &y, 2.0).unwrap();
    let (v2, dw, db) = loss_and_grads::run(&dev, &w, &b, &x, &y).unwrap();
    let close = |a: &HostTensor, b: &HostTensor, k: f64| {
        let (a, b) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
        a.iter().zip(&b).all(|(p, q)| (p - k * q).abs() < 1e-12)
    };
    assert!(close(&v, &v2, 2.0));
    assert_eq!(g.len(), 2);
    assert!(close(&g[0], &db, 2.0) && close(&g[1], &dw, 2.0));
    // A name that is not a tensor or tree parameter is a kernel error naming it.
    for bad in ["scale", "nope"] {
        let e = mse::value_and_grad(&dev, &[bad], &w, &b, &x, &y, 2.0).unwrap_err();
        let k = e.as_kernel_error().expect("a kernel error");
        assert!(
            k.message.contains(&format!(
                "`{bad}` is not a tensor or tree parameter of `mse`"
            )),
            "{k}"
        );
    }
}

/// A kernel returning two tensors cannot be differentiated as a loss.
#[cpu_kernel]
fn two(x: Tensor) -> (Tensor, Tensor) {
    (x.sum(&[0]), x.sum(&[0]))
}

#[test]
fn value_and_grad_needs_one_output() {
    let dev = Device::cpu().unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let e = two::value_and_grad(&dev, &["x"], &x).unwrap_err();
    assert!(e.to_string().contains("returns 2 tensors"), "{e}");
}

/// An exponential moving average over the rows of `xs` with a learned decay
/// `a` (a scalar): the smoothed rows, and the gradient of their squared sum
/// with respect to `a`.
#[cpu_kernel]
fn ema_and_decay_grad(xs: Tensor, a: Tensor) -> (Tensor, Tensor) {
    let smooth = |a: Tensor| {
        let h0 = xs.at(0).zeros_like();
        scan(h0, xs, |h: Tensor, x: Tensor| {
            let h = h * a + x * (1.0 - a);
            (h, h)
        })
        .1
    };
    let (_, da) = value_and_grad(|a: Tensor| smooth(a).square().sum(&[0, 1]), a);
    (smooth(a), da)
}

#[test]
fn a_scan_in_a_macro_kernel_and_its_gradient() {
    let (n, d) = (7usize, 3usize);
    let xv: Vec<f64> = (0..n * d).map(|i| (i as f64 * 0.61).cos()).collect();
    let ema = |a: f64| -> Vec<f64> {
        let mut h = vec![0.0; d];
        let mut ys = Vec::new();
        for t in 0..n {
            for j in 0..d {
                h[j] = h[j] * a + xv[t * d + j] * (1.0 - a);
            }
            ys.extend(&h);
        }
        ys
    };
    let loss = |a: f64| ema(a).iter().map(|v| v * v).sum::<f64>();
    let a = 0.7;
    let dev = Device::cpu().unwrap();
    let xs = HostTensor::from_vec(xv.clone(), vec![n, d]).unwrap();
    let at = HostTensor::from_vec(vec![a], vec![]).unwrap();
    let (ys, da) = ema_and_decay_grad::run(&dev, &xs, &at).unwrap();
    for (i, (g, w)) in ys.to_vec::<f64>().unwrap().iter().zip(ema(a)).enumerate() {
        assert!((g - w).abs() < 1e-12, "ys[{i}] = {g}, want {w}");
    }
    // Central differences in f64: truncation ~1e-12, rounding ~1e-10.
    let h = 1e-6;
    let fd = (loss(a + h) - loss(a - h)) / (2.0 * h);
    let got = da.to_vec::<f64>().unwrap()[0];
    assert!(
        (got - fd).abs() < 1e-7 * (1.0 + fd.abs()),
        "d/da = {got}, central differences give {fd}"
    );
}
