//! Ring attention (`attention::ring_attention`) per device over 2 and 4
//! devices against a plain-Rust f64 reference: causal and not, ragged
//! sequence lengths that do not fall on a device's block boundary, and a
//! sequence of length 0 (zeros, not NaN); and its gradients (`vjp` through
//! the ring's `ppermute`s, the loss being the sum of the devices' losses)
//! against the plain-Rust f64 attention backward.
//!
//! Tolerance: f32, 2e-5 relative to 1 + |reference| (gradients: 1e-4).

extern crate tessel_dsl as tessel;

use tessel_dsl::autodiff::vjp;
use tessel_dsl::prelude::*;
use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};
use tessel_kernels::attention::{ring_attention, Ring};

#[cpu_kernel(precision = "highest")]
fn ring(q: Tensor, k: Tensor, v: Tensor, lens: Tensor, devices: usize, causal: bool) -> Tensor {
    let r = Ring {
        axis: "seq",
        devices,
        causal,
    };
    ring_attention(q, k, v, Some(lens), &r)
}

/// This device's `(dq, dk, dv)` for the cotangent `dout` of its output.
#[cpu_kernel(precision = "highest")]
#[allow(clippy::too_many_arguments)]
fn ring_grads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lens: Tensor,
    dout: Tensor,
    devices: usize,
    causal: bool,
) -> (Tensor, Tensor, Tensor) {
    let r = Ring {
        axis: "seq",
        devices,
        causal,
    };
    let (_, pb) = vjp(
        |(q, k, v): (Tensor, Tensor, Tensor)| ring_attention(q, k, v, Some(lens), &r),
        (q, k, v),
    );
    pb.call(dout)
}

const B: usize = 3;
const H: usize = 2;
const S: usize = 64;
const D: usize = 8;

fn value(i: usize, salt: usize) -> f64 {
    ((((i + salt) * 7919) % 1999) as f64 / 999.5 - 1.0) * 0.7
}

/// softmax(q·kᵀ/√D over the visible keys)·v, in f64; zeros for a row that
/// sees no key.
fn reference(lens: &[usize], causal: bool) -> Vec<f64> {
    let at = |salt: usize, b: usize, h: usize, s: usize, d: usize| {
        value(((b * H + h) * S + s) * D + d, salt)
    };
    let mut out = vec![0.0; B * H * S * D];
    for b in 0..B {
        for h in 0..H {
            for r in 0..S {
                let keys: Vec<usize> = (0..lens[b]).filter(|&c| !causal || c <= r).collect();
                if keys.is_empty() {
                    continue;
                }
                let logits: Vec<f64> = keys
                    .iter()
                    .map(|&c| {
                        (0..D)
                            .map(|d| at(1, b, h, r, d) * at(2, b, h, c, d))
                            .sum::<f64>()
                            / (D as f64).sqrt()
                    })
                    .collect();
                let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = logits.iter().map(|x| (x - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for d in 0..D {
                    let o: f64 = keys
                        .iter()
                        .zip(&w)
                        .map(|(&c, wi)| wi * at(3, b, h, c, d))
                        .sum();
                    out[((b * H + h) * S + r) * D + d] = o / total;
                }
            }
        }
    }
    out
}

fn check(devices: usize, causal: bool) {
    let lens = [S, 37, 0];
    let t = |salt: usize| {
        HostTensor::from_fn(TensorSpec::new([B, H, S, D], F32), move |i| value(i, salt))
    };
    let (q, k, v) = (t(1), t(2), t(3));
    let l = HostTensor::from_vec(lens.iter().map(|&x| x as i32).collect::<Vec<_>>(), [B]).unwrap();
    let dev = Device::cpu_with_devices(devices).unwrap();
    let mesh = Mesh::new(&dev, &[("seq", devices)]).unwrap();
    let seq = PartitionSpec::new([None, None, Some("seq"), None]);
    let sh = Shardings::new(
        [
            seq.clone(),
            seq.clone(),
            seq.clone(),
            PartitionSpec::replicated(),
        ],
        [seq],
    );
    let got = ring::run_shard_map(&mesh, &sh, &q, &k, &v, &l, devices, causal)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = reference(&lens, causal);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 2e-5 * (1.0 + w.abs()),
            "devices {devices} causal {causal}, element {i}: {g} vs {w}"
        );
    }
}

