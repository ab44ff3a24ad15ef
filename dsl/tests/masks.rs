//! Block masks against dense reference masks built in plain Rust: dense
//! expansion, block classification, traced block masks (run on the XLA CPU
//! plugin), mask-info tables, multi-head masks and bad input.
//!
//! The tests, by what they cover (the reference `Dense`, the mask catalog
//! and the helpers they share are here):
//! - `dense_and_layouts`: dense expansion, block classification and
//!   mask-info tables;
//! - `block_masks`: block masks in a trace, at static and traced indices;
//! - `multi_head`: multi-head masks, their layouts and block masks;
//! - `errors`: bad input is a typed error, in a trace a kernel error.

use tessel_dsl::runtime::Device;
use tessel_dsl::tile::mask::{BlockKind, BlockLayout, Mask};
use tessel_dsl::HostTensor;

#[path = "masks/block_masks.rs"]
mod block_masks;
#[path = "masks/dense_and_layouts.rs"]
mod dense_and_layouts;
#[path = "masks/errors.rs"]
mod errors;
#[path = "masks/multi_head.rs"]
mod multi_head;

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

fn cpu() -> Device {
    Device::cpu().expect("the XLA CPU plugin should be available")
}

fn bools(t: &HostTensor) -> Vec<bool> {
    t.to_vec::<bool>().unwrap()
}

fn s32(x: i64) -> HostTensor {
    HostTensor::scalar(x as i32)
}
