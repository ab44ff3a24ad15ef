//! Per-example gradient norms of a small MLP with `vmap(grad(..))`: the
//! quantity DP-SGD clips, for a batch of 64 examples in one program,
//! against a loop that differentiates one example per call.
//!
//! ```text
//! cargo run --release --example per_example_grads
//! ```

use std::time::{Duration, Instant};

use tessel::prelude::*;

const BATCH: usize = 64;
const INPUTS: usize = 16;
const HIDDEN: usize = 32;

#[derive(Tree, Clone)]
struct Mlp<T = Tensor> {
    w1: T,
    b1: T,
    w2: T,
    b2: T,
}

/// The squared error of one example `x: [INPUTS]`, `y: []`.
fn loss(p: &Mlp, x: Tensor, y: Tensor) -> Tensor {
    let h = (x.reshape(&[1, INPUTS as isize]).matmul(p.w1) + p.b1).tanh();
    let out = h.matmul(p.w2).reshape(&[]) + p.b2.reshape(&[]);
    (out - y).square()
}

/// The L2 norm of one example's gradient over every parameter.
fn grad_norm(p: &Mlp, x: Tensor, y: Tensor) -> Tensor {
    let g = grad(|p: Mlp| loss(&p, x, y), p.clone());
    let squares = [g.w1, g.b1, g.w2, g.b2].map(|t| t.square().reshape(&[-1]).sum(&[0]));
    squares.into_iter().reduce(|a, b| a + b).unwrap_or_else(|| Tensor::scalar(0.0, F32)).sqrt()
}

/// Every example's gradient norm at once: `xs: [BATCH, INPUTS]`, `ys: [BATCH]`.
#[cpu_kernel]
fn batch_grad_norms(p: Mlp, xs: Tensor, ys: Tensor) -> Tensor {
    vmap(|(x, y): (Tensor, Tensor)| grad_norm(&p, x, y), (xs, ys))
}

/// One example's gradient norm.
#[cpu_kernel]
fn one_grad_norm(p: Mlp, x: Tensor, y: Tensor) -> Tensor {
    grad_norm(&p, x, y)
}

fn host(shape: &[usize], seed: u64) -> HostTensor {
    let mut s = seed;
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), F32), |_| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 40) as f64 / (1u64 << 24) as f64 - 0.5) * 0.8
    })
}

fn main() -> Result<()> {
    let dev = Device::from_env()?;
    let p =
        Mlp { w1: host(&[INPUTS, HIDDEN], 1), b1: host(&[HIDDEN], 2), w2: host(&[HIDDEN, 1], 3), b2: host(&[1], 4) };
    let (xs, ys) = (host(&[BATCH, INPUTS], 5), host(&[BATCH], 6));
    let params = tree::to_device(&dev, &p)?;
    let (xs_d, ys_d) = (dev.to_device(&xs)?, dev.to_device(&ys)?);

    // The batched program, and a loop calling the one-example program once
    // per example (each timed as the fastest of 5 runs, compiles excluded).
    let fastest = |run: &mut dyn FnMut() -> Result<()>| -> Result<Duration> {
        run()?;
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            run()?;
            best = best.min(start.elapsed());
        }
        Ok(best)
    };
    let mut norms = Vec::new();
    let batched = fastest(&mut || {
        norms = batch_grad_norms::call(&dev, &params, &xs_d, &ys_d)?.to_host()?.to_vec::<f32>()?;
        Ok(())
    })?;
    let (xv, yv) = (xs.to_vec::<f32>()?, ys.to_vec::<f32>()?);
    let example = |i: usize| -> Result<(DeviceBuffer, DeviceBuffer)> {
        let x = HostTensor::from_vec(xv[i * INPUTS..(i + 1) * INPUTS].to_vec(), [INPUTS])?;
        Ok((dev.to_device(&x)?, dev.to_device(&HostTensor::scalar(yv[i]))?))
    };
    let inputs = (0..BATCH).map(example).collect::<Result<Vec<_>>>()?;
    let mut looped = Vec::new();
    let each = fastest(&mut || {
        looped.clear();
        for (x, y) in &inputs {
            looped.push(one_grad_norm::call(&dev, &params, x, y)?.to_host()?.to_vec::<f32>()?[0]);
        }
        Ok(())
    })?;

    let max_diff = norms.iter().zip(&looped).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    println!("per-example gradient norms of {BATCH} examples: {:.4?} ...", &norms[..4]);
    println!("max |vmap - loop|: {max_diff:e}");
    println!("one vmapped call: {batched:.2?}; {BATCH} calls of one example: {each:.2?}");
    Ok(())
}
