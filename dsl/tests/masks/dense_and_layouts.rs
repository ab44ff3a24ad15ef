//! Dense expansion, block classification and mask-info tables against the reference masks.

use tessel_dsl::tile::mask::{BlockKind, Mask};

use super::{catalog, check_layout, SHAPES};

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
