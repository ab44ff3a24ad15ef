//! Backward passes of the normalizations and the cross-entropy loss
//! (custom gradients) against autodiff of their plain compositions in f64,
//! and the AdamW step and gradient clipping against plain-Rust references.

extern crate tessel_dsl as tessel;

use tessel::autodiff::vjp;
use tessel::prelude::*;
use tessel_kernels::norm::{layer_norm, layer_norm_plain, rms_norm};
use tessel_kernels::train::{adamw, clip_by_global_norm, cross_entropy, AdamW};
use tessel_testing::{random, run, tensor, Rng};

/// Gradient tolerance in f64: both sides are exact formulas of the same
/// derivative, rounded differently.
const TOL_F64: f64 = 1e-10;

fn data(seed: u64, shape: &[usize]) -> HostTensor {
    random(&mut Rng::new(seed), shape, F64, -2.0, 2.0)
}

fn assert_close(name: &str, got: &HostTensor, want: &HostTensor, tol: f64) {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(got.shape(), want.shape(), "{name}");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{name}[{i}]: {a} vs {b}"
        );
    }
}

fn ln_ref(x: Tensor, s: Tensor, b: Tensor, eps: f64) -> Tensor {
    let c = x - x.mean_keepdims(&[-1]);
    c * (c.square().mean_keepdims(&[-1]) + eps).rsqrt() * s + b
}

fn rms_ref(x: Tensor, s: Tensor, eps: f64) -> Tensor {
    x * (x.square().mean_keepdims(&[-1]) + eps).rsqrt() * s
}

#[test]
fn norm_gradients_match_autodiff_of_the_composition() {
    for shape in [vec![3usize, 5], vec![2, 3, 7], vec![1, 1]] {
        let d = *shape.last().unwrap();
        let args = [
            data(1, &shape),
            data(2, &[d]),
            data(3, &[d]),
            data(4, &shape),
        ];
        let refs: Vec<&HostTensor> = args.iter().collect();
        let out = run(
            |a| {
                let (x, s, b, dy) = (a[0], a[1], a[2], a[3]);
                let (_, pb) = vjp(
                    |(x, s, b): (Tensor, Tensor, Tensor)| layer_norm(x, s, b, 1e-5),
                    (x, s, b),
                );
                let (_, pr) = vjp(
                    |(x, s, b): (Tensor, Tensor, Tensor)| ln_ref(x, s, b, 1e-5),
                    (x, s, b),
                );
                let (g, r) = (pb.call(dy), pr.call(dy));
                let (_, qb) = vjp(|(x, s): (Tensor, Tensor)| rms_norm(x, s, 1e-5), (x, s));
                let (_, qr) = vjp(|(x, s): (Tensor, Tensor)| rms_ref(x, s, 1e-5), (x, s));
                let (h, q) = (qb.call(dy), qr.call(dy));
                let (_, pp) = vjp(|x: Tensor| layer_norm_plain(x, 1e-5), x);
                let (_, pq) = vjp(
                    |x: Tensor| {
                        ln_ref(
                            x,
                            x.ones_like().sum(&[0]).zeros_like() + 1.0,
                            Tensor::scalar(0.0, F64),
                            1e-5,
                        )
                    },
                    x,
                );
                vec![
                    g.0,
                    g.1,
                    g.2,
                    r.0,
                    r.1,
                    r.2,
                    h.0,
                    h.1,
                    q.0,
                    q.1,
                    pp.call(dy),
                    pq.call(dy),
                ]
            },
            &refs,
        );
        for (k, name) in ["dx", "dscale", "dbias"].iter().enumerate() {
            assert_close(
                &format!("layer_norm {name} {shape:?}"),
                &out[k],
                &out[3 + k],
                TOL_F64,
            );
        }
        assert_close("rms_norm dx", &out[6], &out[8], TOL_F64);
        assert_close("rms_norm dscale", &out[7], &out[9], TOL_F64);
        assert_close("layer_norm_plain dx", &out[10], &out[11], TOL_F64);
    }
}

#[test]
fn bf16_norm_gradient_uses_f32_statistics() {
    // A bf16 input's gradient is within bf16 rounding (2^-8 relative) of the f64 one.
    let x = data(5, &[4, 16]);
    let s = data(6, &[16]);
    let dy = data(7, &[4, 16]);
    let out = run(
        |a| {
            let f = |x: Tensor, s: Tensor| rms_norm(x, s, 1e-5);
            let (_, p64) = vjp(|(x, s): (Tensor, Tensor)| f(x, s), (a[0], a[1]));
            let (_, p16) = vjp(
                |(x, s): (Tensor, Tensor)| f(x, s),
                (a[0].cast(BF16), a[1].cast(BF16)),
            );
            let (g64, g16) = (p64.call(a[2]), p16.call(a[2].cast(BF16)));
            vec![g64.0, g16.0.cast(F64)]
        },
        &[&x, &s, &dy],
    );
    assert_close("bf16 dx", &out[1], &out[0], 0.05);
}

