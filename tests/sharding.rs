//! Sharded kernels on the CPU plugin's devices: each result equals the
//! single-device run and an f64 reference; bad shardings are typed errors.
//!
//! Tolerance: f32 matmuls at `precision = "highest"` over at most 6 terms,
//! 1e-5 relative to 1 + |reference|.

use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, Shardings};

mod common;

use common::{assert_close, matmul_ref};

#[cpu_kernel(precision = "highest")]
fn dense(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w)
}

#[cpu_kernel]
fn column_sums(x: Tensor) -> Tensor {
    x.sum(&[0])
}

#[cpu_kernel]
fn scaled_pair(x: Tensor, factor: f32) -> (Tensor, Tensor) {
    (x * factor, x.sum(&[1]))
}

fn p(axes: &[Option<&str>]) -> PartitionSpec {
    PartitionSpec::new(axes.iter().copied())
}

fn data(shape: &[usize], seed: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), |i| {
        (((i + 3) * (seed * 7 + 11)) % 23) as f64 / 11.0 - 1.0
    })
}

fn shard_error(r: tessel::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(tessel::Error::Kernel(k)) => {
            assert_eq!(k.op, "shard");
            assert!(
                k.location.file.ends_with("sharding.rs"),
                "{}",
                k.location.file
            );
            k.message.clone()
        }
        other => panic!("expected a sharding kernel error, got {other:?}"),
    }
}

#[test]
fn data_parallel_matmul_equals_the_single_device_run() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    for (m, k, n) in [(2, 1, 1), (6, 5, 3), (10, 7, 4)] {
        let (x, w) = (data(&[m, k], 1), data(&[k, n], 2));
        let rows = p(&[Some("data"), None]);
        let shardings = Shardings::new([rows.clone(), PartitionSpec::replicated()], [rows]);
        let y = dense::run_sharded(&mesh, &shardings, &x, &w).unwrap();
        assert_eq!(y.shape(), &[m, n]);
        assert_close(&y, &matmul_ref(&x, &w), 1e-5);
        assert_close(&y, &dense::run(&dev, &x, &w).unwrap().to_f64_vec(), 1e-5);
    }
}

#[test]
fn two_dimensional_mesh_splits_rows_and_columns() {
    let dev = Device::cpu_with_devices(4).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)]).unwrap();
    let (x, w) = (data(&[8, 6], 3), data(&[6, 4], 4));
    // x by rows over `data`, w by columns over `model`: each device computes one block.
    let shardings = Shardings::new(
        [p(&[Some("data"), None]), p(&[None, Some("model")])],
        [p(&[Some("data"), Some("model")])],
    );
    let y = dense::run_sharded(&mesh, &shardings, &x, &w).unwrap();
    assert_close(&y, &matmul_ref(&x, &w), 1e-5);
    // The contraction axis split over `model`: XLA adds the partial products.
    let shardings = Shardings::new(
        [p(&[None, Some("model")]), p(&[Some("model"), None])],
        [p(&[Some("data"), None])],
    );
    let y = dense::run_sharded(&mesh, &shardings, &x, &w).unwrap();
    assert_close(&y, &matmul_ref(&x, &w), 1e-5);
    // Mesh axes in the other order.
    let shardings = Shardings::new(
        [p(&[Some("model"), None]), PartitionSpec::replicated()],
        [p(&[Some("model"), Some("data")])],
    );
    let y = dense::run_sharded(&mesh, &shardings, &x, &w).unwrap();
    assert_close(&y, &matmul_ref(&x, &w), 1e-5);
}

#[test]
fn reductions_over_a_split_axis_and_replicated_results() {
    let dev = Device::cpu_with_devices(4).unwrap();
    let mesh = Mesh::new(&dev, &[("rows", 4)]).unwrap();
    let x = data(&[12, 3], 5);
    // No result specs: the column sums come back replicated (whole).
    let shardings = Shardings::new([p(&[Some("rows")])], []);
    let sums = column_sums::run_sharded(&mesh, &shardings, &x).unwrap();
    let xv = x.to_f64_vec();
    let want: Vec<f64> = (0..3)
        .map(|j| (0..12).map(|i| xv[i * 3 + j]).sum())
        .collect();
    assert_close(&sums, &want, 1e-5);
    // Static arguments have no spec; two results with their own specs.
    let shardings = Shardings::new(
        [p(&[Some("rows")])],
        [p(&[Some("rows")]), p(&[Some("rows")])],
    );
    let (scaled, rowsum) = scaled_pair::run_sharded(&mesh, &shardings, &x, 2.0).unwrap();
    assert_close(
        &scaled,
        &xv.iter().map(|v| v * 2.0).collect::<Vec<_>>(),
        1e-5,
    );
    let want: Vec<f64> = (0..12)
        .map(|i| (0..3).map(|j| xv[i * 3 + j]).sum())
        .collect();
    assert_close(&rowsum, &want, 1e-5);
}

