//! NaN propagates through every attention kernel as it does through a
//! softmax: a row whose visible logits include a NaN comes out NaN (output
//! and logsumexp), a row with no visible key still gives zeros and `-inf`,
//! and every other row is unchanged.
//!
//! Layout of the cases: `q: [1, 4, 28, 8]`, `k, v: [1, 2, 28, 8]` (two
//! query heads per key/value head), blocks of 8 × 8 (the last one ragged),
//! causal with the queries 4 positions behind the keys: query `i` sees keys
//! `0 ..= i - 4`, so rows 0–3 see no key. Flash attention walks runs of
//! whole blocks as traced loops and single blocks statically, the
//! block-sparse kernels get the same band as a [`Mask`] (static and dynamic
//! layouts), the reference computes it whole.

use tessel_dsl::runtime::Device;
use tessel_dsl::tile::Mask;
use tessel_dsl::{HostTensor, F32};
use tessel_kernels::attention::*;

use super::{data, dev};

const B: usize = 1;
const HQ: usize = 4;
const HKV: usize = 2;
const S: usize = 28;
const D: usize = 8;
const OFFSET: i64 = -4;

/// Outputs `[HQ, S, D]` and logsumexps `[HQ, S]` of one kernel.
struct Run {
    name: &'static str,
    out: Vec<f32>,
    lse: Option<Vec<f32>>,
}

fn band() -> FlashOptions {
    FlashOptions::new()
        .causal(true)
        .q_offset(OFFSET)
        .block_sizes(8, 8)
}

/// The four kernels on `q, k, v` (the same band for each).
fn run_all(dev: &Device, q: &HostTensor, k: &HostTensor, v: &HostTensor) -> Vec<Run> {
    let none = AttentionInputs::new();
    let vec = |t: &HostTensor| t.to_vec::<f32>().unwrap();
    let reference = Attention::Reference
        .run(dev, q, k, v, &none, band())
        .unwrap();
    let (flash, flash_lse) = flash_attention_lse::run(dev, q, k, v, band()).unwrap();
    let mask = AttentionMask::from(Mask::causal_offset(S, S, OFFSET));
    let plain = FlashOptions::new().block_sizes(8, 8);
    let sparse = Attention::BlockSparse(mask.clone())
        .run(dev, q, k, v, &none, plain)
        .unwrap();
    let t = DynamicMask::new(&mask, plain).unwrap();
    let dynamic = block_sparse_attention_dynamic::run(
        dev,
        q,
        k,
        v,
        &t.bits,
        &t.num_nonempty,
        &t.kv_block_ids,
        &t.block_kinds,
        plain,
    )
    .unwrap();
    vec![
        Run {
            name: "reference",
            out: vec(&reference.out),
            lse: Some(vec(&reference.lse)),
        },
        Run {
            name: "flash",
            out: vec(&flash),
            lse: Some(vec(&flash_lse)),
        },
        Run {
            name: "block-sparse",
            out: vec(&sparse.out),
            lse: Some(vec(&sparse.lse)),
        },
        Run {
            name: "block-sparse dynamic",
            out: vec(&dynamic),
            lse: None,
        },
    ]
}

/// Whether query row `i` sees key `j`.
fn sees(i: usize, j: usize) -> bool {
    j as i64 <= i as i64 + OFFSET
}

/// What an element of the poisoned run must be.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// NaN.
    Nan,
    /// Exactly zero (a row that sees no key).
    Zero,
    /// The clean run's value.
    Clean,
}

fn same(got: f32, clean: f32) -> bool {
    got == clean || (got - clean).abs() <= 1e-6 * (1.0 + clean.abs())
}

