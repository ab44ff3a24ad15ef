//! The library GEMM against a single `dot_general`, f32 and bf16, 2048³.
//!
//! `cargo bench --bench gemm` runs, on the CPU plugin, a kernel that is one
//! `dot_general` (the reference) and the library `gemm` with f32 and bf16
//! operands (f32 accumulation), in one run, and prints medians, GFLOP/s and
//! ratios.

use tessel::kernels::gemm::{gemm, GemmOptions};
use tessel::prelude::*;
use tessel::profile::ProfileOptions;

#[cpu_kernel]
fn single_dot(a: Tensor, b: Tensor) -> Tensor {
    a.dot_general(
        b,
        tessel::DotDims {
            lhs_contract: vec![1],
            rhs_contract: vec![0],
            ..Default::default()
        },
        None,
        None,
    )
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let n = 2048;
    let a = HostTensor::from_fn(TensorSpec::new([n, n], F32), |i| {
        ((i % 13) as f64 - 6.0) / 6.0
    });
    let b = HostTensor::from_fn(TensorSpec::new([n, n], F32), |i| {
        ((i % 11) as f64 - 5.0) / 5.0
    });
    let opts = ProfileOptions { warmup: 2, runs: 7 };
    let reference = single_dot::profile(&dev, opts, &a, &b)?;
    let f32_gemm = gemm::profile(&dev, opts, &a, &b, GemmOptions::default())?;
    let (a16, b16) = (a.cast(BF16), b.cast(BF16));
    let bf16_gemm = gemm::profile(
        &dev,
        opts,
        &a16,
        &b16,
        GemmOptions {
            out_dtype: Some(F32),
            ..GemmOptions::default()
        },
    )?;
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "GEMM {n}x{n}x{n}, CPU plugin, medians of {} runs",
        opts.runs
    );
    println!(
        "{:<32} {:>10} {:>10} {:>14}",
        "kernel", "median", "GFLOP/s", "vs dot_general"
    );
    for (name, p) in [
        ("single dot_general (f32)", &reference),
        ("gemm f32", &f32_gemm),
        ("gemm bf16 -> f32 acc", &bf16_gemm),
    ] {
        println!(
            "{:<32} {:>8.1}ms {:>10.1} {:>13.2}x",
            name,
            p.run.median * 1e3,
            flops / p.run.median / 1e9,
            reference.run.median / p.run.median
        );
    }
    Ok(())
}
