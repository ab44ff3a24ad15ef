//! The serving kernels against a gather-then-attend reference in f64:
//! random, non-contiguous page assignments from a shared pool whose
//! unowned slots hold NaN; lengths 0, 1, page−1, page, page+1 and the
//! largest; GQA/MQA; windows; soft-cap; several pages per step.
//!
//! Tolerances (relative, `tol · (1 + |want|)`): f64 1e-10, f32 2e-5,
//! bf16 3e-2 (inputs rounded to bf16 before the reference sees them).

extern crate tessel_dsl as tessel;

#[path = "serving/reference.rs"]
mod reference;

use reference::{assert_close, attend, paged_case, values, Ref};
use tessel::prelude::*;
use tessel_kernels::serving::{
    decode_attention, paged_attention, ragged_paged_attention, ServeOptions,
};
use tessel_testing::{dev, Rng};

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 2e-5,
        _ => 3e-2,
    }
}

fn host(data: &[f64], shape: &[usize], dtype: DType) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), dtype), |i| data[i])
}

fn reference_of(hq: usize, hkv: usize, d: usize, o: &ServeOptions) -> Ref {
    Ref {
        hq,
        hkv,
        d,
        dv: d,
        scale: o.scale_for(d),
        window: o.window,
        cap: o.soft_cap,
    }
}

fn check_paged(lens: &[usize], page: usize, hq: usize, hkv: usize, o: ServeOptions, dtype: DType) {
    check_paged_in(lens, page, hq, hkv, o, dtype, 0);
}

/// [`check_paged`] with block tables at least `width` columns wide.
fn check_paged_in(
    lens: &[usize],
    page: usize,
    hq: usize,
    hkv: usize,
    o: ServeOptions,
    dtype: DType,
    width: usize,
) {
    let d = 8;
    let r = reference_of(hq, hkv, d, &o);
    let mut rng = Rng::new(lens.len() as u64 * 31 + page as u64);
    let case = paged_case(&mut rng, lens, page, &r, dtype, 2, width);
    let b = lens.len();
    let q = values(&mut rng, b * hq * d, dtype);
    let lengths: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
    let mut want = Vec::new();
    for (s, &len) in lens.iter().enumerate() {
        let qs = &q[s * hq * d..(s + 1) * hq * d];
        want.extend(attend(&r, qs, &case.seqs[s], len as i64 - 1, len));
    }
    // Both forms: the loop-free one (these tables are small enough for it
    // by default) and the traced loops over each sequence's blocks.
    for o in [o.max_dense_bytes(usize::MAX), o.max_dense_bytes(0)] {
        let got = paged_attention::run(
            &dev(),
            &host(&q, &[b, hq, d], dtype),
            &case.k_pages,
            &case.v_pages,
            &case.tables,
            &HostTensor::from_vec(lengths.clone(), [b]).unwrap(),
            o,
        )
        .unwrap()
        .to_f64_vec();
        let what = format!(
            "paged_attention lens {lens:?} page {page} heads {hq}/{hkv} width {} {o:?} {dtype}",
            case.width
        );
        assert_close(&got, &want, tol(dtype), &what);
    }
}

