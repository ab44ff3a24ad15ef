//! A decode loop of 32 steps over a paged cache compiles exactly one
//! program: every length and position is traced. (Alone in its test
//! binary, so the device's compile counters see only this loop.)

extern crate tessel_dsl as tessel;

#[path = "serving/reference.rs"]
mod reference;

use reference::{assert_close, attend, values, Ref, Seq};
use tessel::prelude::*;
use tessel_kernels::serving::{
    kv_cache_update_with, paged_attention_with, PagePool, PagedKv, ServeOptions,
};
use tessel_testing::{dev, Rng};

/// One decode step: write each sequence's new key and value, then attend
/// with its new query over its whole cache.
#[tpu_kernel(precision = "highest", donate(k_pages, v_pages))]
#[allow(clippy::too_many_arguments)]
fn decode_step(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    k_pages: Tensor,
    v_pages: Tensor,
    tables: Tensor,
    lens: Tensor,
    cu: Tensor,
) -> (Tensor, Tensor, Tensor) {
    let kv = kv_cache_update_with(
        &PagedKv::new(k_pages, v_pages),
        k_new,
        v_new,
        tables,
        lens,
        cu,
    );
    let out = paged_attention_with(q, &kv, tables, lens, ServeOptions::new().pages_per_block(2));
    (out, kv.k_pages, kv.v_pages)
}

#[test]
fn thirty_two_decode_steps_compile_one_program() {
    let (b, hq, hkv, d, page, pages) = (3, 4, 2, 8, 4, 40);
    let dev = dev();
    let mut pool = PagePool::new(pages, page);
    let mut rng = Rng::new(5);
    let start = [0usize, 5, 2];
    let width = 12;
    let mut seqs = vec![Seq::default(); b];
    let mut kp = dev
        .to_device(&HostTensor::zeros(TensorSpec::new(
            vec![pages, page, hkv, d],
            F32,
        )))
        .unwrap();
    let mut vp = dev
        .to_device(&HostTensor::zeros(TensorSpec::new(
            vec![pages, page, hkv, d],
            F32,
        )))
        .unwrap();
    // Earlier tokens, written by a first step that is not counted.
    let mut lens: Vec<usize> = start.to_vec();
    let cu = HostTensor::from_vec((0..=b as i32).collect::<Vec<_>>(), [b + 1]).unwrap();
    let cu = dev.to_device(&cu).unwrap();
    let before = dev.cache().stats();
    let mut last = Vec::new();
    let mut last_q = Vec::new();
    for step in 0..32 {
        for (s, len) in lens.iter_mut().enumerate() {
            *len += 1;
            pool.reserve(s as u64, *len).unwrap();
        }
        let tables = pool
            .block_tables(&[0, 1, 2], width)
            .and_then(|t| dev.to_device(&t))
            .unwrap();
        let q = values(&mut rng, b * hq * d, F32);
        let k = values(&mut rng, b * hkv * d, F32);
        let v = values(&mut rng, b * hkv * d, F32);
        for s in 0..b {
            seqs[s].k.push(k[s * hkv * d..(s + 1) * hkv * d].to_vec());
            seqs[s].v.push(v[s * hkv * d..(s + 1) * hkv * d].to_vec());
        }
        let up = |x: &[f64], shape: &[usize]| {
            dev.to_device(&HostTensor::from_fn(
                TensorSpec::new(shape.to_vec(), F32),
                |i| x[i],
            ))
            .unwrap()
        };
        let lens_t = HostTensor::from_vec(lens.iter().map(|&l| l as i32).collect(), [b]).unwrap();
        let lens_t = dev.to_device(&lens_t).unwrap();
        let (out, k2, v2) = decode_step::call(
            &dev,
            &up(&q, &[b, hq, d]),
            &up(&k, &[b, hkv, d]),
            &up(&v, &[b, hkv, d]),
            &kp,
            &vp,
            &tables,
            &lens_t,
            &cu,
        )
        .unwrap();
        kp = k2;
        vp = v2;
        if step == 31 {
            last = out.to_host().unwrap().to_f64_vec();
            last_q = q;
        }
    }
    let after = dev.cache().stats();
    assert_eq!(
        after.compiles - before.compiles,
        1,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.misses - before.misses, 1);
    assert_eq!(after.hits - before.hits, 31);
    // Sequences that started with earlier (zero) keys: the reference sees
    // them as zeros too.
    let r = Ref {
        hq,
        hkv,
        d,
        dv: d,
        scale: 1.0 / (d as f64).sqrt(),
        window: None,
        cap: None,
    };
    let mut want = Vec::new();
    for s in 0..b {
        let mut full = Seq::default();
        for _ in 0..start[s] {
            full.k.push(vec![0.0; hkv * d]);
            full.v.push(vec![0.0; hkv * d]);
        }
        full.k.extend(seqs[s].k.iter().cloned());
        full.v.extend(seqs[s].v.iter().cloned());
        let len = lens[s];
        want.extend(attend(
            &r,
            &last_q[s * hq * d..(s + 1) * hq * d],
            &full,
            len as i64 - 1,
            len,
        ));
    }
    assert_close(&last, &want, 2e-5, "the 32nd step");
}
