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

/// The sequences' lengths: whole, ragged (not on a device's block
/// boundary), and empty.
const LENS: [usize; B] = [S, 37, 0];

fn value(i: usize, salt: usize) -> f64 {
    ((((i + salt) * 7919) % 1999) as f64 / 999.5 - 1.0) * 0.7
}

/// Element `(b, h, s, d)` of the input with `salt` (1: q, 2: k, 3: v, 4: dout).
fn at(salt: usize, b: usize, h: usize, s: usize, d: usize) -> f64 {
    value(((b * H + h) * S + s) * D + d, salt)
}

/// The `[B, H, S, D]` input with `salt`.
fn input(salt: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new([B, H, S, D], F32), move |i| value(i, salt))
}

fn lengths() -> HostTensor {
    HostTensor::from_vec(LENS.iter().map(|&x| x as i32).collect::<Vec<_>>(), [B]).unwrap()
}

/// The keys row `r` of `(b, h)` sees and its softmax over them, in f64;
/// `None` when it sees no key.
fn softmax_row(causal: bool, b: usize, h: usize, r: usize) -> Option<(Vec<usize>, Vec<f64>)> {
    let keys: Vec<usize> = (0..LENS[b]).filter(|&c| !causal || c <= r).collect();
    if keys.is_empty() {
        return None;
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
    Some((keys, w.iter().map(|x| x / total).collect()))
}

/// softmax(q·kᵀ/√D over the visible keys)·v, in f64; zeros for a row that
/// sees no key.
fn reference(causal: bool) -> Vec<f64> {
    let mut out = vec![0.0; B * H * S * D];
    for b in 0..B {
        for h in 0..H {
            for r in 0..S {
                let Some((keys, p)) = softmax_row(causal, b, h, r) else {
                    continue;
                };
                for d in 0..D {
                    out[((b * H + h) * S + r) * D + d] = keys
                        .iter()
                        .zip(&p)
                        .map(|(&c, pc)| pc * at(3, b, h, c, d))
                        .sum();
                }
            }
        }
    }
    out
}

/// A 1-D mesh `seq` over `devices` devices, and the sharding of a
/// `[B, H, S, D]` tensor split along the sequence.
fn seq_mesh(devices: usize) -> (Mesh, PartitionSpec) {
    let dev = Device::cpu_with_devices(devices).unwrap();
    let mesh = Mesh::new(&dev, &[("seq", devices)]).unwrap();
    (mesh, PartitionSpec::new([None, None, Some("seq"), None]))
}

fn check(devices: usize, causal: bool) {
    let (mesh, seq) = seq_mesh(devices);
    let sh = Shardings::new(
        [
            seq.clone(),
            seq.clone(),
            seq.clone(),
            PartitionSpec::replicated(),
        ],
        [seq],
    );
    let (q, k, v) = (input(1), input(2), input(3));
    let got = ring::run_shard_map(&mesh, &sh, &q, &k, &v, &lengths(), devices, causal)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let want = reference(causal);
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
fn reference_grads(causal: bool) -> [Vec<f64>; 3] {
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
                let Some((keys, p)) = softmax_row(causal, b, h, r) else {
                    continue;
                };
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
    for (devices, causal) in [(4, true), (2, false)] {
        let (mesh, seq) = seq_mesh(devices);
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
        let (q, k, v, dout) = (input(1), input(2), input(3), input(4));
        let got =
            ring_grads::run_shard_map(&mesh, &sh, &q, &k, &v, &lengths(), &dout, devices, causal)
                .unwrap();
        let got = [got.0, got.1, got.2];
        let want = reference_grads(causal);
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
