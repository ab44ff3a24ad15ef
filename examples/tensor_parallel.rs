//! A Megatron-style MLP written per device (`shard_map`) on a 2 × 2 mesh:
//! the batch split over `data`, the hidden layer over `model`. `w1` is split
//! by columns and `w2` by rows, so each device computes its slice of the
//! hidden layer and a partial output, and one `psum` over `model` adds the
//! partials. The result equals the same MLP on one device.
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, Shardings};

/// One device's part: `x` `[batch/2, d]`, `w1` `[d, ff/2]`, `w2` `[ff/2, d]`.
#[cpu_kernel(precision = "highest")]
fn mlp_block(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    let h = x.matmul(w1).relu();
    h.matmul(w2).psum(&["model"])
}

/// The same MLP on whole tensors, on one device.
#[cpu_kernel(precision = "highest")]
fn mlp(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    x.matmul(w1).relu().matmul(w2)
}

fn main() -> tessel::Result<()> {
    let (batch, d, ff) = (64, 128, 512);
    let data = |shape: [usize; 2], scale: f64| {
        HostTensor::from_fn(TensorSpec::new(shape, F32), move |i| (((i * 7919) % 1999) as f64 / 999.5 - 1.0) * scale)
    };
    let (x, w1, w2) = (data([batch, d], 1.0), data([d, ff], 0.1), data([ff, d], 0.1));
    let dev = Device::cpu_with_devices(4)?;
    let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)])?;
    let spec = |a: [Option<&str>; 2]| PartitionSpec::new(a);
    let shardings = Shardings::new(
        [spec([Some("data"), None]), spec([None, Some("model")]), spec([Some("model"), None])],
        [spec([Some("data"), None])],
    );
    let t = std::time::Instant::now();
    let parallel = mlp_block::run_shard_map(&mesh, &shardings, &x, &w1, &w2)?;
    let t_parallel = t.elapsed();
    let one = Device::cpu()?;
    let t = std::time::Instant::now();
    let single = mlp::run(&one, &x, &w1, &w2)?;
    let t_single = t.elapsed();
    let (a, b) = (parallel.to_vec::<f32>()?, single.to_vec::<f32>()?);
    let diff = a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    println!(
        "tensor-parallel MLP on mesh ({}): out {}, max |parallel - single device| = {diff:.2e}",
        mesh.describe(),
        parallel.spec()
    );
    println!(
        "first call (trace + compile + run): {:.1} ms on 4 devices, {:.1} ms on one",
        t_parallel.as_secs_f64() * 1e3,
        t_single.as_secs_f64() * 1e3
    );
    Ok(())
}
