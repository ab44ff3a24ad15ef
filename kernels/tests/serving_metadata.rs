//! A bad-input sweep over the serving and dynamic block-sparse kernels:
//! random metadata, valid and invalid (page ids and block ids out of
//! range or listed twice, lengths past the tables, offsets that fall or
//! overrun), each judged by a plain-Rust validator. A valid call must
//! match the f64 reference (tolerance `1e-5 · (1 + |want|)` in f32); an
//! invalid one must be `Error::Check`. No call may return a wrong answer.
//! One program per kernel: the metadata are traced values.

extern crate tessel_dsl as tessel;

#[path = "serving/reference.rs"]
mod reference;

use reference::{assert_close, attend, values, Ref, Seq};
use tessel::prelude::*;
use tessel_kernels::attention::{block_sparse_attention_dynamic, FlashOptions};
use tessel_kernels::serving::{
    kv_cache_update, paged_attention, ragged_paged_attention, ServeOptions,
};
use tessel_testing::{dev, Rng};

const TOL: f64 = 1e-5;
/// Random metadata per kernel.
const CASES: usize = 300;

/// The pool of every sweep: `PAGES` pages of `PAGE` tokens, one key/value
/// head of dimension `D`; `B` sequences of tables `WIDTH` pages wide.
const PAGES: usize = 6;
const PAGE: usize = 4;
const WIDTH: usize = 3;
const B: usize = 3;
const D: usize = 4;

fn r() -> Ref {
    Ref {
        hq: 2,
        hkv: 1,
        d: D,
        dv: D,
        scale: 0.5,
        window: None,
        cap: None,
    }
}

fn s32(v: &[i32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

fn f32s(v: &[f64], shape: &[usize]) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), |i| v[i])
}

/// A pool's keys and values, `[PAGES * PAGE]` slots of `D`.
struct Pool {
    k: Vec<f64>,
    v: Vec<f64>,
}

impl Pool {
    fn new(rng: &mut Rng) -> Pool {
        let n = PAGES * PAGE * D;
        Pool {
            k: values(rng, n, F32),
            v: values(rng, n, F32),
        }
    }

    /// The keys of a sequence of `len` tokens in pages `row`.
    fn seq(&self, row: &[i32], len: usize) -> Seq {
        let mut s = Seq::default();
        for j in 0..len {
            let slot = row[j / PAGE] as usize * PAGE + j % PAGE;
            s.k.push(self.k[slot * D..(slot + 1) * D].to_vec());
            s.v.push(self.v[slot * D..(slot + 1) * D].to_vec());
        }
        s
    }

    fn tensors(&self) -> (HostTensor, HostTensor) {
        let shape = [PAGES, PAGE, 1, D];
        (f32s(&self.k, &shape), f32s(&self.v, &shape))
    }
}

/// Random tables and lengths: a valid plan (distinct pages per row,
/// lengths within the row), corrupted in one way about half the time.
fn metadata(rng: &mut Rng, max_len: usize) -> (Vec<i32>, Vec<i32>) {
    let mut tables = Vec::new();
    let mut lens = Vec::new();
    for _ in 0..B {
        let mut pool: Vec<i32> = (0..PAGES as i32).collect();
        for i in (1..pool.len()).rev() {
            pool.swap(i, rng.int(0, i as i64) as usize);
        }
        tables.extend(&pool[..WIDTH]);
        lens.push(rng.int(0, max_len as i64) as i32);
    }
    match rng.int(0, 7) {
        0 => tables[rng.int(0, (B * WIDTH - 1) as i64) as usize] = rng.int(-3, -1) as i32,
        1 => tables[rng.int(0, (B * WIDTH - 1) as i64) as usize] = rng.int(6, 100) as i32,
        2 => {
            let row = rng.int(0, B as i64 - 1) as usize * WIDTH;
            tables[row + 1] = tables[row];
        }
        3 => lens[rng.int(0, B as i64 - 1) as usize] = rng.int(-3, -1) as i32,
        4 => lens[rng.int(0, B as i64 - 1) as usize] = rng.int(13, 40) as i32,
        5 => tables[rng.int(0, (B * WIDTH - 1) as i64) as usize] = 1 << 30,
        _ => {}
    }
    (tables, lens)
}