#[test]
fn sharded_programs_are_cached_per_sharding() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    let (x, w) = (data(&[4, 3], 6), data(&[3, 2], 7));
    let rows = Shardings::new([p(&[Some("data")]), PartitionSpec::replicated()], []);
    let cols = Shardings::new([PartitionSpec::replicated(), p(&[None, Some("data")])], []);
    dense::run_sharded(&mesh, &rows, &x, &w).unwrap();
    let misses = dev.cache().stats().misses;
    let again = dense::run_sharded(&mesh, &rows, &x, &w).unwrap();
    assert_eq!(
        dev.cache().stats().misses,
        misses,
        "the same sharding hits the cache"
    );
    let other = dense::run_sharded(&mesh, &cols, &x, &w).unwrap();
    assert_eq!(
        dev.cache().stats().misses,
        misses + 1,
        "another sharding compiles"
    );
    assert_close(&again, &matmul_ref(&x, &w), 1e-5);
    assert_close(&other, &matmul_ref(&x, &w), 1e-5);
}

#[test]
fn bad_shardings_are_typed_errors_naming_the_problem() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    let (x, w) = (data(&[5, 3], 8), data(&[3, 2], 9));
    let rep = PartitionSpec::replicated;
    let uneven = Shardings::new([p(&[Some("data")]), rep()], []);
    let m = shard_error(dense::run_sharded(&mesh, &uneven, &x, &w));
    assert!(
        m.contains("does not split evenly") && m.contains("`data`"),
        "{m}"
    );
    let unknown = Shardings::new([p(&[Some("batch")]), rep()], []);
    let m = shard_error(dense::run_sharded(&mesh, &unknown, &x, &w));
    assert!(
        m.contains("`batch`") && m.contains("the mesh has data"),
        "{m}"
    );
    let x4 = data(&[4, 4], 8);
    let twice = Shardings::new([p(&[Some("data"), Some("data")]), rep()], []);
    let m = shard_error(dense::run_sharded(&mesh, &twice, &x4, &data(&[4, 2], 1)));
    assert!(m.contains("twice"), "{m}");
    let too_long = Shardings::new([p(&[None, None, None]), rep()], []);
    let m = shard_error(dense::run_sharded(&mesh, &too_long, &x, &w));
    assert!(m.contains("3 entries for a rank-2"), "{m}");
    let count = Shardings::new([rep()], []);
    let m = shard_error(dense::run_sharded(&mesh, &count, &x, &w));
    assert!(m.contains("1 input partition specs for 2"), "{m}");
    let outs = Shardings::new([rep(), rep()], [rep(), rep()]);
    let m = shard_error(dense::run_sharded(&mesh, &outs, &x, &w));
    assert!(m.contains("2 output partition specs for 1"), "{m}");
    // Meshes that do not fit the client.
    for axes in [
        &[("data", 4)][..],
        &[][..],
        &[("a", 0)][..],
        &[("a", 1), ("a", 1)][..],
    ] {
        assert!(matches!(
            Mesh::new(&dev, axes),
            Err(tessel::Error::Device(tessel::DeviceError::Sharding(_)))
        ));
    }
}

