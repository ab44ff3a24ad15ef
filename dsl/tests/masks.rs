//! Block masks against dense reference masks built in plain Rust: dense
//! expansion, block classification, traced block masks (run on the XLA CPU
//! plugin), mask-info tables, multi-head masks and bad input.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::tile::mask::{BlockKind, BlockLayout, Mask, MultiHeadMask};
use tessel_dsl::{Error, HostError, HostTensor, Tensor, TensorSpec, S32};

/// Shapes with 1s, primes, non-multiples of the block sizes and q_len != kv_len.
const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (1, 7),
    (7, 1),
    (7, 13),
    (13, 7),
    (31, 31),
    (13, 31),
    (31, 13),
    (16, 16),
    (20, 8),
];

const BLOCKS: &[(usize, usize)] = &[
    (1, 1),
    (1, 3),
    (2, 3),
    (4, 4),
    (5, 7),
    (8, 8),
    (3, 32),
    (64, 64),
];

/// A reference mask: row-major bits of a `q × kv` matrix.
#[derive(Clone)]
struct Dense {
    q: usize,
    kv: usize,
    bits: Vec<bool>,
}

impl Dense {
    fn new(q: usize, kv: usize, f: impl Fn(i64, i64) -> bool) -> Dense {
        let bits = (0..q * kv)
            .map(|e| f((e / kv) as i64, (e % kv) as i64))
            .collect();
        Dense { q, kv, bits }
    }

    /// `(q, k)` with `false` outside the matrix (negative indices included).
    fn at(&self, q: i64, k: i64) -> bool {
        q >= 0
            && k >= 0
            && (q as usize) < self.q
            && (k as usize) < self.kv
            && self.bits[q as usize * self.kv + k as usize]
    }

    fn zip(&self, other: &Dense, f: impl Fn(bool, bool) -> bool) -> Dense {
        let bits = self
            .bits
            .iter()
            .zip(&other.bits)
            .map(|(a, b)| f(*a, *b))
            .collect();
        Dense { bits, ..*self }
    }

    fn not(&self) -> Dense {
        Dense {
            bits: self.bits.iter().map(|b| !b).collect(),
            ..*self
        }
    }

    /// The `bq × bk` block at block indices `(i, j)`, out-of-matrix false.
    fn block(&self, i: i64, j: i64, bq: usize, bk: usize) -> Vec<bool> {
        (0..bq * bk)
            .map(|e| {
                self.at(
                    i * bq as i64 + (e / bk) as i64,
                    j * bk as i64 + (e % bk) as i64,
                )
            })
            .collect()
    }

    /// The exact kind of block `(i, j)`, positions outside the matrix being
    /// not allowed.
    fn kind(&self, i: usize, j: usize, bq: usize, bk: usize) -> BlockKind {
        let allowed = self
            .block(i as i64, j as i64, bq, bk)
            .iter()
            .filter(|b| **b)
            .count();
        if allowed == 0 {
            BlockKind::Empty
        } else if allowed == bq * bk {
            BlockKind::Full
        } else {
            BlockKind::Partial
        }
    }
}

/// A deterministic pseudo-random bit pattern.
fn noise(q: usize, kv: usize, seed: u64) -> Vec<bool> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..q * kv)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            !s.is_multiple_of(3)
        })
        .collect()
}

