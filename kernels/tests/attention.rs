//! The attention kernels against each other and against a plain-Rust f64
//! reference, on the XLA CPU plugin.
//!
//! Tolerances, per input dtype, as `|got - want| <= tol * (1 + |want|)`:
//! f32 inputs `1e-5` (flash and block-sparse reorder the f32 sums of the
//! softmax), bf16 inputs `2e-2` (the probabilities enter the second matmul
//! in bf16 and the output is rounded to bf16).

use tessel_dsl::ops::random::random_bits_reference;
use tessel_dsl::runtime::Device;
use tessel_dsl::tile::{Mask, MultiHeadMask};
use tessel_dsl::{DType, Error, HostTensor, TensorSpec, BF16, F32, S32};
use tessel_kernels::attention::*;

#[path = "attention/degenerate.rs"]
mod degenerate;
#[path = "attention/nan.rs"]
mod nan;
#[path = "attention/program_size.rs"]
mod program_size;

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
        let r = method.run(dev, &q, &k, &v, &inputs(x), o).unwrap();
        assert_eq!(r.out.shape(), &[b, hq, sq, d]);
        let w = format!("{what} {method:?} {shapes:?} {o:?}");
        close(&r.out, &want, TOL_F32, &w);
        close(&r.lse, &want_lse, TOL_F32, &format!("{w} lse"));
    }
}

#[test]
fn flash_and_reference_match_plain_rust() {
    let dev = dev();
    let o = FlashOptions::new;
    // [B, Hq, Hkv, Sq, Skv, D]
    let cases: Vec<([usize; 6], FlashOptions, &str)> = vec![
        (
            [1, 1, 1, 1, 1, 4],
            o().causal(true).block_sizes(8, 8),
            "sizes 1",
        ),
        (
            [2, 4, 4, 37, 37, 8],
            o().causal(true).block_sizes(16, 16),
            "gqa 1, ragged",
        ),
        (
            [1, 4, 2, 20, 33, 8],
            o().block_sizes(8, 16),
            "gqa 2, Sq < Skv",
        ),
        (
            [1, 8, 2, 29, 17, 16],
            o().causal(true).block_sizes(16, 8),
            "gqa 4, Sq > Skv",
        ),
        (
            [1, 4, 1, 24, 40, 8],
            o().causal(true).q_offset(16).block_sizes(8, 8),
            "mqa, bottom-right causal",
        ),
        (
            [1, 2, 2, 50, 50, 8],
            o().causal(true).window(Some(7), None).block_sizes(16, 16),
            "sliding window",
        ),
        (
            [1, 2, 1, 45, 45, 8],
            o().window(Some(5), Some(3)).block_sizes(8, 8),
            "two-sided window",
        ),
        (
            [1, 2, 2, 64, 64, 8],
            o().causal(true).block_sizes(32, 8),
            "block_q > block_kv",
        ),
        (
            [1, 2, 2, 21, 21, 8],
            o().causal(true).q_offset(-5).block_sizes(8, 8),
            "rows seeing nothing",
        ),
        (
            [1, 1, 1, 1, 37, 8],
            o().causal(true).q_offset(36).block_sizes(8, 16),
            "one query, decoding",
        ),
        (
            [1, 2, 2, 19, 23, 8],
            o().block_sizes(512, 512),
            "blocks larger than the sequences",
        ),
        ([1, 2, 1, 5, 0, 8], o().block_sizes(8, 8), "no keys"),
        ([1, 2, 1, 0, 7, 8], o().block_sizes(8, 8), "no queries"),
    ];
    for (shapes, opts, what) in &cases {
        check_flash(&dev, *shapes, opts, &Extra::default(), what);
    }
}

