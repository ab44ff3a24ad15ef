//! Plain references for the serving kernels: gather a sequence's keys from
//! its pages, then attend in f64; and random paged caches whose unowned
//! slots hold NaN (so a kernel that reads one into a result fails).

#![allow(dead_code)]

use tessel_dsl::prelude::*;
use tessel_testing::Rng;

/// The static parameters of the reference.
#[derive(Clone, Copy, Debug)]
pub struct Ref {
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f64,
    pub window: Option<usize>,
    pub cap: Option<f64>,
}

/// One sequence's keys and values, each key `[Hkv * D]`, each value
/// `[Hkv * Dv]`.
#[derive(Clone, Debug, Default)]
pub struct Seq {
    pub k: Vec<Vec<f64>>,
    pub v: Vec<Vec<f64>>,
}

/// The attention of one query `q` `[Hq * D]` at position `pos` over the
/// first `len` keys of `s`: `[Hq * Dv]`, zeros when it sees no key.
pub fn attend(r: &Ref, q: &[f64], s: &Seq, pos: i64, len: usize) -> Vec<f64> {
    let g = r.hq / r.hkv;
    let mut out = vec![0.0; r.hq * r.dv];
    for h in 0..r.hq {
        let kh = h / g;
        let mut logits = Vec::new();
        for j in 0..len {
            let j_i = j as i64;
            let visible = j_i <= pos && r.window.is_none_or(|w| j_i >= pos - w as i64);
            if !visible {
                continue;
            }
            let dot: f64 = (0..r.d)
                .map(|x| q[h * r.d + x] * s.k[j][kh * r.d + x])
                .sum();
            let mut l = dot * r.scale;
            if let Some(c) = r.cap {
                l = c * (l / c).tanh();
            }
            logits.push((j, l));
        }
        if logits.is_empty() {
            continue;
        }
        let m = logits.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|x| (x.1 - m).exp()).sum();
        for &(j, l) in &logits {
            let p = (l - m).exp() / z;
            for x in 0..r.dv {
                out[h * r.dv + x] += p * s.v[j][kh * r.dv + x];
            }
        }
    }
    out
}

/// A random paged cache: `lens[b]` tokens of sequence `b` in pages taken
/// from a shuffled pool of `num_pages` pages of `page` tokens; every slot
/// no sequence owns holds NaN, and table entries past a sequence's pages
/// name other sequences' pages. The tables are at least `min_width`
/// columns wide (a server's tables fit its longest context, not the
/// sequences at hand).
pub struct PagedCase {
    pub k_pages: HostTensor,
    pub v_pages: HostTensor,
    pub tables: HostTensor,
    pub seqs: Vec<Seq>,
    pub width: usize,
}

pub fn paged_case(
    rng: &mut Rng,
    lens: &[usize],
    page: usize,
    r: &Ref,
    dtype: DType,
    spare_pages: usize,
    min_width: usize,
) -> PagedCase {
    let need: Vec<usize> = lens.iter().map(|l| l.div_ceil(page)).collect();
    let width = (need.iter().copied().max().unwrap_or(0).max(1) + 1).max(min_width);
    let num_pages = need.iter().sum::<usize>() + spare_pages + 1;
    let mut order: Vec<usize> = (0..num_pages).collect();
    for i in (1..order.len()).rev() {
        let j = rng.int(0, i as i64) as usize;
        order.swap(i, j);
    }
    let kw = r.hkv * r.d;
    let vw = r.hkv * r.dv;
    let mut kp = vec![f64::NAN; num_pages * page * kw];
    let mut vp = vec![f64::NAN; num_pages * page * vw];
    let round = |x: f64| dtype.decode_f64(&dtype.encode_f64(x));
    let mut tables = Vec::new();
    let mut seqs = Vec::new();
    let mut next = 0;
    for (b, &len) in lens.iter().enumerate() {
        let pages = &order[next..next + need[b]];
        next += need[b];
        let mut s = Seq::default();
        for j in 0..len {
            let slot = pages[j / page] * page + j % page;
            let k: Vec<f64> = (0..kw).map(|_| round(rng.uniform(-1.0, 1.0))).collect();
            let v: Vec<f64> = (0..vw).map(|_| round(rng.uniform(-1.0, 1.0))).collect();
            kp[slot * kw..(slot + 1) * kw].copy_from_slice(&k);
            vp[slot * vw..(slot + 1) * vw].copy_from_slice(&v);
            s.k.push(k);
            s.v.push(v);
        }
        seqs.push(s);
        for c in 0..width {
            let id = pages
                .get(c)
                .copied()
                .unwrap_or_else(|| order[rng.int(0, num_pages as i64 - 1) as usize]);
            tables.push(id as i32);
        }
    }
    let host = |data: &[f64], shape: Vec<usize>| {
        HostTensor::from_fn(TensorSpec::new(shape, dtype), |i| data[i])
    };
    PagedCase {
        k_pages: host(&kp, vec![num_pages, page, r.hkv, r.d]),
        v_pages: host(&vp, vec![num_pages, page, r.hkv, r.dv]),
        tables: HostTensor::from_vec(tables, [lens.len(), width]).unwrap(),
        seqs,
        width,
    }
}

/// Random values in `[-1, 1)` rounded to `dtype`.
pub fn values(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|_| dtype.decode_f64(&dtype.encode_f64(rng.uniform(-1.0, 1.0))))
        .collect()
}

/// `|got - want| <= tol * (1 + |want|)` everywhere, with context.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}
