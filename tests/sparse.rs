//! Block-sparse kernels: `#[sparse_kernel]` with static and dynamic layouts
//! against dense references with the zero blocks zeroed, edge layouts, and
//! bad block-sparse input as typed errors.

use tessel::kernels::sparse::{block_sparse, block_sparse_matmul, check_block_indices};
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

/// Rows `range` of `t` (a row-major matrix of `cols` columns).
fn rows_of(t: &HostTensor, cols: usize, range: std::ops::Range<usize>) -> Vec<f64> {
    t.to_f64_vec()[range.start * cols..range.end * cols].to_vec()
}

#[test]
fn out_of_range_coordinates_are_errors_on_the_host() {
    let vals = HostTensor::zeros(TensorSpec::new([2, 8, 8], F32));
    let msg = |r: tessel::Result<HostBlockSparse>| r.unwrap_err().to_string();
    // A static layout: the coordinate, its block and the valid range are named.
    let m = msg(HostBlockSparse::from_blocks(
        vals.clone(),
        vec![(0, 1), (100, 0)],
        (16, 24),
    ));
    assert!(
        m.contains("stored block 1 has coordinate (100, 0)")
            && m.contains("block rows must be in 0..2, block columns in 0..3"),
        "{m}"
    );
    // A dynamic layout from a host table.
    let table = HostTensor::from_vec(vec![0i32, 1, 100, -5], [2, 2]).unwrap();
    let m = msg(HostBlockSparse::dynamic(vals.clone(), &table, (16, 16)));
    assert!(
        m.contains("stored block 1 has coordinate (100, -5)") && m.contains("0..2"),
        "{m}"
    );
    let m = HostBlockSparse::check_coords(&table, (16, 16), (8, 8))
        .unwrap_err()
        .to_string();
    assert!(m.contains("(100, -5)") && m.contains("non-negative"), "{m}");
    // The seeds' signature: its host inputs are checked before they go to the device.
    let dense = HostTensor::zeros(TensorSpec::new([16, 3], F32));
    let m = check_block_indices(&dense, &vals, &table, Some(8))
        .unwrap_err()
        .to_string();
    assert!(m.contains("(100, -5)"), "{m}");
    let twice = HostTensor::from_vec(vec![1i32, 1, 1, 1], [2, 2]).unwrap();
    let m = check_block_indices(&dense, &vals, &twice, Some(8))
        .unwrap_err()
        .to_string();
    assert!(m.contains("stored twice (stored blocks 0 and 1)"), "{m}");
    let m = check_block_indices(&dense, &vals, &twice, Some(16))
        .unwrap_err()
        .to_string();
    assert!(m.contains("block_size 16 disagrees"), "{m}");
    let ok = HostTensor::from_vec(vec![0i32, 1, 1, 0], [2, 2]).unwrap();
    check_block_indices(&dense, &vals, &ok, Some(8)).unwrap();
}

#[test]
fn bad_block_shapes_are_errors_at_construction() {
    let dense = HostTensor::zeros(TensorSpec::new([16, 16], F32));
    for (block, needle) in [
        ((0, 8), "height must be at least 1"),
        ((8, 7), "width (7) is not a multiple of 8"),
        ((1 << 40, 8), "above the limit"),
    ] {
        let m = HostBlockSparse::from_dense(&dense, block)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(m.contains(needle), "{block:?}: {m}");
    }
    // A block may cover a whole axis that is not a multiple of 8.
    let small = HostTensor::from_vec(vec![1.0f32; 12 * 5], [12, 5]).unwrap();
    let a = HostBlockSparse::from_dense(&small, (8, 5)).unwrap();
    assert_eq!((a.nnz(), a.to_dense().unwrap()), (2, small));
    let four = HostTensor::zeros(TensorSpec::new([1, 4, 4], F32));
    let m = HostBlockSparse::from_blocks(four, vec![(0, 0)], (16, 16))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(m.contains("not a multiple of 8"), "{m}");
}