#[test]
fn cross_entropy_and_its_fused_gradient() {
    let (n, v) = (5usize, 7usize);
    let logits = data(8, &[n, v]);
    // One label out of range: that row counts for nothing.
    let labels = tensor(&[0.0, 6.0, 3.0, -1.0, 2.0], &[n], S32);
    let out = run(
        move |a| {
            let (loss, pb) = vjp(|x: Tensor| cross_entropy(x, a[1]), a[0]);
            let valid = a[1].ge(0);
            let reference = |x: Tensor| {
                let lp = x.log_softmax(-1);
                let hit = Tensor::iota([n, v], 1, S32).eq(a[1].expand_dims(1).broadcast_to([n, v]));
                -(lp * hit.cast(F64)).sum(&[0, 1]) / n as f64 + valid.cast(F64).sum(&[0]) * 0.0
            };
            let (ref_loss, pr) = vjp(reference, a[0]);
            let one = Tensor::scalar(1.0, F64);
            vec![loss, ref_loss, pb.call(one), pr.call(one)]
        },
        &[&logits, &labels],
    );
    assert_close("loss", &out[0], &out[1], 1e-12);
    assert_close("dlogits", &out[2], &out[3], 1e-12);
}

#[test]
fn cross_entropy_over_a_batch_of_sequences_is_the_flat_one() {
    // [B, S, V] logits and [B, S] labels (odd sizes, one label out of range).
    let (b, s, v) = (2usize, 3usize, 5usize);
    let logits = data(13, &[b, s, v]);
    let labels = tensor(&[0.0, 4.0, 2.0, -1.0, 1.0, 3.0], &[b, s], S32);
    let out = run(
        move |a| {
            let (loss, pb) = vjp(|x: Tensor| cross_entropy(x, a[1]), a[0]);
            let flat = |x: Tensor| cross_entropy(x.reshape(&[-1, v as isize]), a[1].reshape(&[-1]));
            let (flat_loss, pf) = vjp(flat, a[0]);
            let one = Tensor::scalar(1.0, F64);
            vec![loss, flat_loss, pb.call(one), pf.call(one)]
        },
        &[&logits, &labels],
    );
    assert_close("loss", &out[0], &out[1], 0.0);
    assert_eq!(out[2].shape(), &[b, s, v]);
    assert_close("dlogits", &out[2], &out[3], 0.0);
    // Leading axes that differ are an error naming both shapes.
    let bad = tessel::kernel::Kernel::new("ce", |a: &[Tensor]| vec![cross_entropy(a[0], a[1])])
        .run(
            &Device::cpu().unwrap(),
            &[&logits, &tensor(&[0.0; 3], &[3], S32)],
        )
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("f64[2,3,5]") && bad.contains("s32[3]"),
        "{bad}"
    );
}

#[test]
fn adamw_step_matches_the_formula() {
    let (p, g, m, v) = (
        data(9, &[6]),
        data(10, &[6]),
        data(11, &[6]),
        data(12, &[6]),
    );
    let v = tensor(
        &v.to_f64_vec().iter().map(|x| x.abs()).collect::<Vec<_>>(),
        &[6],
        F64,
    );
    let hp = AdamW::default();
    let out = run(
        move |a| {
            let (p, m, v) = adamw(
                a[0],
                a[1],
                a[2],
                a[3],
                Tensor::scalar(3.0, S32),
                Tensor::scalar(0.01, F64),
                hp,
            );
            vec![p, m, v]
        },
        &[&p, &g, &m, &v],
    );
    let (pv, gv, mv, vv) = (
        p.to_f64_vec(),
        g.to_f64_vec(),
        m.to_f64_vec(),
        v.to_f64_vec(),
    );
    for i in 0..6 {
        let m2 = 0.9 * mv[i] + 0.1 * gv[i];
        let v2 = 0.999 * vv[i] + 0.001 * gv[i] * gv[i];
        let mh = m2 / (1.0 - 0.9f64.powi(3));
        let vh = v2 / (1.0 - 0.999f64.powi(3));
        let p2 = pv[i] - 0.01 * (mh / (vh.sqrt() + 1e-8) + 0.01 * pv[i]);
        assert!((out[0].to_f64_vec()[i] - p2).abs() < 1e-12);
        assert!((out[1].to_f64_vec()[i] - m2).abs() < 1e-15);
        assert!((out[2].to_f64_vec()[i] - v2).abs() < 1e-15);
    }
}

#[test]
fn clipping_scales_by_the_global_norm() {
    let a = tensor(&[3.0, 0.0], &[2], F64);
    let b = tensor(&[4.0], &[1], F64);
    let out = run(
        |t| {
            let (c, norm) = clip_by_global_norm(&[t[0], t[1]], 1.0);
            vec![c[0], c[1], norm]
        },
        &[&a, &b],
    );
    assert_eq!(out[2].to_f64_vec(), vec![5.0]);
    assert_close("a", &out[0], &tensor(&[0.6, 0.0], &[2], F64), 1e-15);
    assert_close("b", &out[1], &tensor(&[0.8], &[1], F64), 1e-15);
    // Under the limit nothing changes.
    let out = run(|t| clip_by_global_norm(&[t[0]], 10.0).0, &[&a]);
    assert_close("unclipped", &out[0], &a, 0.0);
}