#[test]
fn soft_cap_scale_bias_mask_and_segments() {
    let dev = dev();
    let (b, h, s, t) = (2, 4, 19, 27);
    let bias = data(&[b, 1, s, t], F32, 11);
    let head_bias = data(&[1, h, s, t], F32, 12);
    let bits = noise(b * h * s * t, 5);
    let mask = HostTensor::from_vec(bits, [b, h, s, t]).unwrap();
    let one_mask = HostTensor::from_vec(noise(s * t, 6), [1, 1, s, t]).unwrap();
    let qs =
        HostTensor::from_vec((0..b * s).map(|i| ((i % s) / 7) as i32).collect(), [b, s]).unwrap();
    let ks =
        HostTensor::from_vec((0..b * t).map(|i| ((i % t) / 9) as i32).collect(), [b, t]).unwrap();
    let shapes = [b, h, 2, s, t, 8];
    let o = FlashOptions::new().block_sizes(8, 16);
    check_flash(
        &dev,
        shapes,
        &o.clone().soft_cap(2.0).sm_scale(0.9),
        &Extra::default(),
        "soft-cap",
    );
    let x = Extra {
        bias: Some(&bias),
        ..Default::default()
    };
    check_flash(&dev, shapes, &o.clone().causal(true), &x, "batch bias");
    let x = Extra {
        bias: Some(&head_bias),
        mask: Some(&mask),
        ..Default::default()
    };
    check_flash(
        &dev,
        shapes,
        &o.clone().soft_cap(5.0),
        &x,
        "head bias + mask",
    );
    let x = Extra {
        mask: Some(&one_mask),
        segments: Some((&qs, &ks)),
        ..Default::default()
    };
    check_flash(
        &dev,
        shapes,
        &o.clone().causal(true).window(Some(6), None),
        &x,
        "mask + segments",
    );
}

#[test]
fn dropout_is_deterministic_in_the_seed_and_matches_the_reference() {
    let dev = dev();
    let shapes = [2, 4, 2, 21, 30, 8];
    let o = FlashOptions::new()
        .causal(true)
        .dropout(0.25)
        .block_sizes(8, 16);
    for seed in [0, 12345] {
        let x = Extra {
            seed: Some(seed),
            ..Default::default()
        };
        check_flash(&dev, shapes, &o, &x, &format!("dropout seed {seed}"));
    }
    let q = data(&[1, 2, 40, 8], F32, 1);
    let k = data(&[1, 2, 40, 8], F32, 2);
    let run = |seed: u32, o: &FlashOptions| {
        let x = AttentionInputs::new().dropout_seed(seed);
        Attention::Flash
            .run(&dev, &q, &k, &k, &x, o)
            .unwrap()
            .out
            .to_vec::<f32>()
            .unwrap()
    };
    // The same seed gives the same result at any block size; another seed does not.
    let a = run(3, &o);
    assert_eq!(a, run(3, &o));
    let other_blocks = run(3, &o.clone().block_sizes(16, 8));
    for (x, y) in a.iter().zip(&other_blocks) {
        assert!((x - y).abs() < 1e-5);
    }
    assert_ne!(a, run(4, &o));
    // Without dropout the outputs are convex combinations of the values; with
    // it, about `rate` of the probabilities are dropped: check the fraction on
    // the host bits the kernels use.
    let n = 100_000u32;
    let kept = (0..n)
        .filter(|&i| (random_bits_reference(9, i) >> 8) as f32 * 0.5f32.powi(24) >= 0.25)
        .count() as f64;
    assert!((kept / f64::from(n) - 0.75).abs() < 0.01);
}