/// Whether tables and lengths are what the kernels accept: lengths in
/// `0 ..= WIDTH * PAGE`, the pages a sequence uses in the pool and
/// distinct in its row.
fn tables_valid(tables: &[i32], lens: &[i32]) -> bool {
    lens.iter().enumerate().all(|(b, &len)| {
        if len < 0 || len as usize > WIDTH * PAGE {
            return false;
        }
        let used = &tables[b * WIDTH..b * WIDTH + (len as usize).div_ceil(PAGE)];
        used.iter().all(|&p| (0..PAGES as i32).contains(&p))
            && used.iter().enumerate().all(|(i, p)| !used[..i].contains(p))
    })
}

fn expect_check<T: std::fmt::Debug>(got: tessel::Result<T>, what: &str) {
    match got {
        Err(tessel::Error::Check(_)) => {}
        other => panic!("{what}: invalid metadata must be a check error, got {other:?}"),
    }
}

#[test]
fn paged_attention_answers_right_or_refuses() {
    let (dev, r) = (dev(), r());
    let mut rng = Rng::new(41);
    let pool = Pool::new(&mut rng);
    let (kp, vp) = pool.tensors();
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..CASES {
        let (tables, lens) = metadata(&mut rng, WIDTH * PAGE);
        let q = values(&mut rng, B * r.hq * D, F32);
        let got = paged_attention::run(
            &dev,
            &f32s(&q, &[B, r.hq, D]),
            &kp,
            &vp,
            &s32(&tables, &[B, WIDTH]),
            &s32(&lens, &[B]),
            ServeOptions::new().sm_scale(r.scale),
        );
        let what = format!("paged case {case}: tables {tables:?}, lengths {lens:?}");
        if !tables_valid(&tables, &lens) {
            invalid += 1;
            expect_check(got, &what);
            continue;
        }
        valid += 1;
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}")).to_f64_vec();
        let mut want = Vec::new();
        for b in 0..B {
            let len = lens[b] as usize;
            let s = pool.seq(&tables[b * WIDTH..], len);
            let qb = &q[b * r.hq * D..(b + 1) * r.hq * D];
            want.extend(attend(&r, qb, &s, len as i64 - 1, len));
        }
        assert_close(&got, &want, TOL, &what);
    }
    assert!(
        valid > 20 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

/// Random query offsets over `t` packed queries, valid about half the time.
fn offsets(rng: &mut Rng, kv_lens: &[i32], t: usize) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &kl in kv_lens {
        let room = (t as i32 - cu[cu.len() - 1]).min(kl.max(0));
        cu.push(cu[cu.len() - 1] + rng.int(0, room.max(0) as i64) as i32);
    }
    match rng.int(0, 5) {
        0 => cu[0] = -2,
        1 => cu[B] = t as i32 + rng.int(1, 40) as i32,
        2 => cu.swap(1, 2),
        3 => cu[1] = cu[1].max(1) + kv_lens[0].max(0) + 1,
        _ => {}
    }
    cu
}

/// Whether `cu` fits `t` queries and each sequence's keys cover its queries.
fn offsets_valid(cu: &[i32], kv_lens: &[i32], t: usize) -> bool {
    cu[0] >= 0
        && cu[B] <= t as i32
        && cu.windows(2).all(|w| w[0] <= w[1])
        && (0..B).all(|b| cu[b + 1] - cu[b] <= kv_lens[b])
}

