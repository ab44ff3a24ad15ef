//! Ring attention (`attention::ring_attention`) per device over 2 and 4
//! devices against a plain-Rust f64 reference: causal and not, ragged
//! sequence lengths that do not fall on a device's block boundary, and a
//! sequence of length 0 (zeros, not NaN).
//!
//! Tolerance: f32, 2e-5 relative to 1 + |reference|.

extern crate tessel_dsl as tessel;

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
