//! Block-sparse against dense matmul, 2048 × 2048 × 2048 f32, block 128.
//!
//! `cargo bench --bench sparse` runs, on the CPU plugin, the library's
//! `block_sparse_matmul` (static layout) at 10%, 50% and 100% block density
//! and a dense `matmul` kernel in the same run, and prints each time with its
//! ratio to dense. Medians of several runs on device-resident arguments.

use tessel::kernels::sparse::block_sparse_matmul;
use tessel::prelude::*;
use tessel::profile::ProfileOptions;

#[cpu_kernel]
fn dense_matmul(a: Tensor, b: Tensor) -> Tensor {
    a.matmul(b)
}

fn pattern(n: usize, block: usize, density: f64) -> HostTensor {
    let nb = n / block;
    let mut s: u64 = 0x2545_F491_4F6C_DD1D;
    let keep: Vec<bool> = (0..nb * nb)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s % 10_000) as f64) < density * 10_000.0
        })
        .collect();
    HostTensor::from_fn(TensorSpec::new([n, n], F32), |i| {
        let (r, c) = (i / n, i % n);
        if keep[(r / block) * nb + c / block] {
            ((i % 17) as f64 - 8.0) / 8.0
        } else {
            0.0
        }
    })
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let (n, block) = (2048, 128);
    let opts = ProfileOptions { warmup: 2, runs: 7 };
    let b = HostTensor::from_fn(TensorSpec::new([n, n], F32), |i| {
        ((i % 13) as f64 - 6.0) / 6.0
    });
    let full = pattern(n, block, 1.0);
    let dense = dense_matmul::profile(&dev, opts, &full, &b)?;
    println!("block-sparse vs dense matmul, {n}x{n}x{n} f32, block {block}, CPU plugin");
    println!(
        "{:<28} {:>8} {:>12} {:>14}",
        "kernel", "blocks", "median", "vs dense"
    );
    println!(
        "{:<28} {:>8} {:>10.2}ms {:>13.2}x",
        "dense matmul",
        (n / block) * (n / block),
        dense.run.median * 1e3,
        1.0
    );
    for density in [0.1, 0.5, 1.0] {
        let a = HostBlockSparse::from_dense(&pattern(n, block, density), (block, block))?;
        let p = block_sparse_matmul::profile(&dev, opts, &a, &b)?;
        println!(
            "{:<28} {:>8} {:>10.2}ms {:>13.2}x",
            format!("sparse, {:.0}% density", density * 100.0),
            a.nnz(),
            p.run.median * 1e3,
            dense.run.median / p.run.median
        );
    }
    Ok(())
}