/// Every constructor and some combinations, each with its reference.
fn catalog(q: usize, kv: usize) -> Vec<(String, Mask, Dense)> {
    let mut out: Vec<(String, Mask, Dense)> = Vec::new();
    let mut add = |name: String, m: Mask, d: Dense| out.push((name, m, d));
    add(
        "full".into(),
        Mask::full(q, kv),
        Dense::new(q, kv, |_, _| true),
    );
    add(
        "causal".into(),
        Mask::causal(q, kv),
        Dense::new(q, kv, |a, b| b <= a),
    );
    for off in [-3i64, 2, kv as i64 - q as i64] {
        add(
            format!("causal_offset({off})"),
            Mask::causal_offset(q, kv, off),
            Dense::new(q, kv, move |a, b| b <= a + off),
        );
    }
    let windows = [
        (None, None),
        (Some(0), Some(0)),
        (Some(3), Some(0)),
        (Some(2), Some(5)),
        (None, Some(1)),
        (Some(4), None),
    ];
    for (l, r) in windows {
        add(
            format!("local({l:?}, {r:?})"),
            Mask::local(q, kv, l, r),
            Dense::new(q, kv, move |a, b| {
                l.is_none_or(|l| a - l as i64 <= b) && r.is_none_or(|r| b <= a + r as i64)
            }),
        );
    }
    for c in [1usize, 3, 4, 100] {
        let ci = c as i64;
        add(
            format!("chunked_causal({c})"),
            Mask::chunked_causal(q, kv, c).unwrap(),
            Dense::new(q, kv, move |a, b| a / ci == b / ci && b <= a),
        );
    }
    let bits = noise(q, kv, (q * 131 + kv) as u64);
    let noisy = Dense {
        q,
        kv,
        bits: bits.clone(),
    };
    let dense = Mask::from_dense(q, kv, bits).unwrap();
    add("dense(noise)".into(), dense.clone(), noisy.clone());
    // Whole blocks on and off for block sizes dividing 4.
    let tiles = Dense::new(q, kv, |a, b| (a / 4 + b / 4) % 3 != 0);
    let tiled = Mask::from_dense(q, kv, tiles.bits.clone()).unwrap();
    add("dense(tiles)".into(), tiled.clone(), tiles.clone());

    let causal = Mask::causal(q, kv);
    let causal_d = Dense::new(q, kv, |a, b| b <= a);
    let window = Mask::local(q, kv, Some(5), None);
    let window_d = Dense::new(q, kv, |a, b| a - 5 <= b);
    let chunked = Mask::chunked_causal(q, kv, 4).unwrap();
    let chunked_d = Dense::new(q, kv, |a, b| a / 4 == b / 4 && b <= a);
    add(
        "causal & window".into(),
        causal.and(&window).unwrap(),
        causal_d.zip(&window_d, |a, b| a && b),
    );
    add("!causal".into(), causal.not(), causal_d.not());
    add(
        "window | chunked".into(),
        window.or(&chunked).unwrap(),
        window_d.zip(&chunked_d, |a, b| a || b),
    );
    add(
        "causal & !causal".into(),
        causal.and(&causal.not()).unwrap(),
        Dense::new(q, kv, |_, _| false),
    );
    add(
        "causal | !causal".into(),
        causal.or(&causal.not()).unwrap(),
        Dense::new(q, kv, |_, _| true),
    );
    add(
        "noise & causal".into(),
        dense.and(&causal).unwrap(),
        noisy.zip(&causal_d, |a, b| a && b),
    );
    add(
        "!tiles | (chunked & !window)".into(),
        tiled
            .not()
            .or(&chunked.and(&window.not()).unwrap())
            .unwrap(),
        tiles
            .not()
            .zip(&chunked_d.zip(&window_d, |a, b| a && !b), |a, b| a || b),
    );
    out
}

#[test]
fn to_dense_and_is_allowed_match_the_reference() {
    for &(q, kv) in SHAPES {
        for (name, mask, want) in catalog(q, kv) {
            assert_eq!(mask.shape(), (q, kv));
            assert_eq!(mask.to_dense(), want.bits, "{name} {q}x{kv}");
            for a in 0..=q {
                for b in 0..=kv {
                    assert_eq!(
                        mask.is_allowed(a, b),
                        want.at(a as i64, b as i64),
                        "{name} {q}x{kv} at ({a}, {b})"
                    );
                }
            }
            let host = mask.to_host_tensor().unwrap();
            assert_eq!(host.shape(), &[q, kv]);
            assert_eq!(host.to_vec::<bool>().unwrap(), want.bits);
        }
    }
}

