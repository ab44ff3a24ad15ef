//! What the serving kernels' programs hold, where it decides their compile
//! time: every fused kernel of a program costs the CPU plugin 10–15 ms of
//! compile whatever its size. A step's metadata checks are one reduction
//! however many there are, and the loop-free decode reduces no axis longer
//! than 32 (XLA's CPU compiler splits a longer reduced axis into two
//! kernels). With the checks' one reduction, a failing check is still the
//! first in program order, reported at its own entry.

extern crate tessel_dsl as tessel;

use tessel::ir::{Graph, Op};
use tessel::kernel::KernelConfig;
use tessel::prelude::*;
use tessel_kernels::serving::{
    kv_cache_update, kv_cache_update_with, paged_attention_with, PagedKv, ServeOptions,
};
use tessel_testing::dev;

/// The pool: `PAGES` pages of `PAGE` tokens, one head of `D`; `B`
/// sequences of tables `WIDTH` pages wide (64 keys a sequence).
const PAGES: usize = 12;
const PAGE: usize = 16;
const WIDTH: usize = 4;
const B: usize = 2;
const D: usize = 8;

fn s32(v: &[i32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

fn specs() -> Vec<(String, TensorSpec)> {
    vec![
        ("pool".into(), TensorSpec::new([PAGES, PAGE, 1, D], F32)),
        ("k".into(), TensorSpec::new([B, 1, D], F32)),
        ("tables".into(), TensorSpec::new([B, WIDTH], S32)),
        ("lens".into(), TensorSpec::new([B], S32)),
        ("cu".into(), TensorSpec::new([B + 1], S32)),
    ]
}

/// The reductions of `g` (plain and arg-).
fn reductions(g: &Graph) -> Vec<&tessel::ir::Node> {
    g.nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Reduce { .. } | Op::ArgReduce { .. }))
        .collect()
}

#[test]
fn a_steps_metadata_checks_are_one_reduction() {
    // A decode step's cache update and the attention reading the cache:
    // lengths, page ids in range and listed once, offsets within the
    // batch, non-decreasing and no more queries than keys.
    let g = tessel::trace("step", &specs(), KernelConfig::default(), |a| {
        let kv = PagedKv::new(a[0], a[0]);
        let kv = kv_cache_update_with(&kv, a[1], a[1], a[2], a[3], a[4]);
        vec![paged_attention_with(
            a[1],
            &kv,
            a[2],
            a[3],
            ServeOptions::new(),
        )]
    })
    .unwrap();
    let unchecked = tessel::trace("step", &specs(), KernelConfig::default(), |a| {
        vec![paged_attention_with(
            a[1],
            &PagedKv::new(a[0], a[0]),
            a[2],
            a[3],
            ServeOptions::new().unchecked(),
        )]
    })
    .unwrap();
    assert!(g.checks.len() >= 6, "{} checks", g.checks.len());
    // The update's own reduction (each token's sequence), the attention's
    // (max, sum, the values' sum and the products' sum over D) and the
    // checks' one.
    let update_own = 1;
    assert_eq!(
        reductions(&g).len(),
        reductions(&unchecked).len() + update_own + 1
    );
}

#[test]
fn the_loop_free_decode_reduces_no_axis_longer_than_32() {
    let g = tessel::trace("decode", &specs(), KernelConfig::default(), |a| {
        let q = a[1].reshape(&[B as isize, 1, D as isize]);
        vec![paged_attention_with(
            q,
            &PagedKv::new(a[0], a[0]),
            a[2],
            a[3],
            ServeOptions::new().unchecked(),
        )]
    })
    .unwrap();
    let r = reductions(&g);
    assert!(!r.is_empty());
    for n in r {
        let shape = &g.values[n.operands[0]].spec.shape;
        let dims = match &n.op {
            Op::Reduce { dims, .. } => dims.clone(),
            Op::ArgReduce { dim, .. } => vec![*dim],
            _ => unreachable!(),
        };
        for d in dims {
            assert!(shape[d] <= 32, "a reduction of {shape:?} over axis {d}");
        }
    }
}

#[test]
fn the_first_failing_check_is_reported_at_its_entry() {
    let dev = dev();
    let pool = HostTensor::from_fn(TensorSpec::new([PAGES, PAGE, 1, D], F32), |_| 0.0);
    let k = HostTensor::from_fn(TensorSpec::new([B, 1, D], F32), |i| i as f64);
    let good = [0, 1, 2, 3, 4, 5, 6, 7];
    let run = |tables: &[i32], lens: &[i32], cu: &[i32]| {
        let r = kv_cache_update::run(
            &dev,
            &pool,
            &pool,
            &k,
            &k,
            &s32(tables, &[B, WIDTH]),
            &s32(lens, &[B]),
            &s32(cu, &[B + 1]),
        );
        match r {
            Err(tessel::Error::Check(c)) => c.message,
            other => panic!("a check error expected, got {other:?}"),
        }
    };
    let (lens, cu) = ([40, 20], [0, 1, 2]);
    assert!(kv_cache_update::run(
        &dev,
        &pool,
        &pool,
        &k,
        &k,
        &s32(&good, &[B, WIDTH]),
        &s32(&lens, &[B]),
        &s32(&cu, &[B + 1])
    )
    .is_ok());
    // Each failure alone, at its entry.
    let mut out = good;
    out[5] = PAGES as i32;
    let m = run(&out, &lens, &cu);
    assert!(
        m.contains("block_tables[1, 1] = 12 is not a page of the pool (0..12)"),
        "{m}"
    );
    let mut twice = good;
    twice[5] = 4;
    let m = run(&twice, &lens, &cu);
    assert!(m.contains("sequence 1 lists page 4 twice"), "{m}");
    let m = run(&good, &[40, 65], &cu);
    assert!(m.contains("kv_lens[1] = 65 is not in 0..=64"), "{m}");
    let m = run(&good, &lens, &[0, 2, 1]);
    assert!(
        m.contains("cu_q_lens decreases at sequence 1: 2 then 1"),
        "{m}"
    );
    let m = run(&good, &[0, 20], &[0, 1, 2]);
    assert!(m.contains("sequence 0 has 1 queries but kv_lens 0"), "{m}");
    // Several at once: the first check in program order (lengths, then
    // page ids, then offsets), whichever entry comes first in the tables.
    let m = run(&out, &[40, 65], &[0, 2, 1]);
    assert!(m.contains("kv_lens[1] = 65"), "{m}");
    let mut both = out;
    both[1] = 4;
    both[0] = -1;
    let m = run(&both, &lens, &[0, 2, 1]);
    assert!(m.contains("block_tables[0, 0] = -1"), "{m}");
}