#[test]
fn sharded_buffers_stay_on_the_devices_between_calls() {
    use tessel::kernel::Kernel;
    use tessel::shard::ShardedBuffer;
    let dev = Device::cpu_with_devices(4).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)]).unwrap();
    let layer = Kernel::new("layer", |a: &[Tensor]| {
        a[0].matmul_with(a[1], Some(Precision::Highest), None)
    });
    let (x, w1, w2) = (data(&[8, 6], 10), data(&[6, 4], 11), data(&[4, 2], 12));
    let rows = p(&[Some("data")]);
    let xb = ShardedBuffer::from_host(&mesh, &x, &rows).unwrap();
    let w1b = ShardedBuffer::from_host(&mesh, &w1, &p(&[None, Some("model")])).unwrap();
    let w2b = ShardedBuffer::from_host(&mesh, &w2, &PartitionSpec::replicated()).unwrap();
    let h = layer
        .call_sharded(&mesh, std::slice::from_ref(&rows), &[&xb, &w1b])
        .unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].spec().shape, vec![8, 4]);
    assert_eq!(h[0].shards()[3].spec().shape, vec![4, 4]);
    let y = layer.call_sharded(&mesh, &[rows], &[&h[0], &w2b]).unwrap();
    let hv = HostTensor::from_vec(
        matmul_ref(&x, &w1).iter().map(|&v| v as f32).collect(),
        [8, 4],
    )
    .unwrap();
    assert_close(&h[0].to_host().unwrap(), &matmul_ref(&x, &w1), 1e-5);
    assert_close(&y[0].to_host().unwrap(), &matmul_ref(&hv, &w2), 1e-5);
    // A buffer from another mesh is refused before anything runs.
    let other = Mesh::new(&dev, &[("data", 4)]).unwrap();
    let err = layer.call_sharded(&other, &[], &[&xb, &w1b]).unwrap_err();
    assert!(err.to_string().contains("lives on mesh"), "{err}");
    // A spec that does not fit the tensor is a sharding error.
    assert!(matches!(
        ShardedBuffer::from_host(&mesh, &data(&[3, 2], 1), &p(&[Some("data")])),
        Err(tessel::Error::Device(tessel::DeviceError::Sharding(_)))
    ));
}

#[test]
fn macro_kernels_call_on_sharded_buffers() {
    use tessel::shard::ShardedBuffer;
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    let x = data(&[6, 4], 13);
    let rows = p(&[Some("data")]);
    let xb = ShardedBuffer::from_host(&mesh, &x, &rows).unwrap();
    // Two results, the first kept split by rows, the second replicated.
    let (scaled, rowsum) = scaled_pair::call_sharded(
        &mesh,
        &[rows.clone(), PartitionSpec::replicated()],
        &xb,
        3.0,
    )
    .unwrap();
    assert_eq!(scaled.partition_spec(), &rows);
    assert_eq!(scaled.shards()[0].spec().shape, vec![3, 4]);
    assert_eq!(rowsum.shards()[1].spec().shape, vec![6]);
    let xv = x.to_f64_vec();
    assert_close(
        &scaled.to_host().unwrap(),
        &xv.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
        1e-5,
    );
    let want: Vec<f64> = (0..6)
        .map(|i| (0..4).map(|j| xv[i * 4 + j]).sum())
        .collect();
    assert_close(&rowsum.to_host().unwrap(), &want, 1e-5);
    // Feeding a result back in keeps it on the devices.
    let sums = column_sums::call_sharded(&mesh, &[], &scaled).unwrap();
    let want: Vec<f64> = (0..4)
        .map(|j| (0..6).map(|i| 3.0 * xv[i * 4 + j]).sum())
        .collect();
    assert_close(&sums.to_host().unwrap(), &want, 1e-5);
}

#[cpu_kernel]
fn masked_shift(x: Tensor, keep: Tensor, shift: Tensor) -> Tensor {
    keep.select(x + shift, x)
}

#[test]
fn scalars_predicates_and_integers_shard() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    let x = HostTensor::from_vec((0..8).collect::<Vec<i32>>(), [4, 2]).unwrap();
    let keep =
        HostTensor::from_vec((0..8).map(|i| i % 3 == 0).collect::<Vec<bool>>(), [4, 2]).unwrap();
    let shift = HostTensor::scalar(100i32);
    let rows = p(&[Some("data")]);
    let shardings = Shardings::new(
        [
            rows.clone(),
            p(&[None, Some("data")]),
            PartitionSpec::replicated(),
        ],
        [rows],
    );
    let y = masked_shift::run_sharded(&mesh, &shardings, &x, &keep, &shift).unwrap();
    let want: Vec<i32> = (0..8)
        .map(|i| if i % 3 == 0 { i + 100 } else { i })
        .collect();
    assert_eq!(y.to_vec::<i32>().unwrap(), want);
    // A scalar cannot be split.
    let bad = Shardings::new(
        [
            PartitionSpec::replicated(),
            PartitionSpec::replicated(),
            p(&[Some("data")]),
        ],
        [],
    );
    let m = shard_error(masked_shift::run_sharded(&mesh, &bad, &x, &keep, &shift));
    assert!(m.contains("rank-0"), "{m}");
}