#[test]
fn bf16_inputs_have_f32_statistics() {
    let dev = dev();
    let (b, hq, hkv, s, d) = (1, 4, 2, 33, 16);
    let q = data(&[b, hq, s, d], BF16, 1);
    let k = data(&[b, hkv, s, d], BF16, 2);
    let v = data(&[b, hkv, s, d], BF16, 3);
    let o = FlashOptions::new().causal(true).block_sizes(16, 8);
    let (want, want_lse) = naive(&q, &k, &v, &o, &Extra::default());
    let (out, lse) = flash_attention_lse::run(&dev, &q, &k, &v, o.clone()).unwrap();
    assert_eq!((out.dtype(), lse.dtype()), (BF16, F32));
    close(&out, &want, TOL_BF16, "bf16 flash");
    close(&lse, &want_lse, TOL_BF16, "bf16 flash lse");
    let r = attention_reference::run(&dev, &q, &k, &v, o).unwrap();
    close(&r, &want, TOL_BF16, "bf16 reference");
}

/// The macro kernels agree with the host runner.
#[test]
fn kernel_entry_points() {
    let dev = dev();
    let q = data(&[1, 2, 13, 8], F32, 1);
    let k = data(&[1, 1, 13, 8], F32, 2);
    let o = FlashOptions::new().causal(true).block_sizes(8, 8);
    let (want, want_lse) = naive(&q, &k, &k, &o, &Extra::default());
    close(
        &flash_attention::run(&dev, &q, &k, &k, o.clone()).unwrap(),
        &want,
        TOL_F32,
        "flash_attention",
    );
    let (out, lse) = flash_attention_lse::run(&dev, &q, &k, &k, o.clone()).unwrap();
    close(&out, &want, TOL_F32, "flash_attention_lse");
    close(&lse, &want_lse, TOL_F32, "flash_attention_lse lse");
    close(
        &attention_reference::run(&dev, &q, &k, &k, o).unwrap(),
        &want,
        TOL_F32,
        "attention_reference",
    );
}

/// Empty key blocks are never read: values the band hides from every query
/// are NaN, which poisons the whole-tensor reference (0 · NaN) but not
/// flash or block-sparse attention.
#[test]
fn empty_blocks_are_skipped() {
    let dev = dev();
    let (s, d) = (64, 8);
    let q = data(&[1, 2, s, d], F32, 1);
    let k = data(&[1, 2, s, d], F32, 2);
    // Keys 32.. are visible to no query when query i sits at key i - 32.
    let v = HostTensor::from_fn(TensorSpec::new([1, 2, s, d], F32), |i| {
        if (i / d) % s >= 32 {
            f64::NAN
        } else {
            ((i % 13) as f64) / 13.0
        }
    });
    let o = FlashOptions::new()
        .causal(true)
        .q_offset(-32)
        .block_sizes(16, 16);
    let (want, _) = naive(&q, &k, &v, &o, &Extra::default());
    let flash = flash_attention::run(&dev, &q, &k, &v, o.clone()).unwrap();
    close(&flash, &want, TOL_F32, "flash with NaN in hidden values");
    let mask = AttentionMask::from(Mask::causal_offset(s, s, -32));
    let opts = FlashOptions::new().block_sizes(16, 16);
    let sparse = block_sparse_attention::run(&dev, &q, &k, &v, mask, opts).unwrap();
    close(
        &sparse,
        &want,
        TOL_F32,
        "block-sparse with NaN in hidden values",
    );
    let reference = attention_reference::run(&dev, &q, &k, &v, o).unwrap();
    assert!(reference
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .any(|x| x.is_nan()));
}

