//! Writing into KV caches (paged, quantized, contiguous), attention over
//! quantized pages, and the serving kernels' errors.
//!
//! Tolerances: slots are compared exactly; int8 pages dequantize to
//! within half a step (`scale / 2`) of the written value, e4m3 pages to
//! within `2^-4` of it relative to the row's largest magnitude; attention
//! over quantized pages is compared (f32, `2e-5 · (1 + |want|)`) with the
//! reference over the dequantized values.

extern crate tessel_dsl as tessel;

#[path = "serving/reference.rs"]
mod reference;

use reference::{assert_close, attend, values, Ref, Seq};
use tessel::prelude::*;
use tessel_kernels::serving::{
    cache_update, kv_cache_update, kv_cache_update_quantized, paged_attention,
    paged_attention_quantized, ServeOptions,
};
use tessel_testing::{dev, kernel_error, Rng};

fn host(data: &[f64], shape: &[usize], dtype: DType) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), dtype), |i| data[i])
}

fn s32(v: &[i32]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

/// A ragged batch's new tokens: sequence `b` gets `q_lens[b]` tokens
/// ending at `kv_lens[b]`; the slot of each packed row (`None`: dropped).
struct Batch {
    cu: Vec<i32>,
    slots: Vec<Option<usize>>,
}

fn batch(
    q_lens: &[usize],
    kv_lens: &[usize],
    tables: &[i32],
    width: usize,
    page: usize,
    pad: usize,
) -> Batch {
    let mut cu = vec![0i32];
    let mut slots = Vec::new();
    for (b, (&ql, &kl)) in q_lens.iter().zip(kv_lens).enumerate() {
        cu.push(cu[b] + ql as i32);
        for i in 0..ql {
            let pos = kl as i64 - ql as i64 + i as i64;
            let slot = (pos >= 0 && (pos as usize) < width * page).then(|| {
                tables[b * width + pos as usize / page] as usize * page + pos as usize % page
            });
            slots.push(slot);
        }
    }
    slots.extend(std::iter::repeat_n(None, pad));
    Batch { cu, slots }
}

/// What [`update_pages`] ran and got: the result, the batch, the new
/// keys and values, and the pages' fill.
type Update = (
    tessel::Result<(HostTensor, HostTensor)>,
    Batch,
    Vec<f64>,
    Vec<f64>,
    Vec<f64>,
);

/// `kv_cache_update` of a batch with the given key counts, as run.
fn update_pages(kv_lens: [usize; 3]) -> Update {
    let (pages, page, hkv, d) = (6, 4, 2, 3);
    let width = 2;
    let tables = [5, 1, 2, 0, 3, 4];
    let q_lens = [3, 2, 2];
    let bt = batch(&q_lens, &kv_lens, &tables, width, page, 1);
    let t = bt.slots.len();
    let mut rng = Rng::new(3);
    let k = values(&mut rng, t * hkv * d, F32);
    let v = values(&mut rng, t * hkv * d, F32);
    let fill = vec![-7.0; pages * page * hkv * d];
    let out = kv_cache_update::run(
        &dev(),
        &host(&fill, &[pages, page, hkv, d], F32),
        &host(&fill, &[pages, page, hkv, d], F32),
        &host(&k, &[t, hkv, d], F32),
        &host(&v, &[t, hkv, d], F32),
        &HostTensor::from_vec(tables.to_vec(), [3, width]).unwrap(),
        &s32(&kv_lens.map(|l| l as i32)),
        &s32(&bt.cu),
    );
    (out, bt, k, v, fill)
}

#[test]
fn kv_cache_update_writes_exactly_the_new_slots() {
    // Sequence 2's new tokens sit at positions 6 and 7, in its second
    // page; row 7 is padding (no sequence covers it): not written.
    let (out, bt, k, v, fill) = update_pages([3, 6, 8]);
    let out = out.unwrap();
    let row = 2 * 3;
    for (got, src) in [(out.0.to_f64_vec(), &k), (out.1.to_f64_vec(), &v)] {
        let mut want = fill.clone();
        for (i, slot) in bt.slots.iter().enumerate() {
            if let Some(s) = slot {
                want[s * row..(s + 1) * row].copy_from_slice(&src[i * row..(i + 1) * row]);
            }
        }
        assert_eq!(got, want);
    }
    assert_eq!(bt.slots.iter().filter(|s| s.is_none()).count(), 1);
}

#[test]
fn kv_cache_update_refuses_writes_past_a_sequences_pages() {
    // Sequence 2's new tokens would sit at positions 8 and 9, past its two
    // pages: an error after the call, never a dropped write.
    let (out, ..) = update_pages([3, 6, 10]);
    match out {
        Err(tessel::Error::Check(c)) => {
            assert_eq!(c.kernel, "kv_cache_update");
            assert!(
                c.message.starts_with("kv_lens[2] = 10 is not in 0..=8"),
                "{}",
                c.message
            );
        }
        other => panic!("expected a check error, got {other:?}"),
    }
}

fn quantized_round_trip(dtype: DType) {
    let (pages, page, hq, hkv, d) = (7, 4, 4, 2, 8);
    let width = 3;
    // Prefill every sequence through the update kernel.
    let kv_lens = [9usize, 1, 0, 12];
    let tables = [6, 0, 3, 2, 1, 4, 5, 5, 5, 4, 1, 5];
    let bt = batch(&kv_lens, &kv_lens, &tables, width, page, 0);
    let t = bt.slots.len();
    let mut rng = Rng::new(11);
    let k = values(&mut rng, t * hkv * d, F32);
    let v = values(&mut rng, t * hkv * d, F32);
    let zeros_q = HostTensor::zeros(TensorSpec::new(vec![pages, page, hkv, d], dtype));
    let ones = HostTensor::from_fn(TensorSpec::new(vec![pages, page, hkv], F32), |_| 1.0);
    let lens_t = s32(&kv_lens.map(|l| l as i32));
    let tables_t = HostTensor::from_vec(tables.to_vec(), [4, width]).unwrap();
    let (kp, vp, ks, vs) = kv_cache_update_quantized::run(
        &dev(),
        &zeros_q,
        &zeros_q,
        &ones,
        &ones,
        &host(&k, &[t, hkv, d], F32),
        &host(&v, &[t, hkv, d], F32),
        &tables_t,
        &lens_t,
        &s32(&bt.cu),
    )
    .unwrap();
    assert_eq!(kp.spec().dtype, dtype);
    let deq = |p: &HostTensor, s: &HostTensor| -> Vec<f64> {
        let (p, s) = (p.to_f64_vec(), s.to_f64_vec());
        p.iter().enumerate().map(|(i, x)| x * s[i / d]).collect()
    };
    let (kd, vd) = (deq(&kp, &ks), deq(&vp, &vs));
    // Each written row dequantizes close to what was written.
    for (got, src) in [(&kd, &k), (&vd, &v)] {
        for (i, slot) in bt.slots.iter().enumerate() {
            let s = slot.unwrap();
            for h in 0..hkv {
                let w = &src[(i * hkv + h) * d..(i * hkv + h + 1) * d];
                let amax = w.iter().fold(0.0f64, |a, x| a.max(x.abs()));
                let step = if dtype == S8 {
                    amax / 127.0 / 2.0
                } else {
                    amax / 16.0
                };
                for x in 0..d {
                    let g = got[(s * hkv + h) * d + x];
                    assert!(
                        (g - w[x]).abs() <= step * 1.0001 + 1e-7,
                        "{dtype}: {g} vs {}",
                        w[x]
                    );
                }
            }
        }
    }
    // Attention over the quantized pages equals the reference over the
    // dequantized values, with grouped query rows (GQA) and one row per
    // key/value head (the loop-free form's two shapes).
    for hq in [hq, hkv] {
        let o = ServeOptions::new().pages_per_block(2);
        let r = Ref {
            hq,
            hkv,
            d,
            dv: d,
            scale: o.scale_for(d),
            window: None,
            cap: None,
        };
        let q = values(&mut rng, 4 * hq * d, F32);
        let mut want = Vec::new();
        for (b, &len) in kv_lens.iter().enumerate() {
            let mut s = Seq::default();
            for j in 0..len {
                let slot = tables[b * width + j / page] as usize * page + j % page;
                s.k.push(kd[slot * hkv * d..(slot + 1) * hkv * d].to_vec());
                s.v.push(vd[slot * hkv * d..(slot + 1) * hkv * d].to_vec());
            }
            want.extend(attend(
                &r,
                &q[b * hq * d..(b + 1) * hq * d],
                &s,
                len as i64 - 1,
                len,
            ));
        }
        // f64 queries keep f64 statistics: the f32 scales are widened (they
        // once met the f64 logits unconverted, which did not trace).
        // Both forms of the decode: loop-free and looped.
        let forms = [o.max_dense_bytes(usize::MAX), o.max_dense_bytes(0)];
        for ((q_dtype, tol), o) in [(F32, 2e-5), (F64, 1e-9)]
            .into_iter()
            .flat_map(|t| forms.map(|o| (t, o)))
        {
            let got = paged_attention_quantized::run(
                &dev(),
                &host(&q, &[4, hq, d], q_dtype),
                &kp,
                &vp,
                &ks,
                &vs,
                &tables_t,
                &lens_t,
                o,
            )
            .unwrap()
            .to_f64_vec();
            assert_close(
                &got,
                &want,
                tol,
                &format!("paged_attention_quantized {dtype}, {q_dtype} queries, {o:?}"),
            );
        }
    }
}

#[test]
fn int8_pages_round_trip_and_attend() {
    quantized_round_trip(S8);
}

#[test]
fn fp8_pages_round_trip_and_attend() {
    quantized_round_trip(F8E4M3FN);
}

/// `cache_update` of three new tokens per sequence at `positions` into
/// caches of 6 positions.
fn update_cache(positions: &[i32]) -> tessel::Result<(HostTensor, HostTensor)> {
    let (b, h, s, d, t) = (3, 1, 6, 2, 3);
    let fill = vec![0.0; b * h * s * d];
    let new: Vec<f64> = (0..b * h * t * d).map(|i| i as f64 + 1.0).collect();
    cache_update::run(
        &dev(),
        &host(&fill, &[b, h, s, d], F32),
        &host(&fill, &[b, h, s, d], F32),
        &host(&new, &[b, h, t, d], F32),
        &host(&new, &[b, h, t, d], F32),
        &s32(positions),
    )
}

#[test]
fn cache_update_writes_at_positions_and_refuses_what_does_not_fit() {
    let (b, s, d, t) = (3, 6, 2, 3);
    let new: Vec<f64> = (0..b * t * d).map(|i| i as f64 + 1.0).collect();
    let (kc, vc) = update_cache(&[1, 0, 3]).unwrap();
    let mut want = vec![0.0; b * s * d];
    for (bi, pos) in [(0usize, 1usize), (1, 0), (2, 3)] {
        for j in 0..t {
            for x in 0..d {
                want[(bi * s + pos + j) * d + x] = new[(bi * t + j) * d + x];
            }
        }
    }
    assert_eq!(kc.to_f64_vec(), want);
    assert_eq!(vc.to_f64_vec(), want);
    for (positions, message) in [
        ([1, 4, 3], "positions[1] = 4 is not in 0..=3"),
        ([-1, 0, 0], "positions[0] = -1 is not in 0..=3"),
    ] {
        match update_cache(&positions) {
            Err(tessel::Error::Check(c)) => assert_eq!(c.message, message),
            other => panic!("expected a check error, got {other:?}"),
        }
    }
}

#[test]
fn serving_errors_name_the_kernel_and_the_shapes() {
    let f =
        |shape: &[usize], dtype: DType| HostTensor::zeros(TensorSpec::new(shape.to_vec(), dtype));
    let o = ServeOptions::new();
    // A 4-d query (the paged kernel takes one query per sequence).
    let e = kernel_error(paged_attention::run(
        &dev(),
        &f(&[2, 4, 1, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[2, 3], S32),
        &f(&[2], S32),
        o,
    ));
    assert!(e.to_string().contains("paged_attention"), "{e}");
    assert!(e.to_string().contains("[B, Hq, D]"), "{e}");
    // int8 pages without scales.
    let e = kernel_error(paged_attention::run(
        &dev(),
        &f(&[2, 4, 8], F32),
        &f(&[4, 4, 2, 8], S8),
        &f(&[4, 4, 2, 8], S8),
        &f(&[2, 3], S32),
        &f(&[2], S32),
        o,
    ));
    assert!(e.to_string().contains("quantized"), "{e}");
    // Heads that do not group.
    let e = kernel_error(paged_attention::run(
        &dev(),
        &f(&[2, 3, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[2, 3], S32),
        &f(&[2], S32),
        o,
    ));
    assert!(e.to_string().contains("multiple"), "{e}");
    // Lengths of the wrong batch.
    let e = kernel_error(paged_attention::run(
        &dev(),
        &f(&[2, 4, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[2, 3], S32),
        &f(&[3], S32),
        o,
    ));
    assert!(e.to_string().contains("lengths must be s32 [2]"), "{e}");
    // The error points at the line that called the kernel function, not
    // into the checks.
    assert!(e.to_string().contains("serving/mod.rs"), "{e}");
    // A soft-cap of 0.
    let e = kernel_error(paged_attention::run(
        &dev(),
        &f(&[2, 4, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[2, 3], S32),
        &f(&[2], S32),
        o.soft_cap(0.0),
    ));
    assert!(e.to_string().contains("soft-cap"), "{e}");
    // An update whose tokens have another head count than the pages.
    let e = kernel_error(kv_cache_update::run(
        &dev(),
        &f(&[4, 4, 2, 8], F32),
        &f(&[4, 4, 2, 8], F32),
        &f(&[3, 1, 8], F32),
        &f(&[3, 1, 8], F32),
        &f(&[1, 3], S32),
        &f(&[1], S32),
        &f(&[2], S32),
    ));
    assert!(e.to_string().contains("kv_cache_update"), "{e}");
    assert!(e.to_string().contains("serving/mod.rs"), "{e}");
}
