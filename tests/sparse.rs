//! Block-sparse kernels: `#[sparse_kernel]` with static and dynamic layouts
//! against dense references with the zero blocks zeroed, edge layouts, and
//! bad block-sparse input as typed errors.

use tessel::kernels::sparse::{block_sparse, block_sparse_matmul};
use tessel::prelude::*;

mod common;

use common::{assert_close, dev, matmul_ref};

/// A `rows × cols` matrix whose `block`-sized tiles are non-zero with
/// probability `density` (deterministic in `seed`).
fn sparse_dense(rows: usize, cols: usize, block: usize, density: f64, seed: u64) -> HostTensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % 1_000_000) as f64 / 1_000_000.0
    };
    let (nbr, nbc) = (rows.div_ceil(block), cols.div_ceil(block));
    let keep: Vec<bool> = (0..nbr * nbc).map(|_| next() < density).collect();
    let vals: Vec<f64> = (0..rows * cols).map(|_| next() * 2.0 - 1.0).collect();
    HostTensor::from_fn(TensorSpec::new([rows, cols], F32), |i| {
        let (r, c) = (i / cols, i % cols);
        if keep[(r / block) * nbc + c / block] {
            vals[i]
        } else {
            0.0
        }
    })
}

#[test]
fn sparse_matmul_matches_dense_for_static_and_dynamic_layouts() {
    let d = dev();
    let cfg = block_sparse_matmul::CONFIG.with_block_size(Some(8));
    for (m, k, n, density, seed) in [
        (16, 16, 4, 0.5, 1),
        (13, 21, 5, 0.4, 2),
        (40, 24, 3, 0.1, 3),
        (8, 8, 1, 1.0, 4),
    ] {
        let dense = sparse_dense(m, k, 8, density, seed);
        let b = sparse_dense(k, n, 1, 1.0, seed + 10);
        let want = matmul_ref(&dense, &b);
        let a = HostBlockSparse::from_dense(&dense, (8, 8)).unwrap();
        assert_eq!(a.to_dense().unwrap(), dense);
        let stat = block_sparse_matmul::run_with(&cfg, &d, &a, &b).unwrap();
        assert_close(&stat, &want, 1e-4);
        let dynamic =
            block_sparse_matmul::run_with(&cfg, &d, &a.clone().into_dynamic(), &b).unwrap();
        assert_close(&dynamic, &want, 1e-4);
        assert_eq!(
            stat.to_f64_vec(),
            dynamic.to_f64_vec(),
            "static and dynamic layouts agree"
        );
    }
}

#[test]
fn empty_and_full_layouts() {
    let d = dev();
    let b = sparse_dense(16, 3, 1, 1.0, 7);
    let zero =
        HostBlockSparse::from_dense(&HostTensor::zeros(TensorSpec::new([16, 16], F32)), (8, 8))
            .unwrap();
    assert_eq!(zero.nnz(), 0);
    let y = block_sparse_matmul::run(&d, &zero, &b).unwrap();
    assert_eq!(y.to_f64_vec(), vec![0.0; 16 * 3]);
    let full = sparse_dense(16, 16, 8, 1.0, 8);
    let a = HostBlockSparse::from_dense(&full, (8, 8)).unwrap();
    assert_eq!(a.nnz(), 4);
    assert_close(
        &block_sparse_matmul::run(&d, &a, &b).unwrap(),
        &matmul_ref(&full, &b),
        1e-4,
    );
}

#[test]
fn dynamic_layouts_share_one_program() {
    let d = Device::cpu_with_devices(1).unwrap();
    let b = sparse_dense(32, 2, 1, 1.0, 5);
    let mut compiles = Vec::new();
    for seed in [11, 12, 13] {
        // Three different patterns with the same number of blocks.
        let vals = sparse_dense(24, 8, 8, 1.0, seed)
            .reshape([3, 8, 8])
            .unwrap();
        let coords: Vec<i32> = match seed {
            11 => vec![0, 0, 1, 2, 3, 1],
            12 => vec![3, 3, 2, 0, 0, 1],
            _ => vec![1, 1, 2, 2, 3, 0],
        };
        let a = HostBlockSparse::dynamic(
            vals,
            &HostTensor::from_vec(coords, [3, 2]).unwrap(),
            (32, 32),
        )
        .unwrap();
        let dense = a.to_dense().unwrap();
        let y = block_sparse_matmul::run_with(
            &block_sparse_matmul::CONFIG.with_block_size(Some(8)),
            &d,
            &a,
            &b,
        )
        .unwrap();
        assert_close(&y, &matmul_ref(&dense, &b), 1e-4);
        compiles.push(d.cache().stats().compiles);
    }
    assert_eq!(
        compiles,
        vec![1, 1, 1],
        "one executable for every dynamic layout"
    );
}

#[test]
fn seeds_block_sparse_signature() {
    let d = dev();
    let dense = sparse_dense(16, 3, 1, 1.0, 21);
    let values = sparse_dense(16, 8, 8, 1.0, 22).reshape([2, 8, 8]).unwrap();
    let indices = HostTensor::from_vec(vec![0i32, 1, 1, 0], [2, 2]).unwrap();
    let cfg = block_sparse::CONFIG.with_block_size(Some(8));
    let y = block_sparse::run_with(&cfg, &d, &dense, &values, &indices).unwrap();
    let a = HostBlockSparse::dynamic(values, &indices, (16, 16)).unwrap();
    assert_close(&y, &matmul_ref(&a.to_dense().unwrap(), &dense), 1e-4);
}

#[test]
fn bad_block_sparse_input_is_a_typed_error() {
    let vals = HostTensor::zeros(TensorSpec::new([2, 8, 8], F32));
    let msg = |r: tessel::Result<HostBlockSparse>| r.unwrap_err().to_string();
    assert!(msg(HostBlockSparse::from_blocks(
        vals.clone(),
        vec![(0, 0)],
        (16, 16)
    ))
    .contains("1 coordinates for 2"));
    assert!(msg(HostBlockSparse::from_blocks(
        vals.clone(),
        vec![(0, 0), (2, 0)],
        (16, 16)
    ))
    .contains("outside"));
    assert!(msg(HostBlockSparse::from_blocks(
        vals.clone(),
        vec![(1, 1), (1, 1)],
        (16, 16)
    ))
    .contains("twice"));
    let bad = HostTensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], [2, 2]).unwrap();
    assert!(msg(HostBlockSparse::dynamic(vals.clone(), &bad, (16, 16))).contains("s32[nnz, 2]"));
    let neg = HostTensor::from_vec(vec![0i32, -1, 1, 0], [2, 2]).unwrap();
    assert!(msg(HostBlockSparse::dynamic(vals.clone(), &neg, (16, 16))).contains("non-negative"));
    let flat = HostTensor::zeros(TensorSpec::new([8, 8], F32));
    assert!(msg(HostBlockSparse::from_blocks(flat, vec![], (8, 8)))
        .contains("[nnz, block_rows, block_cols]"));
    assert!(
        HostBlockSparse::from_dense(&HostTensor::zeros(TensorSpec::new([4], F32)), (2, 2)).is_err()
    );
    // Parts made inside a kernel with the wrong shapes are a trace error.
    let d = dev();
    let dense = HostTensor::zeros(TensorSpec::new([16, 2], F32));
    let idx = HostTensor::from_vec(vec![0i32, 0, 1], [3, 1]).unwrap();
    let err = block_sparse::run(&d, &dense, &vals, &idx).unwrap_err();
    assert!(
        err.is_kernel_error() && err.to_string().contains("[nnz, 2]"),
        "{err}"
    );
}