/// Block-sparse attention (static and dynamic layouts) against the
/// reference given the same dense mask, and against plain Rust.
#[test]
fn block_sparse_matches_the_dense_mask() {
    let dev = dev();
    let (b, hq, hkv, s, t, d) = (1, 4, 2, 37, 45, 8);
    let q = data(&[b, hq, s, d], F32, 1);
    let k = data(&[b, hkv, t, d], F32, 2);
    let v = data(&[b, hkv, t, d], F32, 3);
    let o = FlashOptions::new().block_sizes(16, 16);
    let dense = Mask::from_dense(s, t, noise(s * t, 3)).unwrap();
    let tiles: Vec<bool> = (0..s * t)
        .map(|e| ((e / t) / 8 + (e % t) / 16) % 3 != 0)
        .collect();
    let masks: Vec<(&str, AttentionMask, FlashOptions)> = vec![
        (
            "local",
            Mask::local(s, t, Some(9), Some(2)).into(),
            o.clone(),
        ),
        (
            "chunked",
            Mask::chunked_causal(s, t, 16).unwrap().into(),
            o.clone(),
        ),
        ("dense", dense.clone().into(), o.clone()),
        (
            "tiles & band",
            Mask::from_dense(s, t, tiles).unwrap().into(),
            o.clone().causal(true).window(Some(20), None),
        ),
        (
            "per head",
            MultiHeadMask::new(vec![
                Mask::causal(s, t),
                Mask::local(s, t, Some(4), Some(0)),
                dense.and(&Mask::causal(s, t)).unwrap(),
                Mask::full(s, t),
            ])
            .unwrap()
            .into(),
            o.clone().soft_cap(3.0),
        ),
    ];
    for (name, mask, opts) in &masks {
        let bits = mask.to_host_tensor(opts).unwrap();
        let mh = bits.shape()[0];
        let bits4 = bits.clone().reshape([1, mh, s, t]).unwrap();
        let x = Extra {
            mask: Some(&bits4),
            ..Default::default()
        };
        let plain = FlashOptions {
            causal: false,
            window: (None, None),
            ..opts.clone()
        };
        let (want, want_lse) = naive(&q, &k, &v, &plain, &x);
        let reference = Attention::Reference
            .run(&dev, &q, &k, &v, &inputs(&x), &plain)
            .unwrap();
        close(
            &reference.out,
            &want,
            TOL_F32,
            &format!("{name}: reference"),
        );
        let sparse = Attention::BlockSparse(mask.clone())
            .run(&dev, &q, &k, &v, &AttentionInputs::new(), opts)
            .unwrap();
        close(
            &sparse.out,
            &want,
            TOL_F32,
            &format!("{name}: block-sparse"),
        );
        close(
            &sparse.lse,
            &want_lse,
            TOL_F32,
            &format!("{name}: block-sparse lse"),
        );
        let t = DynamicMask::new(mask, opts).unwrap();
        let dynamic = block_sparse_attention_dynamic::run(
            &dev,
            &q,
            &k,
            &v,
            &t.bits,
            &t.num_nonempty,
            &t.kv_block_ids,
            &t.block_kinds,
            opts.clone(),
        )
        .unwrap();
        close(&dynamic, &want, TOL_F32, &format!("{name}: dynamic layout"));
    }
}

/// One dynamic-layout program serves every mask whose tables have the same
/// width; the block-sparse kernels equal flash attention on the band.
#[test]
fn dynamic_layout_reuses_one_program() {
    let dev = dev();
    let (s, d) = (40, 8);
    let q = data(&[2, 2, s, d], F32, 1);
    let k = data(&[2, 2, s, d], F32, 2);
    let o = FlashOptions::new().block_sizes(8, 8);
    let flash_opts = o.clone().causal(true).window(Some(10), None);
    let flash = flash_attention::run(&dev, &q, &k, &k, flash_opts.clone()).unwrap();
    let band = flash_opts.band_mask(s, s).unwrap();
    let sparse =
        block_sparse_attention::run(&dev, &q, &k, &k, band.clone().into(), o.clone()).unwrap();
    close(
        &sparse,
        &flash.to_f64_vec(),
        TOL_F32,
        "block-sparse vs flash",
    );
    let a = DynamicMask::new(&band.into(), &o).unwrap();
    let b = DynamicMask::new(&Mask::local(s, s, Some(3), Some(8)).into(), &o).unwrap();
    assert_eq!(a.kv_block_ids.shape(), b.kv_block_ids.shape());
    let run = |t: &DynamicMask| {
        block_sparse_attention_dynamic::run(
            &dev,
            &q,
            &k,
            &k,
            &t.bits,
            &t.num_nonempty,
            &t.kv_block_ids,
            &t.block_kinds,
            o.clone(),
        )
        .unwrap()
    };
    let first = run(&a);
    close(&first, &flash.to_f64_vec(), TOL_F32, "dynamic vs flash");
    let traces = tessel_dsl::thread_trace_count();
    let second = run(&b);
    assert_eq!(
        tessel_dsl::thread_trace_count(),
        traces,
        "a second mask recompiled"
    );
    let x = Extra {
        mask: Some(&b.bits.clone().reshape([1, 1, s, s]).unwrap()),
        ..Default::default()
    };
    let (want, _) = naive(&q, &k, &k, &o, &x);
    close(&second, &want, TOL_F32, "second dynamic mask");
}

