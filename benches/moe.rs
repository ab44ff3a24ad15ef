//! The grouped MoE layer against its dense-dispatch reference.
//!
//! `cargo bench --bench moe` runs, on the CPU plugin, the library's `moe`
//! layer (T = 4096 tokens, d = 1024, ff = 4096, 8 experts, top-2, capacity
//! factor 1.25, f32) and the same layer with dense einsum dispatch, in one
//! run, and prints their medians, the ratio, and each program's temp memory.

use tessel::kernels::moe::{moe, moe_moe_dense};
use tessel::prelude::*;
use tessel::profile::ProfileOptions;

#[cpu_kernel]
fn dense_reference(
    x: Tensor,
    router: Tensor,
    w1: Tensor,
    w2: Tensor,
) -> (Tensor, Tensor, Tensor, Tensor) {
    moe_moe_dense(x, router, w1, w2)
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let (t, d, ff, e) = (4096, 1024, 4096, 8);
    let gen = |shape: Vec<usize>, scale: f64| {
        HostTensor::from_fn(TensorSpec::new(shape, F32), move |i| {
            (((i * 7919) % 1999) as f64 / 999.5 - 1.0) * scale
        })
    };
    let x = gen(vec![t, d], 1.0);
    let router = gen(vec![d, e], 0.05);
    let w1 = gen(vec![e, d, ff], 0.03);
    let w2 = gen(vec![e, ff, d], 0.03);
    let opts = ProfileOptions { warmup: 1, runs: 3 };
    let grouped = moe::profile(&dev, opts, &x, &router, &w1, &w2)?;
    let dense = dense_reference::profile(&dev, opts, &x, &router, &w1, &w2)?;
    let mib = |p: &tessel::profile::Profile| {
        p.memory
            .as_ref()
            .map(|m| m.temp_bytes as f64 / 1048576.0)
            .unwrap_or(0.0)
    };
    println!("MoE layer, T={t} d={d} ff={ff} E={e} top-2 capacity 1.25, f32, CPU plugin");
    println!(
        "{:<26} {:>12} {:>12} {:>12}",
        "layer", "median", "temp MiB", "vs dense"
    );
    println!(
        "{:<26} {:>10.1}ms {:>12.1} {:>11.2}x",
        "dense dispatch (einsum)",
        dense.run.median * 1e3,
        mib(&dense),
        1.0
    );
    println!(
        "{:<26} {:>10.1}ms {:>12.1} {:>11.2}x",
        "grouped (expert_kernel)",
        grouped.run.median * 1e3,
        mib(&grouped),
        dense.run.median / grouped.run.median
    );
    Ok(())
}