#[test]
fn causal_ring_attention_with_ragged_lengths() {
    check(4, true);
    check(2, true);
}

#[test]
fn full_ring_attention_with_ragged_lengths() {
    check(4, false);
}

/// The f64 gradients `(dq, dk, dv)` of `Σ out · dout` for the inputs of
/// [`reference`]: with `P` the softmax over the visible keys, `dv = Pᵀ·dout`,
/// `dS = P ⊙ (dout·vᵀ − rowsum(P ⊙ dout·vᵀ))`, `dq = dS·k/√D`, `dk = dSᵀ·q/√D`.
fn reference_grads(lens: &[usize], causal: bool) -> [Vec<f64>; 3] {
    let at = |salt: usize, b: usize, h: usize, s: usize, d: usize| {
        value(((b * H + h) * S + s) * D + d, salt)
    };
    let idx = |b: usize, h: usize, s: usize, d: usize| ((b * H + h) * S + s) * D + d;
    let scale = 1.0 / (D as f64).sqrt();
    let mut g = [
        vec![0.0; B * H * S * D],
        vec![0.0; B * H * S * D],
        vec![0.0; B * H * S * D],
    ];
    for b in 0..B {
        for h in 0..H {
            for r in 0..S {
                let keys: Vec<usize> = (0..lens[b]).filter(|&c| !causal || c <= r).collect();
                if keys.is_empty() {
                    continue;
                }
                let logits: Vec<f64> = keys
                    .iter()
                    .map(|&c| {
                        (0..D)
                            .map(|d| at(1, b, h, r, d) * at(2, b, h, c, d))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = logits.iter().map(|x| (x - m).exp()).collect();
                let total: f64 = w.iter().sum();
                let p: Vec<f64> = w.iter().map(|x| x / total).collect();
                // dP[c] = dout[r] · v[c]
                let dp: Vec<f64> = keys
                    .iter()
                    .map(|&c| (0..D).map(|d| at(4, b, h, r, d) * at(3, b, h, c, d)).sum())
                    .collect();
                let row: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for (i, &c) in keys.iter().enumerate() {
                    let ds = p[i] * (dp[i] - row);
                    for d in 0..D {
                        g[0][idx(b, h, r, d)] += ds * at(2, b, h, c, d) * scale;
                        g[1][idx(b, h, c, d)] += ds * at(1, b, h, r, d) * scale;
                        g[2][idx(b, h, c, d)] += p[i] * at(4, b, h, r, d);
                    }
                }
            }
        }
    }
    g
}

#[test]
fn ring_attention_gradients_match_the_f64_backward() {
    let lens = [S, 37, 0];
    let t = |salt: usize| {
        HostTensor::from_fn(TensorSpec::new([B, H, S, D], F32), move |i| value(i, salt))
    };
    let l = HostTensor::from_vec(lens.iter().map(|&x| x as i32).collect::<Vec<_>>(), [B]).unwrap();
    for (devices, causal) in [(4, true), (2, false)] {
        let dev = Device::cpu_with_devices(devices).unwrap();
        let mesh = Mesh::new(&dev, &[("seq", devices)]).unwrap();
        let seq = PartitionSpec::new([None, None, Some("seq"), None]);
        let sh = Shardings::new(
            [
                seq.clone(),
                seq.clone(),
                seq.clone(),
                PartitionSpec::replicated(),
                seq.clone(),
            ],
            [seq.clone(), seq.clone(), seq],
        );
        let got =
            ring_grads::run_shard_map(&mesh, &sh, &t(1), &t(2), &t(3), &l, &t(4), devices, causal)
                .unwrap();
        let got = [got.0, got.1, got.2];
        let want = reference_grads(&lens, causal);
        for (name, (g, w)) in ["dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
            for (i, (a, b)) in g.to_vec::<f32>().unwrap().iter().zip(w).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{name}, devices {devices} causal {causal}, element {i}: {a} vs {b}"
                );
            }
        }
    }
}