#[test]
fn paged_attention_matches_the_reference() {
    let page = 4;
    let lens = [0, 1, page - 1, page, page + 1, 23];
    for (hq, hkv) in [(4, 2), (3, 1), (2, 2)] {
        // 0: the default, enough pages for 512 keys (all 6 table columns here).
        for pages in [0, 1, 3] {
            let o = ServeOptions::new().pages_per_block(pages);
            check_paged(&lens, page, hq, hkv, o, F64);
        }
    }
    let o = ServeOptions::new().pages_per_block(2);
    check_paged(&lens, page, 4, 2, o.window(5), F64);
    check_paged(&lens, page, 4, 2, o.window(0), F64);
    check_paged(&lens, page, 4, 2, o.soft_cap(0.5).sm_scale(2.0), F64);
    check_paged(&lens, page, 4, 2, o, F32);
    // One query row per key/value head, the loop-free form's keys on two
    // axes (table column, page slot), with a window and a soft cap.
    check_paged(
        &lens,
        page,
        2,
        2,
        ServeOptions::new().window(5).soft_cap(0.5),
        F64,
    );
    check_paged(&lens, page, 2, 2, ServeOptions::new().window(0), F32);
    check_paged(&[17, 3, 0], 16, 4, 1, ServeOptions::new(), BF16);
    // The online softmax (no room for the two-pass logits buffer).
    let online = o.max_logits_bytes(0);
    check_paged(&lens, page, 4, 2, online, F64);
    check_paged(&lens, page, 3, 1, online.window(5), F64);
    check_paged(&[17, 3, 0], 16, 4, 1, online, BF16);
}

/// The two-pass form in chunks: block tables 32768 keys wide with chunks
/// of 4096 keys (a sequence pays for the chunks it reaches, not for the
/// table), and small tables in chunks of two blocks.
#[test]
fn two_pass_chunks_match_the_reference() {
    // f64, 2 key/value heads of 2 rows: 32 bytes of logits per key.
    let chunk = |keys: usize| ServeOptions::new().max_logits_bytes(32 * keys);
    let lens = [0, 1, 17, 100, 4096, 4097, 9000];
    check_paged_in(&lens, 16, 4, 2, chunk(4096), F64, 2048);
    check_paged_in(&lens, 16, 4, 2, chunk(4096).window(700), F64, 2048);
    let mix = [(1, 9000), (1, 30), (3, 40), (0, 9), (1, 4096), (2, 4097)];
    check_ragged_in(&mix, 2, 16, chunk(2048).block_q(3), F64, 2048);
    // Chunks of 2 blocks of 8 keys over sequences of up to 23 keys.
    let lens = [0, 1, 3, 4, 5, 23];
    let o = chunk(16).pages_per_block(2);
    check_paged(&lens, 4, 4, 2, o, F64);
    check_paged(&lens, 4, 4, 2, o.window(5), F64);
    check_paged(&lens, 4, 3, 1, o.soft_cap(0.5), F64);
    let mix = [(1, 1), (5, 5), (3, 9), (0, 4), (1, 17), (7, 12), (2, 2)];
    check_ragged(&mix, 3, 4, chunk(16).block_q(1).pages_per_block(2), F64);
}

/// (queries, keys) per sequence; rows past the last sequence are padding.
fn check_ragged(seqs: &[(usize, usize)], pad: usize, page: usize, o: ServeOptions, dtype: DType) {
    check_ragged_in(seqs, pad, page, o, dtype, 0);
}

/// [`check_ragged`] with block tables at least `width` columns wide.
fn check_ragged_in(
    seqs: &[(usize, usize)],
    pad: usize,
    page: usize,
    o: ServeOptions,
    dtype: DType,
    width: usize,
) {
    let (hq, hkv, d) = (4, 2, 8);
    let r = reference_of(hq, hkv, d, &o);
    let mut rng = Rng::new(seqs.len() as u64 * 7 + pad as u64);
    let lens: Vec<usize> = seqs.iter().map(|s| s.1).collect();
    let case = paged_case(&mut rng, &lens, page, &r, dtype, 3, width);
    let t: usize = seqs.iter().map(|s| s.0).sum::<usize>() + pad;
    let q = values(&mut rng, t * hq * d, dtype);
    let mut cu = vec![0i32];
    for s in seqs {
        cu.push(cu[cu.len() - 1] + s.0 as i32);
    }
    let b = seqs.len();
    let got = ragged_paged_attention::run(
        &dev(),
        &host(&q, &[t, hq, d], dtype),
        &case.k_pages,
        &case.v_pages,
        &case.tables,
        &HostTensor::from_vec(lens.iter().map(|&l| l as i32).collect(), [b]).unwrap(),
        &HostTensor::from_vec(cu.clone(), [b + 1]).unwrap(),
        o,
    )
    .unwrap()
    .to_f64_vec();
    let mut want = vec![0.0; t * hq * d];
    for (s, &(ql, kl)) in seqs.iter().enumerate() {
        for i in 0..ql {
            let row = cu[s] as usize + i;
            let pos = kl as i64 - ql as i64 + i as i64;
            let out = attend(
                &r,
                &q[row * hq * d..(row + 1) * hq * d],
                &case.seqs[s],
                pos,
                kl,
            );
            want[row * hq * d..(row + 1) * hq * d].copy_from_slice(&out);
        }
    }
    let what = format!("ragged_paged_attention {seqs:?} pad {pad} {o:?} {dtype}");
    assert_close(&got, &want, tol(dtype), &what);
}