/// `a · b` for a block-sparse `a`, one traced loop over its stored blocks.
#[sparse_kernel(block_size = 8)]
fn sparse_matmul(a: BlockSparse, b: Tensor) -> Tensor {
    let (b0, b1) = a.block_shape();
    let mut out = Tensor::zeros([a.rows(), b.dim(1)], b.dtype());
    for i in 0..a.block_count() {
        let blk = a.block_at(i);
        let rows = out.block_sized(0, blk.row, b0, 0.0);
        let cols = b.block_sized(0, blk.col, b1, 0.0);
        out = out.set_block(0, blk.row, rows + blk.values.matmul(cols));
    }
    out
}

#[test]
fn block_sparse_parameters_call_on_sharded_buffers() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    // A 24 × 20 matrix with 8 × 8 blocks (the last block column partial);
    // four of its nine blocks hold a non-zero.
    let dense = HostTensor::from_fn(TensorSpec::new([24, 20], F32), |i| {
        let (r, c) = (i / 20, i % 20);
        let kept = matches!((r / 8, c / 8), (0, 0) | (1, 2) | (2, 1) | (2, 2));
        if kept {
            ((i * 7) % 11) as f64 / 5.0 - 1.0
        } else {
            0.0
        }
    });
    let b = data(&[20, 3], 17);
    let want = matmul_ref(&dense, &b);
    let a = HostBlockSparse::from_dense(&dense, (8, 8)).unwrap();
    assert_eq!(a.nnz(), 4);
    let rows = p(&[Some("data")]);
    let bb = tessel::shard::ShardedBuffer::from_host(&mesh, &b, &rows).unwrap();
    for layout in [a.clone(), a.clone().into_dynamic()] {
        // The stored blocks split over the devices, or on each of them.
        for values in [rows.clone(), PartitionSpec::replicated()] {
            let am = layout.to_mesh(&mesh, &values).unwrap();
            let y =
                sparse_matmul::call_sharded(&mesh, std::slice::from_ref(&rows), &am, &bb).unwrap();
            assert_eq!(y.partition_spec(), &rows);
            assert_close(&y.to_host().unwrap(), &want, 1e-5);
        }
        // Per device (shard_map), with the blocks on every device.
        let am = layout.to_mesh(&mesh, &PartitionSpec::replicated()).unwrap();
        let whole = PartitionSpec::replicated();
        let bw = tessel::shard::ShardedBuffer::from_host(&mesh, &b, &whole).unwrap();
        let y =
            sparse_matmul::call_shard_map(&mesh, std::slice::from_ref(&whole), &am, &bw).unwrap();
        assert_close(&y.to_host().unwrap(), &want, 1e-5);
        let split = layout.to_mesh(&mesh, &rows).unwrap();
        // Split, each device would see half the blocks under all the
        // coordinates: a kernel error, not a wrong product.
        match sparse_matmul::call_shard_map(&mesh, &[whole], &split, &bw) {
            Err(tessel::Error::Kernel(k)) => {
                assert_eq!(k.op, "block_sparse");
                assert!(k.message.contains("replicate"), "{}", k.message);
                assert!(k.location.file.ends_with("sharding.rs"), "{}", k.location);
            }
            other => panic!("expected a kernel error, got {other:?}"),
        }
    }
    // No stored block at all: a zero product, split or not.
    let zero = HostTensor::zeros(TensorSpec::new([24, 20], F32));
    let zero = HostBlockSparse::from_dense(&zero, (8, 8)).unwrap();
    assert_eq!(zero.nnz(), 0);
    for layout in [zero.clone(), zero.into_dynamic()] {
        let am = layout.to_mesh(&mesh, &rows).unwrap();
        let y = sparse_matmul::call_sharded(&mesh, &[], &am, &bb).unwrap();
        assert_close(&y.to_host().unwrap(), &[0.0; 24 * 3], 0.0);
    }
    // Nine stored blocks do not split over two devices: a typed error.
    let odd = HostTensor::from_fn(TensorSpec::new([24, 20], F32), |i| {
        (i % 4 == 0) as u8 as f64
    });
    let odd = HostBlockSparse::from_dense(&odd, (8, 8)).unwrap();
    assert_eq!(odd.nnz() % 2, 1, "the case needs an odd block count");
    match odd.to_mesh(&mesh, &rows) {
        Err(tessel::Error::Device(tessel::DeviceError::Sharding(m))) => {
            assert!(m.contains("data"), "{m}")
        }
        other => panic!("expected a sharding error, got {other:?}"),
    }
}