fn kernel_message(r: tessel::Result<String>) -> String {
    match r {
        Err(e) if e.is_kernel_error() => e.as_kernel_error().unwrap().message.clone(),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

#[test]
fn block_size_and_operand_shapes_are_checked_while_tracing() {
    let spec = |s: &[usize], dt: DType| TensorSpec::new(s.to_vec(), dt);
    let (dense, values, indices) = (
        spec(&[16, 4], F32),
        spec(&[2, 8, 8], F32),
        spec(&[2, 2], S32),
    );
    let lower = |bs: Option<usize>, values: &TensorSpec| {
        let cfg = block_sparse::CONFIG.with_block_size(bs);
        block_sparse::lower_with(&cfg, &dense, values, &indices)
    };
    assert!(lower(Some(8), &values).is_ok());
    for (bs, needle) in [
        (0, "block_size must be at least 1"),
        (7, "block_size 7 is not a multiple of 8"),
        (usize::MAX, "above the limit"),
        (
            16,
            "block_size 16 disagrees with the values' blocks of 8 x 8",
        ),
        (128, "block_size 128 disagrees"),
    ] {
        let m = kernel_message(lower(Some(bs), &values));
        assert!(m.contains(needle), "block_size {bs}: {m}");
    }
    // Without a block size the values' blocks are taken as they are, checked.
    assert!(lower(None, &values).is_ok());
    let m = kernel_message(lower(None, &spec(&[2, 0, 8], F32)));
    assert!(m.contains("height must be at least 1"), "{m}");
    let m = kernel_message(lower(None, &spec(&[2, 8, 4], F32)));
    assert!(m.contains("width (4) is not a multiple of 8"), "{m}");
    // A dense operand that does not match the block-sparse matrix.
    let cfg = block_sparse::CONFIG.with_block_size(Some(8));
    let m = kernel_message(block_sparse::lower_with(
        &cfg,
        &spec(&[16], F32),
        &values,
        &indices,
    ));
    assert!(m.contains("K x N matrix"), "{m}");
    let a = HostBlockSparse::from_dense(&sparse_dense(16, 24, 8, 1.0, 3), (8, 8)).unwrap();
    let m = kernel_message(block_sparse_matmul::lower(&a.spec(), &spec(&[16, 4], F32)));
    assert!(
        m.contains("must be a matrix of 24 rows (the block-sparse matrix is 16 x 24"),
        "{m}"
    );
}

/// Out-of-range coordinates: `run` refuses them before anything runs; on
/// device buffers (`call`) the block gets NaN values, so the rows XLA
/// clamps it onto come out NaN instead of a plausible wrong result.
#[test]
fn out_of_range_coordinates_are_errors_on_run_and_nan_on_the_device() {
    let d = dev();
    let cfg = block_sparse::CONFIG.with_block_size(Some(8));
    let dense = sparse_dense(16, 3, 1, 1.0, 31);
    let values = sparse_dense(8, 8, 8, 1.0, 32).reshape([1, 8, 8]).unwrap();
    let table = |r: i64, c: i64, dtype: DType| {
        let t = HostTensor::from_vec(vec![r, c], [1, 2]).unwrap();
        if dtype == S32 {
            HostTensor::from_vec(vec![r as i32, c as i32], [1, 2]).unwrap()
        } else {
            t
        }
    };
    let at = |r: usize, c: usize| {
        let a = HostBlockSparse::from_blocks(values.clone(), vec![(r, c)], (16, 16)).unwrap();
        matmul_ref(&a.to_dense().unwrap(), &dense)
    };
    let call = |idx: &HostTensor| {
        let bufs = [&dense, &values, idx].map(|t| d.to_device(t).unwrap());
        block_sparse::call_with(&cfg, &d, &bufs[0], &bufs[1], &bufs[2])
            .unwrap()
            .to_host()
            .unwrap()
    };
    // 2^32 + 1 cast to s32 would be block 1, a valid one; it saturates to
    // 2^31 - 1 instead, whose start (2^31 - 1) · 8 wraps in s32 to -8 and
    // is clamped onto block 0.
    let cases = [
        (100, -5, S32, 8..16),
        (-3, 7, S32, 0..8),
        ((1 << 32) + 1, 0, S64, 0..8),
    ];
    for (r, c, dtype, nan_rows) in cases {
        let idx = table(r, c, dtype);
        let e = block_sparse::run_with(&cfg, &d, &dense, &values, &idx).unwrap_err();
        assert!(
            e.to_string().contains("stored block 0 has coordinate")
                && e.to_string().contains("block rows must be in 0..2"),
            "({r}, {c}): {e}"
        );
        let y = call(&idx);
        let v = y.to_f64_vec();
        for row in 0..16 {
            let clamped = nan_rows.contains(&row);
            let rv = &v[row * 3..row * 3 + 3];
            assert!(
                rv.iter().all(|x| x.is_nan() == clamped),
                "({r}, {c}) row {row}: {rv:?}"
            );
        }
    }
    // In range, both agree with the reference.
    let idx = table(1, 1, S32);
    let y = block_sparse::run_with(&cfg, &d, &dense, &values, &idx).unwrap();
    assert_close(&y, &at(1, 1), 1e-4);
    assert_close(&call(&idx), &at(1, 1), 1e-4);
    assert_eq!(rows_of(&y, 3, 0..8), vec![0.0; 24]);
    let wide = block_sparse::run_with(&cfg, &d, &dense, &values, &table(1, 1, S64)).unwrap();
    assert_eq!(wide, y);
}