/// Checks every element of `poisoned` against `clean` under `want(h, i, c)`
/// (`c = None` for the logsumexp).
fn check(
    case: &str,
    clean: &[Run],
    poisoned: &[Run],
    want: impl Fn(usize, usize, Option<usize>) -> Want,
) {
    for (c, p) in clean.iter().zip(poisoned) {
        let what = |h: usize, i: usize, e: Option<usize>| {
            format!("{case}, {}: head {h}, row {i}, {e:?}", p.name)
        };
        let verify = |got: f32, base: f32, w: Want, at: String| match w {
            Want::Nan => assert!(got.is_nan(), "{at}: got {got}, want NaN"),
            Want::Zero => assert!(got == 0.0, "{at}: got {got}, want 0"),
            Want::Clean => assert!(same(got, base), "{at}: got {got}, want {base} (unchanged)"),
        };
        for h in 0..HQ {
            for i in 0..S {
                for e in 0..D {
                    let at = (h * S + i) * D + e;
                    verify(
                        p.out[at],
                        c.out[at],
                        want(h, i, Some(e)),
                        what(h, i, Some(e)),
                    );
                }
                if let (Some(cl), Some(pl)) = (&c.lse, &p.lse) {
                    let at = h * S + i;
                    let w = want(h, i, None);
                    if w == Want::Zero {
                        let at_s = what(h, i, None);
                        assert!(pl[at] == f32::NEG_INFINITY, "{at_s}: lse {}", pl[at]);
                    } else {
                        verify(pl[at], cl[at], w, what(h, i, None));
                    }
                }
            }
        }
    }
}

fn with_nan(t: &HostTensor, at: [usize; 4]) -> HostTensor {
    let s = t.shape().to_vec();
    let flat = ((at[0] * s[1] + at[1]) * s[2] + at[2]) * s[3] + at[3];
    let mut values = t.to_vec::<f32>().unwrap();
    values[flat] = f32::NAN;
    HostTensor::from_vec(values, s).unwrap()
}

fn inputs() -> (HostTensor, HostTensor, HostTensor) {
    (
        data(&[B, HQ, S, D], F32, 11),
        data(&[B, HKV, S, D], F32, 12),
        data(&[B, HKV, S, D], F32, 13),
    )
}

/// The clean runs: rows 0–3 see no key (zeros, `-inf`), every other row is
/// finite.
fn clean_runs(dev: &Device) -> Vec<Run> {
    let (q, k, v) = inputs();
    let clean = run_all(dev, &q, &k, &v);
    for r in &clean {
        for (n, x) in r.out.iter().enumerate() {
            let row = (n / D) % S;
            assert!(x.is_finite(), "{}: clean output {n} is {x}", r.name);
            if !sees(row, 0) {
                assert_eq!(*x, 0.0, "{}: row {row} sees no key", r.name);
            }
        }
    }
    clean
}

#[test]
fn nan_in_k_poisons_the_rows_that_see_it() {
    let dev = dev();
    let clean = clean_runs(&dev);
    let (q, k, v) = inputs();
    // Key 5 of key/value head 0 (query heads 0 and 1): rows 9.. see it.
    let k = with_nan(&k, [0, 0, 5, 2]);
    let poisoned = run_all(&dev, &q, &k, &v);
    check("NaN in k", &clean, &poisoned, |h, i, _| {
        if !sees(i, 0) {
            Want::Zero
        } else if h / 2 == 0 && sees(i, 5) {
            Want::Nan
        } else {
            Want::Clean
        }
    });
}

#[test]
fn nan_in_q_poisons_its_row_only() {
    let dev = dev();
    let clean = clean_runs(&dev);
    let (q, k, v) = inputs();
    // Row 12 of head 3 sees keys 0..=8; row 2 of head 1 sees no key at all.
    let q = with_nan(&with_nan(&q, [0, 3, 12, 4]), [0, 1, 2, 0]);
    let poisoned = run_all(&dev, &q, &k, &v);
    check("NaN in q", &clean, &poisoned, |h, i, _| {
        if !sees(i, 0) {
            Want::Zero
        } else if (h, i) == (3, 12) {
            Want::Nan
        } else {
            Want::Clean
        }
    });
}

#[test]
fn nan_in_v_poisons_its_column_of_the_rows_that_see_it() {
    let dev = dev();
    let clean = clean_runs(&dev);
    let (q, k, v) = inputs();
    // Column 3 of key 0 of key/value head 1 (query heads 2 and 3): every
    // row that sees a key sees key 0.
    let v = with_nan(&v, [0, 1, 0, 3]);
    let poisoned = run_all(&dev, &q, &k, &v);
    check("NaN in v", &clean, &poisoned, |h, i, e| {
        if !sees(i, 0) {
            Want::Zero
        } else if h / 2 == 1 && e == Some(3) {
            Want::Nan
        } else {
            Want::Clean
        }
    });
}
