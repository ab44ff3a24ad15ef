//! Dispatch cost of a cached trivial kernel.
//!
//! `cargo bench --bench dispatch` times, on the CPU plugin, a kernel whose
//! compiled program is already in the device's cache: `run` (host tensors
//! in and out: cache lookup, copy in, execute, copy out) and `call` (device
//! buffers: cache lookup and execute). The reference in the same run is the
//! executable itself, called directly (`Executable::run` / `execute`), so the
//! ratio is what the kernel layer adds. Medians of many calls; the machine
//! is noisy, compare ratios rather than absolute times.
//!
//! Trees: a kernel over a 100-leaf `#[derive(Tree)]` struct (25 layers of
//! 4 tensors) called with its device form, against the same program as a
//! closure kernel over a hand-flattened list of 100 buffers; the ratio is
//! what flattening the tree, naming its leaves and rebuilding the result
//! adds to a cached call.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tessel::prelude::*;
use tessel::{Tree, TreeValue};

#[cpu_kernel]
fn add_one(x: Tensor) -> Tensor {
    x + 1.0
}

#[derive(Tree)]
struct Layer<T = Tensor> {
    w: T,
    b: T,
    g: T,
    h: T,
}

#[derive(Tree)]
struct Wide<T = Tensor> {
    layers: Vec<Layer<T>>,
}

#[cpu_kernel]
fn add_one_tree(p: Wide) -> Wide {
    let step = |l: &Layer| Layer {
        w: l.w + 1.0,
        b: l.b + 1.0,
        g: l.g + 1.0,
        h: l.h + 1.0,
    };
    Wide {
        layers: p.layers.iter().map(step).collect(),
    }
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

    let wide = Wide {
        layers: (0..25)
            .map(|_| -> tessel::Result<Layer<DeviceBuffer>> {
                Ok(Layer {
                    w: dev.to_device(&x)?,
                    b: dev.to_device(&x)?,
                    g: dev.to_device(&x)?,
                    h: dev.to_device(&x)?,
                })
            })
            .collect::<tessel::Result<_>>()?,
    };
    let flat_kernel = tessel::kernel::Kernel::new("add_one_flat", |a: &[Tensor]| {
        a.iter().map(|t| *t + 1.0).collect::<Vec<_>>()
    })
    .config(add_one_tree::CONFIG);
    let flat: Vec<&DeviceBuffer> = wide.leaves();
    let tree_exe = add_one_tree::compile(&dev, &tessel::tree::specs(&wide))?;
    // Alternating rounds, the best median of each (the machine is noisy).
    let m = n / 20;
    let mut best = [Duration::MAX; 3];
    for _ in 0..7 {
        let times = [
            median(
                || drop(black_box(flat_kernel.call(&dev, &flat).unwrap())),
                m,
            ),
            median(
                || drop(black_box(add_one_tree::call(&dev, &wide).unwrap())),
                m,
            ),
            median(|| drop(black_box(tree_exe.execute(&flat).unwrap())), m),
        ];
        for (b, t) in best.iter_mut().zip(times) {
            *b = (*b).min(t);
        }
    }
    let [flat_call, tree_call, tree_exec] = best;

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
    println!("100 leaves (f32[16] + 1 each), best of 7 alternating medians of {m} calls");
    row(
        "closure kernel, 100 flat buffers (reference)",
        flat_call,
        flat_call,
    );
    row(
        "add_one_tree::call (100-leaf tree in and out)",
        tree_call,
        flat_call,
    );
    row(
        "its Executable::execute (100 flat buffers)",
        tree_exec,
        flat_call,
    );
    Ok(())
}