fn kernel_error(e: Error) -> String {
    match e.as_kernel_error() {
        Some(k) => k.message.clone(),
        None => panic!("expected a kernel error, got {e}"),
    }
}

#[test]
fn bad_inputs_are_kernel_errors() {
    let spec = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    let o = FlashOptions::new().block_sizes(8, 8);
    let (q, k) = (spec(&[1, 6, 16, 8]), spec(&[1, 4, 16, 8]));
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.clone()).unwrap_err());
    assert!(m.contains("multiple of the key/value heads"), "{m}");
    let m = kernel_error(attention_reference::lower(&q, &k, &k, o.clone()).unwrap_err());
    assert!(m.contains("multiple of the key/value heads"), "{m}");
    let (q, k) = (spec(&[1, 4, 16, 8]), spec(&[1, 2, 16, 16]));
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.clone()).unwrap_err());
    assert!(m.contains("head dimension"), "{m}");
    let k = spec(&[1, 2, 16, 8]);
    let m =
        kernel_error(flash_attention::lower(&q, &k, &spec(&[1, 2, 15, 8]), o.clone()).unwrap_err());
    assert!(m.contains("same heads and length"), "{m}");
    let m =
        kernel_error(flash_attention::lower(&spec(&[4, 16, 8]), &k, &k, o.clone()).unwrap_err());
    assert!(m.contains("rank-4"), "{m}");
    let m =
        kernel_error(flash_attention::lower(&q, &k, &k, o.clone().block_sizes(0, 8)).unwrap_err());
    assert!(m.contains("block sizes"), "{m}");
    // The tile rule README states: multiples of 8.
    let m =
        kernel_error(flash_attention::lower(&q, &k, &k, o.clone().block_sizes(12, 8)).unwrap_err());
    assert!(
        m.contains("positive multiples of 8") && m.contains("12 x 8"),
        "{m}"
    );
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.clone().dropout(0.1)).unwrap_err());
    assert!(m.contains("needs a seed"), "{m}");
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.clone().soft_cap(-1.0)).unwrap_err());
    assert!(m.contains("soft-cap"), "{m}");

    // Optional inputs of the wrong shapes or dtypes, through the host runner.
    let dev = dev();
    let (qh, kh) = (data(&[1, 4, 16, 8], F32, 1), data(&[1, 2, 16, 8], F32, 2));
    let run = |x: AttentionInputs<'_>| {
        kernel_error(
            Attention::Flash
                .run(&dev, &qh, &kh, &kh, &x, &o)
                .unwrap_err(),
        )
    };
    let bias = data(&[1, 3, 16, 16], F32, 3);
    assert!(run(AttentionInputs::new().bias(&bias)).contains("bias must have shape"));
    let short = data(&[1, 4, 16, 15], F32, 3);
    assert!(run(AttentionInputs::new().bias(&short)).contains("bias must have shape"));
    let float_mask = data(&[1, 1, 16, 16], F32, 3);
    assert!(run(AttentionInputs::new().mask(&float_mask)).contains("mask must be pred"));
    let bad_mask = HostTensor::from_vec(vec![true; 16 * 17], [1, 1, 16, 17]).unwrap();
    assert!(run(AttentionInputs::new().mask(&bad_mask)).contains("mask must have shape"));
    let seg = HostTensor::from_vec(vec![0i32; 15], [1, 15]).unwrap();
    assert!(run(AttentionInputs::new().segment_ids(&seg, &seg)).contains("segment ids"));

    // Block-sparse: mask shape and head count; dynamic tables.
    let m = kernel_error(
        block_sparse_attention::lower(&q, &k, &k, Mask::causal(16, 15).into(), o.clone())
            .unwrap_err(),
    );
    assert!(m.contains("the mask is 16 x 15"), "{m}");
    let two = MultiHeadMask::new(vec![Mask::causal(16, 16), Mask::full(16, 16)]).unwrap();
    let m =
        kernel_error(block_sparse_attention::lower(&q, &k, &k, two.into(), o.clone()).unwrap_err());
    assert!(m.contains("2 heads"), "{m}");
    let t = DynamicMask::new(&Mask::causal(16, 16).into(), &o).unwrap();
    let wide = TensorSpec::new([3], S32);
    let m = kernel_error(
        block_sparse_attention_dynamic::lower(
            &q,
            &k,
            &k,
            t.bits.spec(),
            &wide,
            t.kv_block_ids.spec(),
            t.block_kinds.spec(),
            o.clone(),
        )
        .unwrap_err(),
    );
    assert!(m.contains("num_nonempty must be s32[2]"), "{m}");
    let bits = TensorSpec::new([1, 16, 16], F32);
    let m = kernel_error(
        block_sparse_attention_dynamic::lower(
            &q,
            &k,
            &k,
            &bits,
            t.num_nonempty.spec(),
            t.kv_block_ids.spec(),
            t.block_kinds.spec(),
            o,
        )
        .unwrap_err(),
    );
    assert!(m.contains("pred"), "{m}");
}

