//! The backward kernels (`*_vjp`) against closed-form derivatives computed
//! in plain Rust (f64 inputs; tolerance 1e-10 relative).

extern crate tessel_dsl as tessel;

use tessel::prelude::*;
use tessel_kernels::activation::fused_gelu_dropout;
use tessel_kernels::gemm::GemmOptions;
use tessel_kernels::grads::{
    fused_gelu_dropout_vjp, gelu_vjp, gemm_vjp, rope_vjp, silu_vjp, softmax_vjp, swiglu_vjp,
};
use tessel_kernels::rope::{RopeLayout, RopeTable};
use tessel_testing::{random, Rng};

const TOL: f64 = 1e-10;

fn data(seed: u64, shape: &[usize]) -> HostTensor {
    random(&mut Rng::new(seed), shape, F64, -2.0, 2.0)
}

fn close(name: &str, got: &HostTensor, want: &[f64]) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{name}");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= TOL * (1.0 + b.abs()),
            "{name}[{i}]: {a} vs {b}"
        );
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn pointwise_backward_kernels() {
    let dev = Device::cpu().unwrap();
    let (x, up, dout) = (data(1, &[3, 5]), data(2, &[3, 5]), data(3, &[3, 5]));
    let (xv, uv, dv) = (x.to_f64_vec(), up.to_f64_vec(), dout.to_f64_vec());
    let silu_d = |x: f64| {
        let s = sigmoid(x);
        s * (1.0 + x * (1.0 - s))
    };
    let want: Vec<f64> = xv.iter().zip(&dv).map(|(&x, &d)| d * silu_d(x)).collect();
    close("silu", &silu_vjp::run(&dev, &x, &dout).unwrap(), &want);
    let (dg, du) = swiglu_vjp::run(&dev, &x, &up, &dout).unwrap();
    let want_g: Vec<f64> = (0..xv.len())
        .map(|i| dv[i] * uv[i] * silu_d(xv[i]))
        .collect();
    let want_u: Vec<f64> = (0..xv.len())
        .map(|i| dv[i] * xv[i] * sigmoid(xv[i]))
        .collect();
    close("swiglu dgate", &dg, &want_g);
    close("swiglu dup", &du, &want_u);
    // Exact gelu: d/dx x Φ(x) = Φ(x) + x φ(x); Φ from the kernel's own erf is
    // avoided by comparing with finite differences of the closed form.
    let gelu = |x: f64| {
        // Φ(x) by a series that is exact to ~1e-16 on [-2, 2].
        let t = x / std::f64::consts::SQRT_2;
        let mut term = t;
        let mut sum = t;
        for n in 1..60 {
            term *= -t * t / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        let erf = 2.0 / std::f64::consts::PI.sqrt() * sum;
        0.5 * x * (1.0 + erf)
    };
    let want: Vec<f64> = xv
        .iter()
        .zip(&dv)
        .map(|(&x, &d)| {
            let phi = (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let cdf = gelu(x) / x;
            d * (cdf + x * phi)
        })
        .collect();
    close(
        "gelu",
        &gelu_vjp::run(&dev, &x, &dout, false).unwrap(),
        &want,
    );
    // softmax: dx = y (dout - sum(dout y)) along the axis.
    let dx = softmax_vjp::run(&dev, &x, &dout, -1).unwrap();
    let mut want = vec![0.0; 15];
    for r in 0..3 {
        let row = &xv[r * 5..r * 5 + 5];
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
        let z: f64 = e.iter().sum();
        let y: Vec<f64> = e.iter().map(|v| v / z).collect();
        let dot: f64 = (0..5).map(|j| dv[r * 5 + j] * y[j]).sum();
        for j in 0..5 {
            want[r * 5 + j] = y[j] * (dv[r * 5 + j] - dot);
        }
    }
    close("softmax", &dx, &want);
}

#[test]
fn gemm_backward_is_two_products() {
    let dev = Device::cpu().unwrap();
    let (m, k, n) = (3usize, 4usize, 5usize);
    let (a, b, d) = (data(4, &[m, k]), data(5, &[k, n]), data(6, &[m, n]));
    let (av, bv, dv) = (a.to_f64_vec(), b.to_f64_vec(), d.to_f64_vec());
    let (da, db) = gemm_vjp::run(&dev, &a, &b, &d, GemmOptions::default()).unwrap();
    let want_a: Vec<f64> = (0..m * k)
        .map(|i| {
            (0..n)
                .map(|j| dv[(i / k) * n + j] * bv[(i % k) * n + j])
                .sum()
        })
        .collect();
    let want_b: Vec<f64> = (0..k * n)
        .map(|i| (0..m).map(|r| av[r * k + i / n] * dv[r * n + i % n]).sum())
        .collect();
    close("da", &da, &want_a);
    close("db", &db, &want_b);
}

#[test]
fn rope_backward_rotates_by_minus_theta() {
    let dev = Device::cpu().unwrap();
    let (s, dim) = (5usize, 6usize);
    let table = RopeTable::new(8, dim, 10_000.0).unwrap();
    let (cos, sin) = (table.cos().to_f64_vec(), table.sin().to_f64_vec());
    let x = data(7, &[2, s, dim]);
    let dout = data(8, &[2, s, dim]);
    let dv = dout.to_f64_vec();
    let offset = 2;
    let dx = rope_vjp::run(
        &dev,
        &x,
        table.cos(),
        table.sin(),
        &dout,
        offset,
        RopeLayout::HalfSplit,
    )
    .unwrap();
    let h = dim / 2;
    let mut want = vec![0.0; dv.len()];
    for b in 0..2 {
        for p in 0..s {
            let (c, sn) = (&cos[(p + offset) * h..], &sin[(p + offset) * h..]);
            for i in 0..h {
                let at = (b * s + p) * dim;
                let (g1, g2) = (dv[at + i], dv[at + i + h]);
                // The transpose of [[c, -s], [s, c]] is the rotation by -θ.
                want[at + i] = g1 * c[i] + g2 * sn[i];
                want[at + i + h] = -g1 * sn[i] + g2 * c[i];
            }
        }
    }
    close("rope dx", &dx, &want);
}

#[test]
fn fused_gelu_dropout_backward_uses_the_forward_mask() {
    let dev = Device::cpu().unwrap();
    let (x, dout) = (data(11, &[16, 9]), data(12, &[16, 9]));
    let seed = HostTensor::scalar(7u32);
    let rate = 0.3;
    let y = fused_gelu_dropout::run(&dev, &x, true, rate, &seed, true)
        .unwrap()
        .to_f64_vec();
    let dx = fused_gelu_dropout_vjp::run(&dev, &x, &dout, true, rate, &seed, true).unwrap();
    // tanh GELU: 0.5 x (1 + tanh u), u = c (x + 0.044715 x^3).
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let want: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .zip(dout.to_f64_vec())
        .zip(&y)
        .map(|((&x, d), &y)| {
            if y == 0.0 {
                return 0.0;
            }
            let th = (c * (x + 0.044715 * x * x * x)).tanh();
            let g =
                0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * x * x);
            d * g / (1.0 - rate)
        })
        .collect();
    let dropped = want.iter().filter(|&&w| w == 0.0).count();
    assert!((20..70).contains(&dropped), "{dropped} of 144 dropped");
    close("fused_gelu_dropout", &dx, &want);
}

#[test]
fn cross_entropy_backward_is_softmax_minus_onehot() {
    use tessel_kernels::grads::softmax_cross_entropy_vjp;
    let dev = Device::cpu().unwrap();
    let (n, v) = (5, 7);
    let logits = data(21, &[n, v]);
    // The last row's label is out of range: no loss, no gradient.
    let labels = HostTensor::from_vec(vec![0i32, 6, 3, 3, -1], vec![n]).unwrap();
    let dout = HostTensor::scalar(1.5f64);
    let dx = softmax_cross_entropy_vjp::run(&dev, &logits, &labels, &dout).unwrap();
    let (lv, yv) = (logits.to_f64_vec(), [0usize, 6, 3, 3, 99]);
    let mut want = vec![0.0; n * v];
    for r in 0..n - 1 {
        let row = &lv[r * v..(r + 1) * v];
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
        for c in 0..v {
            let p = (row[c] - m).exp() / z;
            let hit = if c == yv[r] { 1.0 } else { 0.0 };
            want[r * v + c] = (p - hit) * 1.5 / n as f64;
        }
    }
    close("cross_entropy", &dx, &want);
}

#[test]
fn a_wrong_cotangent_names_the_backward_kernel() {
    use tessel_kernels::attention::FlashOptions;
    use tessel_kernels::grads::{flash_attention_lse_vjp, layer_norm_vjp};
    let spec = |s: &[usize], dt: DType| TensorSpec::new(s.to_vec(), dt);
    let x = spec(&[4, 2], F32);
    let row = spec(&[2], F32);
    let qkv = spec(&[1, 2, 3, 4], F32);
    let cases = [
        (
            layer_norm_vjp::lower(&x, &row, &row, &spec(&[4, 2], BF16), 1e-5),
            "layer_norm_vjp",
            "cotangent 0 is bf16[4,2] but output 0 is f32[4,2]",
        ),
        (
            softmax_vjp::lower(&x, &spec(&[2, 4], F32), -1),
            "softmax_vjp",
            "cotangent 0 is f32[2,4]",
        ),
        (
            flash_attention_lse_vjp::lower(
                &qkv,
                &qkv,
                &qkv,
                &qkv,
                &spec(&[1, 2, 4], F32),
                FlashOptions::new(),
            ),
            "flash_attention_lse_vjp",
            "cotangent 1 is f32[1,2,4] but output 1 is f32[1,2,3]",
        ),
    ];
    for (result, op, needle) in cases {
        let err = result.expect_err(op);
        let e = err.as_kernel_error().expect("a kernel error");
        assert_eq!(e.op, op, "{e}");
        assert!(e.message.contains(needle), "{e}");
    }
}

/// At `±inf` the GELU and SiLU derivatives take their limits (1 and 0),
/// not `inf · 0 = NaN`; a NaN input still gives NaN; and the swiglu gate's
/// cotangent follows silu's.
#[test]
fn activation_gradients_take_their_limits_at_infinity() {
    let dev = tessel_testing::dev();
    let x = HostTensor::from_vec(
        vec![f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, f32::NAN],
        [5],
    )
    .unwrap();
    let ones = HostTensor::from_vec(vec![1.0f32; 5], [5]).unwrap();
    let want = [1.0, 0.0, 1.0, 0.0];
    let check = |name: &str, got: HostTensor| {
        let got = got.to_vec::<f32>().unwrap();
        for (i, w) in want.iter().enumerate() {
            assert!(
                (got[i] - w).abs() < 1e-6,
                "{name}: element {i}: {} vs {w}",
                got[i]
            );
        }
        assert!(got[4].is_nan(), "{name}: NaN in, {} out", got[4]);
    };
    check("silu_vjp", silu_vjp::run(&dev, &x, &ones).unwrap());
    check(
        "gelu_vjp erf",
        gelu_vjp::run(&dev, &x, &ones, false).unwrap(),
    );
    check(
        "gelu_vjp tanh",
        gelu_vjp::run(&dev, &x, &ones, true).unwrap(),
    );
    let (dgate, _) = swiglu_vjp::run(&dev, &x, &ones, &ones).unwrap();
    check("swiglu_vjp gate", dgate);
}