/// `layout` against the reference: every block's kind, counts, rows.
fn check_layout(layout: &BlockLayout, want: &Dense, bq: usize, bk: usize, what: &str) {
    let (nq, nk) = (want.q.div_ceil(bq), want.kv.div_ceil(bk));
    assert_eq!((layout.num_q_blocks(), layout.num_kv_blocks()), (nq, nk));
    assert_eq!((layout.block_q(), layout.block_kv()), (bq, bk));
    assert_eq!((layout.q_len(), layout.kv_len()), (want.q, want.kv));
    let mut counts = [0usize; 3];
    for i in 0..nq {
        let mut row = Vec::new();
        for j in 0..nk {
            let got = layout.kind(i, j).unwrap();
            assert_eq!(got, want.kind(i, j, bq, bk), "{what}: block ({i}, {j})");
            counts[got.code() as usize] += 1;
            if got != BlockKind::Empty {
                row.push((j, got));
            }
        }
        assert_eq!(layout.kv_blocks_for(i).collect::<Vec<_>>(), row, "{what}");
        assert_eq!(layout.num_nonempty(i), row.len());
    }
    assert_eq!(layout.kind(nq, 0), None);
    assert_eq!(layout.kind(0, nk), None);
    assert_eq!(layout.kv_blocks_for(nq).count(), 0);
    assert_eq!(
        [layout.num_empty(), layout.num_partial(), layout.num_full()],
        counts,
        "{what}"
    );
}

#[test]
fn classify_is_exact_for_every_mask_and_combination() {
    for &(q, kv) in SHAPES {
        for (name, mask, want) in catalog(q, kv) {
            for &(bq, bk) in BLOCKS {
                let layout = mask.classify(bq, bk).unwrap();
                check_layout(
                    &layout,
                    &want,
                    bq,
                    bk,
                    &format!("{name} {q}x{kv} / {bq}x{bk}"),
                );
            }
        }
    }
}

#[test]
fn classify_counts_of_known_cases() {
    let l = Mask::causal(512, 512).classify(128, 128).unwrap();
    assert_eq!((l.num_empty(), l.num_partial(), l.num_full()), (6, 4, 6));
    for i in 0..4 {
        for j in 0..4 {
            let want = match j.cmp(&i) {
                std::cmp::Ordering::Less => BlockKind::Full,
                std::cmp::Ordering::Equal => BlockKind::Partial,
                std::cmp::Ordering::Greater => BlockKind::Empty,
            };
            assert_eq!(l.kind(i, j), Some(want));
        }
    }
    // A causal window of 256 keys: each row has one partial diagonal block,
    // one full block and one partial block at the left edge of the window.
    let l = Mask::local(1024, 1024, Some(255), Some(0))
        .classify(128, 128)
        .unwrap();
    assert_eq!((l.num_partial(), l.num_full()), (8 + 6, 7));
    // Ragged: 100 x 100 causal in 64-blocks. The lower-left block allows
    // all of its in-matrix positions but sticks out of the matrix: partial.
    let l = Mask::causal(100, 100).classify(64, 64).unwrap();
    assert_eq!(
        l.kinds(),
        [
            BlockKind::Partial,
            BlockKind::Empty,
            BlockKind::Partial,
            BlockKind::Partial
        ]
    );
    // A full mask with ragged edges: only the inner blocks are full.
    let l = Mask::full(10, 10).classify(4, 4).unwrap();
    assert_eq!((l.num_empty(), l.num_partial(), l.num_full()), (0, 5, 4));
    // Empty matrices have no blocks.
    let l = Mask::causal(0, 5).classify(4, 4).unwrap();
    assert_eq!(
        (l.num_q_blocks(), l.num_kv_blocks(), l.kinds().len()),
        (0, 2, 0)
    );
}

#[test]
fn large_causal_mask_classifies_without_materializing() {
    let n = 8192;
    let mask = Mask::causal(n, n);
    let l = mask.classify(128, 128).unwrap();
    assert_eq!((l.num_q_blocks(), l.num_kv_blocks()), (64, 64));
    assert_eq!(
        (l.num_empty(), l.num_partial(), l.num_full()),
        (2016, 64, 2016)
    );
    assert_eq!(l.max_nonempty(), 64);
    // Combinations of analytic masks stay lazy too (only undecided blocks
    // are refined row by row).
    let window = Mask::local(n, n, Some(1023), None);
    let l = mask.and(&window).unwrap().classify(128, 128).unwrap();
    // Per row of blocks: the diagonal and the window's left edge are
    // partial, the 7 blocks between them full.
    assert_eq!(l.num_partial(), 64 + 56);
    assert_eq!(l.num_full(), 7 * 57 + (0..7).sum::<usize>());
    assert_eq!(l.max_nonempty(), 9);
}

