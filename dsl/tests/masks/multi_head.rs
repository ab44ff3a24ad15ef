//! Multi-head masks: dense bits, per-head and union layouts, mask info and traced block masks.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::tile::mask::{BlockKind, Mask, MultiHeadMask};
use tessel_dsl::Tensor;

use super::{bools, catalog, check_layout, cpu, s32};

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
