//! Dynamic loss scaling for f16: small gradients survive that underflow
//! unscaled, an overflowing step is flagged and shrinks the scale, finite
//! steps grow it after the growth interval.

extern crate tessel_dsl as tessel;

use tessel::prelude::*;
use tessel_kernels::mixed::{apply_if_finite, scaled_value_and_grad, DynamicLossScale};

/// One SGD step of `sum(w · x) · 1e-4` on f16 weights, with the loss
/// scaled; returns (new w, gradient (f32), finite, scale, good steps).
#[cpu_kernel]
fn sgd_step(
    w: Tensor,
    x: Tensor,
    scale: Tensor,
    good: Tensor,
    interval: u32,
) -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
    let policy = DynamicLossScale {
        growth_interval: interval,
        ..DynamicLossScale::default()
    };
    let s = scaled_value_and_grad(
        |p: Vec<Tensor>| (p[0] * x).sum(&[0]) * 1e-4,
        vec![w],
        scale,
        good,
        &policy,
    );
    let updated = (w.cast(F32) - s.grads[0] * 0.5).cast(F16);
    let w = apply_if_finite(s.finite, &[updated], &[w])[0];
    (w, s.grads[0], s.finite, s.scale, s.good_steps)
}

fn halfs(v: &[f64]) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new([v.len()], F16), |i| v[i])
}

#[test]
fn scaling_keeps_small_f16_gradients_and_backs_off_on_overflow() {
    let dev = Device::cpu().unwrap();
    let w = halfs(&[1.0, -2.0, 0.5, 3.0]);
    let x = halfs(&[1e-4, 2e-4, -1.5e-4, 2.5e-4]);
    let xs = x.to_f64_vec();
    let step = |scale: f32, good: i32, interval: u32| {
        sgd_step::run(
            &dev,
            &w,
            &x,
            &HostTensor::scalar(scale),
            &HostTensor::scalar(good),
            interval,
        )
        .unwrap()
    };
    // Unscaled, x · 1e-4 (< 3e-8, under half f16's smallest subnormal)
    // underflows: every gradient is 0.
    let (_, g, finite, ..) = step(1.0, 0, 2000);
    assert!(
        g.to_f64_vec().iter().all(|&v| v == 0.0),
        "{:?}",
        g.to_f64_vec()
    );
    assert_eq!(finite.to_vec::<bool>().unwrap(), vec![true]);
    // Scaled by 2^15 they survive, within f16's relative precision.
    let (_, g, finite, ..) = step(32768.0, 0, 2000);
    for (got, x) in g.to_f64_vec().iter().zip(&xs) {
        let want = x * 1e-4;
        assert!((got - want).abs() <= 2e-3 * want.abs(), "{got} vs {want}");
    }
    assert_eq!(finite.to_vec::<bool>().unwrap(), vec![true]);
    let (_, _, _, scale, good) = step(32768.0, 0, 2000);
    assert_eq!(scale.to_vec::<f32>().unwrap(), vec![32768.0]);
    assert_eq!(good.to_vec::<i32>().unwrap(), vec![1]);
    // After `interval` finite steps in a row the scale grows.
    let (_, _, _, scale, good) = step(32768.0, 1, 2);
    assert_eq!(scale.to_vec::<f32>().unwrap(), vec![65536.0]);
    assert_eq!(good.to_vec::<i32>().unwrap(), vec![0]);
    // 2^24 overflows f16: the step is flagged, the weights stay, the scale halves.
    let (w2, _, finite, scale, good) = step(16_777_216.0, 5, 2000);
    assert_eq!(finite.to_vec::<bool>().unwrap(), vec![false]);
    assert_eq!(w2.to_f64_vec(), w.to_f64_vec());
    assert_eq!(scale.to_vec::<f32>().unwrap(), vec![8_388_608.0]);
    assert_eq!(good.to_vec::<i32>().unwrap(), vec![0]);
}