#[test]
fn mask_info_of_a_local_mask() {
    // Each query sees itself and the 3 keys before it; blocks of 2 x 2.
    let layout = Mask::local(8, 8, Some(3), Some(0)).classify(2, 2).unwrap();
    let info = layout.mask_info().unwrap();
    assert_eq!(info.num_nonempty.shape(), &[4]);
    assert_eq!(info.kv_block_ids.shape(), &[4, 3]);
    assert_eq!(info.block_kinds.shape(), &[4, 3]);
    assert_eq!(info.num_nonempty.to_vec::<i32>().unwrap(), [1, 2, 3, 3]);
    assert_eq!(
        info.kv_block_ids.to_vec::<i32>().unwrap(),
        [0, 0, 0, 0, 1, 1, 0, 1, 2, 1, 2, 3]
    );
    assert_eq!(
        info.block_kinds.to_vec::<i32>().unwrap(),
        [1, 0, 0, 2, 1, 0, 1, 2, 1, 1, 2, 1]
    );

    // All-empty: one column of padding.
    let info = Mask::full(5, 5)
        .not()
        .classify(2, 2)
        .unwrap()
        .mask_info()
        .unwrap();
    assert_eq!(info.kv_block_ids.shape(), &[3, 1]);
    assert_eq!(info.num_nonempty.to_vec::<i32>().unwrap(), [0, 0, 0]);
    assert_eq!(info.block_kinds.to_vec::<i32>().unwrap(), [0, 0, 0]);
}

fn cpu() -> Device {
    Device::cpu().expect("the XLA CPU plugin should be available")
}

fn bools(t: &HostTensor) -> Vec<bool> {
    t.to_vec::<bool>().unwrap()
}

fn s32(x: i64) -> HostTensor {
    HostTensor::scalar(x as i32)
}

/// Masks for the traced tests (a subset of the catalog, one of each kind).
fn traced_catalog(q: usize, kv: usize) -> Vec<(String, Mask, Dense)> {
    let keep = [
        "full",
        "causal",
        "causal_offset(2)",
        "local(Some(3), Some(0))",
        "local(Some(2), Some(5))",
        "chunked_causal(3)",
        "dense(noise)",
        "dense(tiles)",
        "window | chunked",
        "noise & causal",
        "!tiles | (chunked & !window)",
    ];
    catalog(q, kv)
        .into_iter()
        .filter(|(n, _, _)| keep.contains(&n.as_str()))
        .collect()
}

#[test]
fn block_masks_at_static_indices_match_the_reference() {
    let dev = cpu();
    for &((q, kv), (bq, bk)) in &[((13, 31), (4, 8)), ((31, 13), (8, 5)), ((7, 7), (7, 7))] {
        let masks = traced_catalog(q, kv);
        let (nq, nk) = (q.div_ceil(bq), kv.div_ceil(bk));
        // Every block plus one past the grid in each direction.
        let blocks: Vec<(usize, usize)> = (0..=nq)
            .flat_map(|i| (0..=nk).map(move |j| (i, j)))
            .collect();
        let k = Kernel::new(format!("static_{q}x{kv}_{bq}x{bk}"), |_: &[Tensor]| {
            let mut out = Vec::new();
            for (_, m, _) in &masks {
                for &(i, j) in &blocks {
                    out.push(m.block_mask(i, j, bq, bk));
                }
            }
            out
        });
        let got = k.run(&dev, &[]).unwrap();
        let mut it = got.iter();
        for (name, _, want) in &masks {
            for &(i, j) in &blocks {
                let t = it.next().unwrap();
                assert_eq!(t.shape(), &[bq, bk]);
                assert_eq!(
                    bools(t),
                    want.block(i as i64, j as i64, bq, bk),
                    "{name} {q}x{kv} block ({i}, {j}) of {bq}x{bk}"
                );
            }
        }
    }
}

