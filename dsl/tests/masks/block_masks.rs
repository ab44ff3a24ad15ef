//! Block masks in a trace (on the XLA CPU plugin), at static, traced and mixed block indices.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::tile::mask::Mask;
use tessel_dsl::{HostTensor, Tensor};

use super::{bools, catalog, cpu, s32, Dense};

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