#[test]
fn ragged_paged_attention_matches_the_reference() {
    // Decode (1 query), prefill (queries = keys), chunked prefill (fewer
    // queries than keys), no queries, ragged query tiles.
    let mix = [(1, 1), (5, 5), (3, 9), (0, 4), (1, 17), (7, 12), (2, 2)];
    // Tiles of 2 × 1, 3, 8 rows take the two-pass form, 2 × 16 the online
    // softmax with batched products. With tiles of 16 rows, a sequence of
    // at most 8 queries is one tile of 8 rows instead.
    for bq in [1, 3, 8, 16] {
        let o = ServeOptions::new().block_q(bq).pages_per_block(2);
        check_ragged(&mix, 3, 4, o, F64);
    }
    let long = [(9, 9), (1, 6), (20, 26), (8, 8), (0, 3), (17, 40)];
    let o = ServeOptions::new().block_q(16).pages_per_block(2);
    check_ragged(&long, 2, 4, o, F64);
    check_ragged(&long, 0, 4, o.window(5), F64);
    // The online softmax with one product per row.
    let o = ServeOptions::new().block_q(3).max_logits_bytes(0);
    check_ragged(&mix, 3, 4, o, F64);
    check_ragged(&mix, 0, 4, o.window(3), F64);
    let o = ServeOptions::new().block_q(4).pages_per_block(1);
    check_ragged(&mix, 0, 4, o.window(3), F64);
    check_ragged(&mix, 1, 4, o.soft_cap(1.0), F64);
    check_ragged(&[(6, 6), (0, 0), (1, 5)], 2, 4, o, F32);
}

/// Positions are where the first new token sits: one past the cache's
/// room for the new tokens, or negative, is a check failure naming the
/// entry, never a clamped read.
#[test]
fn decode_attention_refuses_positions_outside_the_cache() {
    let (b, h, s_max, d) = (2, 1, 6, 2);
    let q = HostTensor::zeros(TensorSpec::new([b, h, 2, d], F32));
    let kv = HostTensor::zeros(TensorSpec::new([b, h, s_max, d], F32));
    let run = |pos: [i32; 2]| {
        let pos = HostTensor::from_vec(pos.to_vec(), [b]).unwrap();
        decode_attention::run(&dev(), &q, &kv, &kv, &pos, ServeOptions::new())
    };
    assert!(run([0, 4]).is_ok());
    for (bad, entry) in [([0, 5], "positions[1] = 5"), ([-1, 0], "positions[0] = -1")] {
        let e = run(bad).unwrap_err().to_string();
        assert!(e.contains(entry) && e.contains("0..=4"), "{e}");
    }
}

