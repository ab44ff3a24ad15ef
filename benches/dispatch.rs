//! Dispatch cost of a cached trivial kernel.
//!
//! `cargo bench --bench dispatch` times, on the CPU plugin, a kernel whose
//! compiled program is already in the device's cache: `run` (host tensors
//! in and out: cache lookup, copy in, execute, copy out) and `call` (device
//! buffers: cache lookup and execute). The reference in the same run is the
//! executable itself, called directly (`Executable::run` / `execute`), so the
//! ratio is what the kernel layer adds. Medians of many calls; the machine
//! is noisy, compare ratios rather than absolute times.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tessel::prelude::*;

#[cpu_kernel]
fn add_one(x: Tensor) -> Tensor {
    x + 1.0
}

fn median(mut f: impl FnMut(), n: usize) -> Duration {
    for _ in 0..n / 10 {
        f();
    }
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let x = HostTensor::from_vec(vec![1.0f32; 16], [16])?;
    let buf = dev.to_device(&x)?;
    let exe = add_one::compile(&dev, x.spec())?;
    let n = 20_000;

    let exe_run = median(|| drop(black_box(exe.run(&[&x]).unwrap())), n);
    let kernel_run = median(|| drop(black_box(add_one::run(&dev, &x).unwrap())), n);
    let exe_exec = median(|| drop(black_box(exe.execute(&[&buf]).unwrap())), n);
    let kernel_call = median(|| drop(black_box(add_one::call(&dev, &buf).unwrap())), n);
    let lookup = median(
        || drop(black_box(add_one::compile(&dev, x.spec()).unwrap())),
        n,
    );

    println!("dispatch of a cached trivial kernel (f32[16] + 1), median of {n} calls");
    println!("{:<44} {:>10} {:>8}", "path", "time", "ratio");
    let row = |name: &str, t: Duration, r: Duration| {
        println!(
            "{name:<44} {:>8.1}us {:>7.2}x",
            t.as_secs_f64() * 1e6,
            t.as_secs_f64() / r.as_secs_f64()
        );
    };
    row("Executable::run (reference, host in/out)", exe_run, exe_run);
    row(
        "add_one::run (cache lookup + host in/out)",
        kernel_run,
        exe_run,
    );
    row(
        "Executable::execute (reference, buffers)",
        exe_exec,
        exe_exec,
    );
    row(
        "add_one::call (cache lookup + buffers)",
        kernel_call,
        exe_exec,
    );
    row("add_one::compile (cache lookup only)", lookup, exe_exec);
    Ok(())
}
