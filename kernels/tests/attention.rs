//! The attention kernels against each other and against a plain-Rust f64
//! reference, on the XLA CPU plugin.
//!
//! Tolerances, per input dtype, as `|got - want| <= tol * (1 + |want|)`:
//! f32 inputs `1e-5` (flash and block-sparse reorder the f32 sums of the
//! softmax), bf16 inputs `2e-2` (the probabilities enter the second matmul
//! in bf16 and the output is rounded to bf16).
//!
//! The tests, by what they cover (the helpers they share are here):
//! - `forward`: flash attention and the reference kernel over shapes, GQA
//!   and MQA, causal offsets and windows, bf16 inputs, and the macro entry
//!   points;
//! - `options`: soft-cap, scale, bias, masks, segment ids and dropout;
//! - `block_sparse`: block-sparse attention (static and dynamic layouts)
//!   against dense masks, and the skipping of empty blocks;
//! - `unroll_limit`: sequences past the unrolled kernels' limit;
//! - `errors`: bad inputs and options are kernel errors;
//! - `degenerate`, `nan`, `program_size`: see each module.

use tessel_dsl::ops::random::random_bits_reference;
use tessel_dsl::runtime::Device;
use tessel_dsl::{DType, HostTensor, TensorSpec, F32};
use tessel_kernels::attention::*;

#[path = "attention/block_sparse.rs"]
mod block_sparse;
#[path = "attention/degenerate.rs"]
mod degenerate;
#[path = "attention/errors.rs"]
mod errors;
#[path = "attention/forward.rs"]
mod forward;
#[path = "attention/nan.rs"]
mod nan;
#[path = "attention/options.rs"]
mod options;
#[path = "attention/program_size.rs"]
mod program_size;
#[path = "attention/unroll_limit.rs"]
mod unroll_limit;

const TOL_F32: f64 = 1e-5;
const TOL_BF16: f64 = 2e-2;

fn dev() -> Device {
    Device::cpu().expect("the XLA CPU plugin loads")
}

/// Deterministic values in [-1, 1].
fn data(shape: &[usize], dtype: DType, seed: u64) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), dtype), |i| {
        let mut s = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
        s ^= s >> 29;
        s = s.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        s ^= s >> 32;
        (s % 2001) as f64 / 1000.0 - 1.0
    })
}

/// A deterministic pseudo-random bit pattern (about 2 in 3 set).
fn noise(n: usize, seed: u64) -> Vec<bool> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            !s.is_multiple_of(3)
        })
        .collect()
}

/// What the plain-Rust reference needs besides q, k, v.
#[derive(Default)]
struct Extra<'a> {
    bias: Option<&'a HostTensor>,
    /// `[Bm, Hm, Sq, Skv]`, Bm and Hm 1 or full.
    mask: Option<&'a HostTensor>,
    segments: Option<(&'a HostTensor, &'a HostTensor)>,
    seed: Option<u32>,
}

/// Plain f64 attention: (out `[B, Hq, Sq, Dv]`, lse `[B, Hq, Sq]`).
fn naive(
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    o: &FlashOptions,
    x: &Extra<'_>,
) -> (Vec<f64>, Vec<f64>) {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, skv, dv) = (ks[1], ks[2], vs[3]);
    let g = hq / hkv;
    let (qv, kv, vv) = (q.to_f64_vec(), k.to_f64_vec(), v.to_f64_vec());
    let scale = o.sm_scale.unwrap_or(1.0 / (d as f64).sqrt());
    let per_score = |t: &HostTensor, bi: usize, h: usize, i: usize, j: usize| {
        let s = t.shape();
        let (bb, hh) = (bi.min(s[0] - 1), h.min(s[1] - 1));
        ((bb * s[1] + hh) * sq + i) * skv + j
    };
    let bias = x.bias.map(|t| (t, t.to_f64_vec()));
    let mask = x.mask.map(|t| (t, t.to_f64_vec()));
    let segs = x.segments.map(|(a, c)| (a.to_f64_vec(), c.to_f64_vec()));
    let mut out = vec![0.0; b * hq * sq * dv];
    let mut lse = vec![f64::NEG_INFINITY; b * hq * sq];
    for bi in 0..b {
        for h in 0..hq {
            let hk = h / g;
            for i in 0..sq {
                let mut s = vec![f64::NEG_INFINITY; skv];
                for (j, sj) in s.iter_mut().enumerate() {
                    let mut visible = o.allows(i, j);
                    if let Some((t, m)) = &mask {
                        visible &= m[per_score(t, bi, h, i, j)] != 0.0;
                    }
                    if let Some((qa, ka)) = &segs {
                        visible &= qa[bi * sq + i] == ka[bi * skv + j];
                    }
                    if !visible {
                        continue;
                    }
                    let mut dot = 0.0;
                    for e in 0..d {
                        dot += qv[((bi * hq + h) * sq + i) * d + e]
                            * kv[((bi * hkv + hk) * skv + j) * d + e];
                    }
                    let mut l = dot * scale;
                    if let Some(cap) = o.soft_cap {
                        l = cap * (l / cap).tanh();
                    }
                    if let Some((t, bv)) = &bias {
                        l += bv[per_score(t, bi, h, i, j)];
                    }
                    *sj = l;
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let p: Vec<f64> = s.iter().map(|&l| (l - m).exp()).collect();
                let sum: f64 = p.iter().sum();
                let row = (bi * hq + h) * sq + i;
                lse[row] = m + sum.ln();
                for (j, pj) in p.iter().enumerate() {
                    if s[j] == f64::NEG_INFINITY {
                        continue;
                    }
                    let mut w = pj / sum;
                    if let (Some(seed), true) = (x.seed, o.dropout_rate > 0.0) {
                        let index = (row * skv + j) as u32;
                        let u = (random_bits_reference(seed, index) >> 8) as f32 * 0.5f32.powi(24);
                        w = if u >= o.dropout_rate as f32 {
                            w / (1.0 - o.dropout_rate)
                        } else {
                            0.0
                        };
                    }
                    for e in 0..dv {
                        out[row * dv + e] += w * vv[((bi * hkv + hk) * skv + j) * dv + e];
                    }
                }
            }
        }
    }
    (out, lse)
}

fn close(got: &HostTensor, want: &[f64], tol: f64, what: &str) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w == f64::NEG_INFINITY {
            g == f64::NEG_INFINITY
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn inputs<'a>(x: &Extra<'a>) -> AttentionInputs<'a> {
    AttentionInputs {
        bias: x.bias,
        mask: x.mask,
        segment_ids: x.segments,
        dropout_seed: x.seed,
        q_offset: None,
    }
}

/// Runs flash attention and the reference kernel and checks both (output
/// and logsumexp) against the plain-Rust reference.
fn check_flash(dev: &Device, shapes: [usize; 6], o: &FlashOptions, x: &Extra<'_>, what: &str) {
    let [b, hq, hkv, sq, skv, d] = shapes;
    let q = data(&[b, hq, sq, d], F32, 1);
    let k = data(&[b, hkv, skv, d], F32, 2);
    let v = data(&[b, hkv, skv, d], F32, 3);
    let (want, want_lse) = naive(&q, &k, &v, o, x);
    for method in [Attention::Flash, Attention::Reference] {
        let r = method.run(dev, &q, &k, &v, &inputs(x), *o).unwrap();
        assert_eq!(r.out.shape(), &[b, hq, sq, d]);
        let w = format!("{what} {method:?} {shapes:?} {o:?}");
        close(&r.out, &want, TOL_F32, &w);
        close(&r.lse, &want_lse, TOL_F32, &format!("{w} lse"));
    }
}