/// A sequence that would unroll too many query blocks is a kernel error at
/// trace time, not a program that grows without end; a band at a static
/// offset loops over its query blocks, so only the pairs its plan visits
/// while tracing are bounded.
#[test]
fn too_many_query_blocks_is_an_error() {
    let s = 1usize << 22;
    let spec = TensorSpec::new([1, 1, s, 8], F32);
    let o = FlashOptions::new().causal(true).block_sizes(512, 512);
    let mask = AttentionMask::from(Mask::causal(s, s));
    let err = block_sparse_attention::lower(&spec, &spec, &spec, mask, o.clone()).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert!(
        k.message.contains("8192 query blocks") && k.message.contains("unrolled"),
        "{}",
        k.message
    );
    // 32768² pairs: too many for the looped plan.
    let big = TensorSpec::new([1, 1, s << 2, 8], F32);
    let err = flash_attention::lower(&big, &big, &big, o.clone()).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert!(
        k.message.contains("32768 query blocks") && k.message.contains("pairs"),
        "{}",
        k.message
    );
    // 8192 query blocks of a causal band, 16 key blocks: one loop.
    let q = TensorSpec::new([1, 1, 1 << 16, 8], F32);
    let o = FlashOptions::new().causal(true).block_sizes(8, 4096);
    flash_attention::lower(&q, &q, &q, o)
        .expect("a looped band is not capped at 4096 query blocks");
}

/// More query blocks than the unrolled kernels allow, through the looped
/// band, against the plain-Rust reference.
#[test]
fn looped_band_runs_past_the_unroll_limit() {
    let dev = dev();
    let o = FlashOptions::new;
    for (opts, what) in [
        (o().block_sizes(8, 8), "full, 4097 query blocks"),
        (
            o().causal(true).block_sizes(8, 8),
            "causal, 4097 query blocks",
        ),
    ] {
        check_flash(
            &dev,
            [1, 1, 1, 32_780, 19, 4],
            &opts,
            &Extra::default(),
            what,
        );
    }
}