#[test]
fn block_masks_at_traced_indices_match_the_reference() {
    let dev = cpu();
    for &((q, kv), (bq, bk)) in &[((13, 31), (4, 8)), ((31, 13), (8, 5))] {
        let masks = traced_catalog(q, kv);
        let (nq, nk) = (q.div_ceil(bq) as i64, kv.div_ceil(bk) as i64);
        let k = Kernel::new(format!("traced_{q}x{kv}_{bq}x{bk}"), |a: &[Tensor]| {
            masks
                .iter()
                .map(|(_, m, _)| m.block_mask(a[0], a[1], bq, bk))
                .collect::<Vec<_>>()
        });
        // Every block, plus -1 and one past the grid.
        for i in -1..=nq {
            for j in -1..=nk {
                let got = k.run(&dev, &[&s32(i), &s32(j)]).unwrap();
                for ((name, _, want), t) in masks.iter().zip(&got) {
                    assert_eq!(
                        bools(t),
                        want.block(i, j, bq, bk),
                        "{name} {q}x{kv} traced block ({i}, {j}) of {bq}x{bk}"
                    );
                }
            }
        }
    }
}

#[test]
fn block_masks_with_one_static_and_one_traced_index() {
    let dev = cpu();
    let (q, kv, bq, bk) = (13, 31, 4, 8);
    let masks = traced_catalog(q, kv);
    let nq = q.div_ceil(bq);
    // Rows of blocks static, the column traced (as s64, to check the cast).
    let k = Kernel::new("mixed_static_traced", |a: &[Tensor]| {
        let mut out = Vec::new();
        for (_, m, _) in &masks {
            for i in 0..nq {
                out.push(m.block_mask(i, a[0], bq, bk));
            }
        }
        out
    });
    for j in 0..kv.div_ceil(bk) as i64 {
        let got = k.run(&dev, &[&HostTensor::scalar(j)]).unwrap();
        let mut it = got.iter();
        for (name, _, want) in &masks {
            for i in 0..nq {
                assert_eq!(
                    bools(it.next().unwrap()),
                    want.block(i as i64, j, bq, bk),
                    "{name} block ({i}, {j})"
                );
            }
        }
    }
}

#[test]
fn multi_head_masks() {
    let (q, kv) = (13, 31);
    let cat = catalog(q, kv);
    let pick = |n: &str| cat.iter().find(|(name, _, _)| name == n).unwrap().clone();
    let heads = [
        pick("causal"),
        pick("dense(noise)"),
        pick("local(Some(2), Some(5))"),
    ];
    let mh = MultiHeadMask::new(heads.iter().map(|h| h.1.clone()).collect()).unwrap();
    assert_eq!((mh.num_heads(), mh.q_len(), mh.kv_len()), (3, q, kv));
    assert!(!mh.is_shared());
    assert!(mh.head(3).is_none());
    let want_dense: Vec<bool> = heads.iter().flat_map(|h| h.2.bits.clone()).collect();
    assert_eq!(mh.to_dense(), want_dense);

    let (bq, bk) = (4, 8);
    let layout = mh.classify(bq, bk).unwrap();
    assert_eq!(layout.num_heads(), 3);
    for (h, (name, _, want)) in heads.iter().enumerate() {
        check_layout(layout.head(h).unwrap(), want, bq, bk, name);
    }
    let u = layout.union();
    for i in 0..u.num_q_blocks() {
        for j in 0..u.num_kv_blocks() {
            let kinds: Vec<BlockKind> = heads.iter().map(|h| h.2.kind(i, j, bq, bk)).collect();
            let want = if kinds.iter().all(|k| *k == BlockKind::Empty) {
                BlockKind::Empty
            } else if kinds.iter().all(|k| *k == BlockKind::Full) {
                BlockKind::Full
            } else {
                BlockKind::Partial
            };
            assert_eq!(u.kind(i, j), Some(want), "union block ({i}, {j})");
        }
    }
    let info = layout.mask_info().unwrap();
    let width = layout
        .heads()
        .iter()
        .map(|l| l.max_nonempty())
        .max()
        .unwrap();
    assert_eq!(info.num_nonempty.shape(), &[3, 4]);
    assert_eq!(info.kv_block_ids.shape(), &[3, 4, width]);
    let counts = info.num_nonempty.to_vec::<i32>().unwrap();
    for h in 0..3 {
        for i in 0..4 {
            assert_eq!(
                counts[h * 4 + i] as usize,
                layout.heads()[h].num_nonempty(i)
            );
        }
    }

    // Traced block masks per head, with a traced kv block index.
    let k = Kernel::new("multi_head", |a: &[Tensor]| {
        (0..3)
            .map(|h| mh.block_mask(h, 2usize, a[0], bq, bk))
            .collect::<Vec<_>>()
    });
    for j in 0..4 {
        let got = k.run(&cpu(), &[&s32(j)]).unwrap();
        for (h, t) in got.iter().enumerate() {
            assert_eq!(
                bools(t),
                heads[h].2.block(2, j, bq, bk),
                "head {h} block (2, {j})"
            );
        }
    }

    // A shared mask: every head's layout is the mask's.
    let shared = MultiHeadMask::shared(Mask::causal(q, kv), 4).unwrap();
    assert!(shared.is_shared());
    let sl = shared.classify(bq, bk).unwrap();
    let single = Mask::causal(q, kv).classify(bq, bk).unwrap();
    assert_eq!(sl.heads().len(), 4);
    assert!(sl.heads().iter().all(|l| *l == single));
    assert_eq!(*sl.union(), single);
}