#[test]
fn ragged_paged_attention_answers_right_or_refuses() {
    let (dev, r, t) = (dev(), r(), 7);
    let mut rng = Rng::new(42);
    let pool = Pool::new(&mut rng);
    let (kp, vp) = pool.tensors();
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..CASES {
        let (tables, kv_lens) = metadata(&mut rng, WIDTH * PAGE);
        let cu = offsets(&mut rng, &kv_lens, t);
        let q = values(&mut rng, t * r.hq * D, F32);
        let got = ragged_paged_attention::run(
            &dev,
            &f32s(&q, &[t, r.hq, D]),
            &kp,
            &vp,
            &s32(&tables, &[B, WIDTH]),
            &s32(&kv_lens, &[B]),
            &s32(&cu, &[B + 1]),
            ServeOptions::new().sm_scale(r.scale).block_q(2),
        );
        let what = format!("ragged case {case}: tables {tables:?}, kv_lens {kv_lens:?}, cu {cu:?}");
        if !(tables_valid(&tables, &kv_lens) && offsets_valid(&cu, &kv_lens, t)) {
            invalid += 1;
            expect_check(got, &what);
            continue;
        }
        valid += 1;
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}")).to_f64_vec();
        let row = r.hq * D;
        let mut want = vec![0.0; t * row];
        for b in 0..B {
            let len = kv_lens[b] as usize;
            let s = pool.seq(&tables[b * WIDTH..], len);
            let (lo, hi) = (cu[b] as usize, cu[b + 1] as usize);
            for (i, at) in (lo..hi).enumerate() {
                let pos = len as i64 - (hi - lo) as i64 + i as i64;
                let o = attend(&r, &q[at * row..(at + 1) * row], &s, pos, len);
                want[at * row..(at + 1) * row].copy_from_slice(&o);
            }
        }
        assert_close(&got, &want, TOL, &what);
    }
    assert!(
        valid > 15 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn kv_cache_update_writes_right_or_refuses() {
    let (dev, t) = (dev(), 7);
    let mut rng = Rng::new(43);
    let fill = vec![-7.0; PAGES * PAGE * D];
    let pages = f32s(&fill, &[PAGES, PAGE, 1, D]);
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..CASES {
        let (tables, kv_lens) = metadata(&mut rng, WIDTH * PAGE);
        let cu = offsets(&mut rng, &kv_lens, t);
        let k = values(&mut rng, t * D, F32);
        let got = kv_cache_update::run(
            &dev,
            &pages,
            &pages,
            &f32s(&k, &[t, 1, D]),
            &f32s(&k, &[t, 1, D]),
            &s32(&tables, &[B, WIDTH]),
            &s32(&kv_lens, &[B]),
            &s32(&cu, &[B + 1]),
        );
        let what = format!("update case {case}: tables {tables:?}, kv_lens {kv_lens:?}, cu {cu:?}");
        if !(tables_valid(&tables, &kv_lens) && offsets_valid(&cu, &kv_lens, t)) {
            invalid += 1;
            expect_check(got, &what);
            continue;
        }
        valid += 1;
        let (got_k, _) = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut want = fill.clone();
        for b in 0..B {
            let (lo, hi) = (cu[b] as usize, cu[b + 1] as usize);
            for (i, at) in (lo..hi).enumerate() {
                let pos = kv_lens[b] as usize - (hi - lo) + i;
                let slot = tables[b * WIDTH + pos / PAGE] as usize * PAGE + pos % PAGE;
                want[slot * D..(slot + 1) * D].copy_from_slice(&k[at * D..(at + 1) * D]);
            }
        }
        assert_eq!(got_k.to_f64_vec(), want, "{what}");
    }
    assert!(
        valid > 15 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn dynamic_block_sparse_attention_answers_right_or_refuses() {
    // 20 queries and keys in blocks of 8: 3 query blocks, 3 key blocks.
    let (s, bs, nb, width) = (20, 8, 3, 3);
    let dev = dev();
    let mut rng = Rng::new(44);
    let x = |rng: &mut Rng| values(rng, s * D, F32);
    let (q, k, v) = (x(&mut rng), x(&mut rng), x(&mut rng));
    let shape = [1, 1, s, D];
    let (qt, kt, vt) = (f32s(&q, &shape), f32s(&k, &shape), f32s(&v, &shape));
    let opts = FlashOptions::new().block_sizes(bs, bs).sm_scale(0.5);
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..CASES {
        let bits: Vec<bool> = (0..s * s).map(|_| rng.int(0, 3) > 0).collect();
        let mut counts = Vec::new();
        let mut ids = Vec::new();
        let mut kinds = Vec::new();
        for _ in 0..nb {
            let mut order: Vec<i32> = (0..nb as i32).collect();
            for i in (1..nb).rev() {
                order.swap(i, rng.int(0, i as i64) as usize);
            }
            counts.push(rng.int(1, width as i64) as i32);
            ids.extend(&order);
            kinds.extend((0..width).map(|_| rng.int(1, 2) as i32));
        }
        match rng.int(0, 6) {
            0 => ids[rng.int(0, 8) as usize] = rng.int(-9, -1) as i32,
            1 => ids[rng.int(0, 8) as usize] = [3, 7, 1 << 30][rng.int(0, 2) as usize],
            2 => ids[1] = ids[0],
            3 => counts[rng.int(0, 2) as usize] = [-1, 4][rng.int(0, 1) as usize],
            4 => kinds[0] = [0, 3][rng.int(0, 1) as usize],
            _ => {}
        }
        let got = block_sparse_attention_dynamic::run(
            &dev,
            &qt,
            &kt,
            &vt,
            &HostTensor::from_vec(bits.clone(), [1, s, s]).unwrap(),
            &s32(&counts, &[nb]),
            &s32(&ids, &[nb, width]),
            &s32(&kinds, &[nb, width]),
            opts,
        );
        let what =
            format!("block-sparse case {case}: counts {counts:?}, ids {ids:?}, kinds {kinds:?}");
        let ok = (0..nb).all(|i| {
            let n = counts[i];
            if !(0..=width as i32).contains(&n) {
                return false;
            }
            let row = &ids[i * width..i * width + n as usize];
            let kind = &kinds[i * width..i * width + n as usize];
            row.iter().all(|j| (0..nb as i32).contains(j))
                && row.iter().enumerate().all(|(a, j)| !row[..a].contains(j))
                && kind.iter().all(|c| *c == 1 || *c == 2)
                // The last key block holds keys past the end: never full.
                && row.iter().zip(kind).all(|(&j, &c)| j != nb as i32 - 1 || c == 1)
        });
        if !ok {
            invalid += 1;
            expect_check(got, &what);
            continue;
        }
        valid += 1;
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}")).to_f64_vec();
        // Query row `a` sees the keys of its block's listed key blocks:
        // all of a full block, the allowed bits of a partial one.
        let mut want = vec![0.0; s * D];
        for a in 0..s {
            let i = a / bs;
            let mut seen = Vec::new();
            for t in 0..counts[i] as usize {
                let (j, kind) = (ids[i * width + t] as usize, kinds[i * width + t]);
                for c in j * bs..((j + 1) * bs).min(s) {
                    if kind == 2 || bits[a * s + c] {
                        seen.push(c);
                    }
                }
            }
            if seen.is_empty() {
                continue;
            }
            let logit = |c: usize| 0.5 * (0..D).map(|x| q[a * D + x] * k[c * D + x]).sum::<f64>();
            let m = seen
                .iter()
                .map(|&c| logit(c))
                .fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = seen.iter().map(|&c| (logit(c) - m).exp()).sum();
            for &c in &seen {
                let p = (logit(c) - m).exp() / z;
                for x in 0..D {
                    want[a * D + x] += p * v[c * D + x];
                }
            }
        }
        assert_close(&got, &want, TOL, &what);
    }
    assert!(
        valid > 15 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

/// An empty batch gives an empty (or all-zero) result; an empty pool is a
/// kernel error naming it, at the kernel's entry.
#[test]
fn empty_batches_and_pools() {
    let (dev, r) = (dev(), r());
    let mut rng = Rng::new(45);
    let pool = Pool::new(&mut rng);
    let (kp, vp) = pool.tensors();
    let out = paged_attention::run(
        &dev,
        &f32s(&[], &[0, r.hq, D]),
        &kp,
        &vp,
        &s32(&[], &[0, WIDTH]),
        &s32(&[], &[0]),
        ServeOptions::new(),
    )
    .unwrap();
    assert_eq!(out.shape(), &[0, r.hq, D]);
    let q = values(&mut rng, 3 * r.hq * D, F32);
    let out = ragged_paged_attention::run(
        &dev,
        &f32s(&q, &[3, r.hq, D]),
        &kp,
        &vp,
        &s32(&[], &[0, WIDTH]),
        &s32(&[], &[0]),
        &s32(&[0], &[1]),
        ServeOptions::new(),
    )
    .unwrap();
    assert_eq!(out.to_f64_vec(), vec![0.0; 3 * r.hq * D]);
    let empty = f32s(&[], &[0, PAGE, 1, D]);
    let e = paged_attention::run(
        &dev,
        &f32s(&q[..B * r.hq * D], &[B, r.hq, D]),
        &empty,
        &empty,
        &s32(&[0; B * WIDTH], &[B, WIDTH]),
        &s32(&[0; B], &[B]),
        ServeOptions::new(),
    )
    .unwrap_err();
    let k = e.as_kernel_error().expect("a kernel error");
    assert_eq!(k.op, "paged_attention");
    assert!(
        k.message.contains("k_pages: the page pool is empty"),
        "{}",
        k.message
    );
}

#[test]
fn an_update_and_the_attention_reading_its_cache_check_their_metadata_once() {
    use tessel::kernel::{Kernel, KernelConfig};
    use tessel_kernels::serving::{kv_cache_update_with, paged_attention_with, PagedKv};
    // One decode step: each sequence's new token written, then attended to.
    let step = |a: &[Tensor], attention: bool, update: bool| {
        let mut kv = PagedKv::new(a[0], a[1]);
        let (k, tables, lens) = (a[2], a[3], a[4]);
        let cu = Tensor::iota([B + 1], 0, S32);
        if update {
            kv = kv_cache_update_with(&kv, k, k, tables, lens, cu);
        }
        let q = k.reshape(&[B as isize, 1, D as isize]);
        match attention {
            true => vec![paged_attention_with(
                q,
                &kv,
                tables,
                lens,
                ServeOptions::new(),
            )],
            false => vec![kv.k_pages],
        }
    };
    let specs = [
        ("k_pages".into(), TensorSpec::new([PAGES, PAGE, 1, D], F32)),
        ("v_pages".into(), TensorSpec::new([PAGES, PAGE, 1, D], F32)),
        ("k".into(), TensorSpec::new([B, 1, D], F32)),
        ("tables".into(), TensorSpec::new([B, WIDTH], S32)),
        ("lens".into(), TensorSpec::new([B], S32)),
    ];
    let sites = |attention, update| {
        let g = tessel::trace("step", &specs, KernelConfig::default(), move |a| {
            step(a, attention, update)
        });
        g.unwrap().checks.len()
    };
    // The attention's checks are all among the update's.
    assert!(sites(true, false) > 0);
    assert_eq!(sites(true, true), sites(false, true));

    // And the step still refuses bad metadata, and answers as before.
    let dev = dev();
    let kernel = Kernel::new("update_then_attend", move |a: &[Tensor]| {
        step(a, true, true)
    });
    let pages = f32s(&vec![0.5; PAGES * PAGE * D], &[PAGES, PAGE, 1, D]);
    let mut rng = Rng::new(47);
    let k = f32s(&values(&mut rng, B * D, F32), &[B, 1, D]);
    let lens = s32(&[3, 1, 5], &[B]);
    let run = |tables: &[i32]| {
        kernel.run(
            &dev,
            &[&pages, &pages, &k, &s32(tables, &[B, WIDTH]), &lens],
        )
    };
    expect_check(run(&[0, 9, 9, 1, 2, 3, 2, 6, 5]), "a page outside the pool");
    expect_check(run(&[0, 9, 9, 1, 2, 3, 2, 2, 5]), "a page listed twice");
    let got = run(&[0, 9, 9, 1, 2, 3, 2, 4, 5]).unwrap()[0].to_f64_vec();
    let once = Kernel::new("attend_after_update", move |a: &[Tensor]| {
        let updated = step(a, false, true)[0];
        let kv = PagedKv::new(updated, updated);
        let q = a[2].reshape(&[B as isize, 1, D as isize]);
        vec![paged_attention_with(
            q,
            &kv,
            a[3],
            a[4],
            ServeOptions::new().unchecked(),
        )]
    });
    let want = once.run(
        &dev,
        &[
            &pages,
            &pages,
            &k,
            &s32(&[0, 9, 9, 1, 2, 3, 2, 4, 5], &[B, WIDTH]),
            &lens,
        ],
    );
    assert_eq!(got, want.unwrap()[0].to_f64_vec());
}

/// A page listed twice in a row is found, and named with its sequence,
/// whether the table is narrow (its entries compared in pairs) or wide
/// (each row sorted: 2 × 300² pairs are past the pairwise bound).
#[test]
fn a_page_listed_twice_is_named_in_narrow_and_wide_tables() {
    let dev = dev();
    for width in [4usize, 300] {
        let (b, pages) = (2, 2 * 300);
        let pool = f32s(&vec![0.0; pages], &[pages, 1, 1, 1]);
        let k = f32s(&[1.0, 2.0], &[b, 1, 1]);
        let run = |tables: &[i32]| {
            kv_cache_update::run(
                &dev,
                &pool,
                &pool,
                &k,
                &k,
                &s32(tables, &[b, width]),
                &s32(&[width as i32; 2], &[b]),
                &s32(&[0, 1, 2], &[b + 1]),
            )
        };
        // Only the wide table's check sorts (a sort costs the compile).
        let specs = [
            ("pool".into(), TensorSpec::new([pages, 1, 1, 1], F32)),
            ("k".into(), TensorSpec::new([b, 1, 1], F32)),
            ("tables".into(), TensorSpec::new([b, width], S32)),
            ("lens".into(), TensorSpec::new([b], S32)),
        ];
        let kernel = tessel::kernel::KernelConfig::default();
        let g = tessel::trace("update", &specs, kernel, |a| {
            let kv = tessel_kernels::serving::PagedKv::new(a[0], a[0]);
            let cu = Tensor::iota([b + 1], 0, S32);
            let kv = tessel_kernels::serving::kv_cache_update_with(&kv, a[1], a[1], a[2], a[3], cu);
            vec![kv.k_pages]
        })
        .unwrap();
        let sorts = g
            .nodes
            .iter()
            .filter(|n| matches!(n.op, tessel::ir::Op::Sort { .. }));
        assert_eq!(sorts.count(), usize::from(width > 4), "width {width}");
        // Sequence 0 holds pages 0.., sequence 1 the pages after them.
        let mut tables: Vec<i32> = (0..(b * width) as i32).collect();
        run(&tables).unwrap_or_else(|e| panic!("width {width}: {e}"));
        let twice = width as i32 + 1;
        tables[b * width - 1] = twice;
        match run(&tables) {
            Err(tessel::Error::Check(c)) => assert!(
                c.message
                    .contains(&format!("sequence 1 lists page {twice} twice")),
                "width {width}: {}",
                c.message
            ),
            other => panic!("width {width}: a page listed twice must be refused, got {other:?}"),
        }
    }
}