#[test]
fn decode_attention_over_a_contiguous_cache_matches_the_reference() {
    for (sq, o) in [
        (1, ServeOptions::new().block_kv(4)),
        (3, ServeOptions::new().block_kv(4)),
        (2, ServeOptions::new().block_kv(3).window(4)),
        (1, ServeOptions::new().block_kv(16).soft_cap(0.7)),
        (1, ServeOptions::new().block_kv(3).max_logits_bytes(0)),
        (
            2,
            ServeOptions::new()
                .block_kv(4)
                .window(4)
                .max_logits_bytes(0),
        ),
    ] {
        check_contiguous(10, &[0, 1, 10, 7], sq, o);
    }
    // Chunks of 2 blocks of 3 keys, the last block read shifted back (a
    // chunk keeps one block of room before it): 32 bytes per key of
    // logits for one query, 64 for two.
    let o = ServeOptions::new().block_kv(3);
    check_contiguous(10, &[0, 1, 10, 7, 6], 1, o.max_logits_bytes(32 * 9));
    check_contiguous(
        10,
        &[0, 1, 10, 7, 6],
        2,
        o.max_logits_bytes(64 * 9).window(4),
    );
    // A cache of 32768 positions in chunks of 4000 keys, blocks of 500.
    let o = ServeOptions::new()
        .block_kv(500)
        .max_logits_bytes(32 * 4500);
    check_contiguous(32768, &[3999, 4000, 4001, 32768], 1, o);
    check_contiguous(
        32768,
        &[0, 17, 32760, 2500],
        2,
        o.max_logits_bytes(64 * 4500).window(1000),
    );
}

/// `decode_attention` of `sq` queries per sequence over a contiguous cache
/// of `s_max` positions holding `lens` keys after the step (a length under
/// `sq` counts as `sq`: the first query at position 0).
fn check_contiguous(s_max: usize, lens: &[usize], sq: usize, o: ServeOptions) {
    let lens: Vec<usize> = lens.iter().map(|&l| l.max(sq)).collect();
    let (b, hq, hkv, d) = (lens.len(), 4, 2, 8);
    let r = reference_of(hq, hkv, d, &o);
    let mut rng = Rng::new(sq as u64);
    // Keys past a sequence's length hold NaN.
    let mut k = vec![f64::NAN; b * hkv * s_max * d];
    let mut v = k.clone();
    let mut seqs = Vec::new();
    for (bi, &len) in lens.iter().enumerate() {
        let mut s = reference::Seq::default();
        for j in 0..len {
            let kj = values(&mut rng, hkv * d, F64);
            let vj = values(&mut rng, hkv * d, F64);
            for h in 0..hkv {
                let at = ((bi * hkv + h) * s_max + j) * d;
                k[at..at + d].copy_from_slice(&kj[h * d..(h + 1) * d]);
                v[at..at + d].copy_from_slice(&vj[h * d..(h + 1) * d]);
            }
            s.k.push(kj);
            s.v.push(vj);
        }
        seqs.push(s);
    }
    let q = values(&mut rng, b * hq * sq * d, F64);
    let got = decode_attention::run(
        &dev(),
        &host(&q, &[b, hq, sq, d], F64),
        &host(&k, &[b, hkv, s_max, d], F64),
        &host(&v, &[b, hkv, s_max, d], F64),
        &HostTensor::from_vec(lens.iter().map(|&l| (l - sq) as i32).collect(), [b]).unwrap(),
        o,
    )
    .unwrap()
    .to_f64_vec();
    let mut want = vec![0.0; b * hq * sq * d];
    for (bi, &len) in lens.iter().enumerate() {
        for i in 0..sq {
            let qi: Vec<f64> = (0..hq * d)
                .map(|x| q[((bi * hq + x / d) * sq + i) * d + x % d])
                .collect();
            let pos = len as i64 - sq as i64 + i as i64;
            let out = attend(&r, &qi, &seqs[bi], pos, len);
            for h in 0..hq {
                for x in 0..d {
                    want[((bi * hq + h) * sq + i) * d + x] = out[h * d + x];
                }
            }
        }
    }
    assert_close(
        &got,
        &want,
        1e-10,
        &format!("decode_attention Sq {sq} S_max {s_max} lens {lens:?} {o:?}"),
    );
}