fn host_message(e: Error) -> String {
    match e {
        Error::Host(HostError::InvalidInput {
            what: "mask",
            message,
        }) => message,
        other => panic!("expected an invalid-mask error, got {other:?}"),
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let m = host_message(Mask::from_dense(3, 4, vec![true; 11]).unwrap_err());
    assert!(m.contains("needs 12 bits, got 11"), "{m}");
    let a = Mask::causal(3, 4);
    let b = Mask::full(4, 3);
    let m = host_message(a.and(&b).unwrap_err());
    assert!(
        m.contains("cannot and a 3 x 4 mask with a 4 x 3 mask"),
        "{m}"
    );
    assert!(a.or(&b).is_err());
    for (bq, bk) in [(0, 4), (4, 0), (0, 0)] {
        let m = host_message(a.classify(bq, bk).unwrap_err());
        assert!(m.contains("block sizes must be positive"), "{m}");
    }
    host_message(Mask::chunked_causal(4, 4, 0).unwrap_err());
    host_message(MultiHeadMask::new(vec![]).unwrap_err());
    let m = host_message(MultiHeadMask::new(vec![a.clone(), b]).unwrap_err());
    assert!(m.contains("head 1"), "{m}");
    host_message(MultiHeadMask::shared(a.clone(), 0).unwrap_err());
    assert!(MultiHeadMask::shared(a.clone(), 2)
        .unwrap()
        .classify(0, 1)
        .is_err());

    // In a trace: recorded as kernel errors, not panics.
    let trace_err = |name: &str, specs: &[TensorSpec], f: &dyn Fn(&[Tensor]) -> Tensor| {
        let e = Kernel::new(name, f).trace(specs).unwrap_err();
        e.as_kernel_error().expect("a kernel error").message.clone()
    };
    let m = trace_err("zero_block", &[], &|_| a.block_mask(0usize, 0usize, 0, 4));
    assert!(m.contains("block sizes must be positive"), "{m}");
    let f32_scalar = [TensorSpec::new(Vec::<usize>::new(), tessel_dsl::F32)];
    let m = trace_err("float_index", &f32_scalar, &|x| {
        a.block_mask(x[0], 0usize, 2, 2)
    });
    assert!(m.contains("integer scalar"), "{m}");
    let vector = [TensorSpec::new([2], S32)];
    let m = trace_err("vector_index", &vector, &|x| {
        a.block_mask(0usize, x[0], 2, 2)
    });
    assert!(m.contains("integer scalar"), "{m}");
    let mh = MultiHeadMask::shared(a.clone(), 2).unwrap();
    let m = trace_err("bad_head", &[], &|_| mh.block_mask(2, 0usize, 0usize, 2, 2));
    assert!(m.contains("head 2 is out of range"), "{m}");
}
