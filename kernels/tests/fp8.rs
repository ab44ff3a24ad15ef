//! FP8 matrix products with delayed scaling: values within FP8 precision of
//! the exact products (e4m3: 3 mantissa bits; e5m2: 2), scales taken from
//! the histories (not the current amax), histories updated with the current
//! amax, the cotangent history returned as its gradient.

extern crate tessel_dsl as tessel;

use tessel::autodiff::vjp;
use tessel::prelude::*;
use tessel_kernels::fp8::{fp8_matmul, Fp8History};
use tessel_testing::{random, Rng};

/// Runs `fp8_matmul` and its pullback: (y, x history, w history, dx, dw,
/// new cotangent history).
fn step(dev: &Device, hosts: &[&HostTensor], margin: i32) -> Vec<HostTensor> {
    let k = tessel::kernel::Kernel::new(format!("fp8_step_{margin}"), move |a: &[Tensor]| {
        let (xh, wh) = (a[3], a[4]);
        let (outs, pb) = vjp(
            |p: Vec<Tensor>| {
                let hist = Fp8History {
                    x: xh,
                    w: wh,
                    grad: p[2],
                };
                let (y, next) = fp8_matmul(p[0], p[1], hist, margin);
                vec![y, next.x, next.w]
            },
            vec![a[0], a[1], a[5]],
        );
        let zeros = |t: Tensor| Tensor::zeros(t.shape(), t.dtype());
        let g = pb.call(vec![a[2], zeros(outs[1]), zeros(outs[2])]);
        vec![outs[0], outs[1], outs[2], g[0], g[1], g[2]]
    });
    k.run(dev, hosts).unwrap()
}

fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

fn transpose(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..r * c).map(|i| a[(i % r) * c + i / r]).collect()
}

/// `|got - want| <= rel · Σ|a||b|` per element (the rounding of each
/// operand is relative).
fn close_products(what: &str, got: &[f64], want: &[f64], bound: &[f64], rel: f64) {
    for (i, ((g, w), b)) in got.iter().zip(want).zip(bound).enumerate() {
        assert!((g - w).abs() <= rel * b + 1e-12, "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn delayed_scaling_products_histories_and_gradients() {
    let dev = Device::cpu().unwrap();
    let (m, k, n, h) = (6, 24, 5, 4);
    let mut rng = Rng::new(3);
    let x = random(&mut rng, &[m, k], F32, -3.0, 3.0);
    let w = random(&mut rng, &[k, n], F32, -0.5, 0.5);
    let dout = random(&mut rng, &[m, n], F32, -1e-3, 1e-3);
    // Histories from earlier steps: the scales come from their maxima.
    let hist = |v: [f32; 4]| HostTensor::from_vec(v.to_vec(), vec![h]).unwrap();
    let (xh, wh, gh) = (
        hist([2.5, 3.0, 1.0, 0.0]),
        hist([0.5, 0.4, 0.0, 0.0]),
        hist([0.0; 4]),
    );
    let out = step(&dev, &[&x, &w, &dout, &xh, &wh, &gh], 0);
    let (xv, wv, dv) = (x.to_f64_vec(), w.to_f64_vec(), dout.to_f64_vec());
    let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    // Forward: e4m3 keeps 3 mantissa bits (relative rounding <= 2^-4 per operand).
    close_products(
        "y",
        &out[0].to_f64_vec(),
        &matmul(&xv, &wv, m, k, n),
        &matmul(&abs(&xv), &abs(&wv), m, k, n),
        2.0 * 0.0625,
    );
    // Histories: the current amax pushed in front.
    let amax = |v: &[f64]| v.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    let xh2 = out[1].to_f64_vec();
    assert_eq!(xh2[1..], [2.5, 3.0, 1.0]);
    assert!((xh2[0] - amax(&xv)).abs() < 1e-6);
    let wh2 = out[2].to_f64_vec();
    assert!((wh2[0] - amax(&wv)).abs() < 1e-6 && wh2[1..] == [0.5, f64::from(0.4f32), 0.0]);
    // Backward: dx = dout · wᵀ, dw = xᵀ · dout, with e5m2 cotangents
    // (relative rounding <= 2^-3), and the cotangent history as gradient.
    let wt = transpose(&wv, k, n);
    close_products(
        "dx",
        &out[3].to_f64_vec(),
        &matmul(&dv, &wt, m, n, k),
        &matmul(&abs(&dv), &abs(&wt), m, n, k),
        0.125 + 0.0625 + 0.01,
    );
    let xt = transpose(&xv, m, k);
    close_products(
        "dw",
        &out[4].to_f64_vec(),
        &matmul(&xt, &dv, k, m, n),
        &matmul(&abs(&xt), &abs(&dv), k, m, n),
        0.125 + 0.0625 + 0.01,
    );
    let gh2 = out[5].to_f64_vec();
    assert!((gh2[0] - amax(&dv)).abs() < 1e-9 && gh2[1..] == [0.0, 0.0, 0.0]);
}

#[test]
fn a_stale_history_saturates_instead_of_overflowing() {
    // The history says amax 1, the operand reaches 3: with the delayed scale
    // 448 the large values clamp to ±448 (they saturate; nothing is inf).
    let dev = Device::cpu().unwrap();
    let x = HostTensor::from_vec(vec![3.0f32, 0.5, -3.0, 1.0], vec![2, 2]).unwrap();
    let w = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], vec![2, 2]).unwrap();
    let dout = HostTensor::from_vec(vec![0.0f32; 4], vec![2, 2]).unwrap();
    let h = |v: f32| HostTensor::from_vec(vec![v, 0.0], vec![2]).unwrap();
    let out = step(&dev, &[&x, &w, &dout, &h(1.0), &h(1.0), &h(0.0)], 0);
    // 3 · 448 clamps to 448, unscaled back to 1.
    let y = out[0].to_f64_vec();
    assert_eq!(y, vec![1.0, 0.5, -1.0, 1.0]);
    // The next step's history knows the true amax.
    assert_eq!(out[1].to_f64_vec()[0], 3.0);
}
