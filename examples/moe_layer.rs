//! A mixture-of-experts layer written as one expert with `#[expert_kernel]`:
//! the attribute routes tokens (top-2 of 4 experts), runs the experts as one
//! grouped computation and combines them; compared with its dense-dispatch
//! reference.
use tessel::prelude::*;

/// One expert: a ReLU feed-forward block.
#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 1.25)]
fn expert(x: Tensor, w_in: Tensor, w_out: Tensor) -> Tensor {
    x.matmul(w_in).relu().matmul(w_out)
}

/// The same layer with dense einsum dispatch, for comparison.
#[cpu_kernel]
fn dense(x: Tensor, router: Tensor, w_in: Tensor, w_out: Tensor) -> (Tensor, Tensor, Tensor, Tensor) {
    expert_moe_dense(x, router, w_in, w_out)
}

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let (t, d, ff, e) = (64, 16, 32, 4);
    let gen = |shape: Vec<usize>, scale: f64| {
        HostTensor::from_fn(TensorSpec::new(shape, F32), move |i| (((i * 7919) % 1999) as f64 / 999.5 - 1.0) * scale)
    };
    let (x, router) = (gen(vec![t, d], 1.0), gen(vec![d, e], 1.0));
    let (w_in, w_out) = (gen(vec![e, d, ff], 0.3), gen(vec![e, ff, d], 0.3));
    let (y, aux, z, dropped) = expert::run(&dev, &x, &router, &w_in, &w_out)?;
    let (y_dense, ..) = dense::run(&dev, &x, &router, &w_in, &w_out)?;
    let diff = y.to_f64_vec().iter().zip(y_dense.to_f64_vec()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    println!("output {:?}, load-balancing loss {:.4}, z-loss {:.4}", y.shape(), aux.to_f64_vec()[0], z.to_f64_vec()[0]);
    println!("dropped assignments: {} of {}", dropped.to_vec::<i32>()?[0], t * 2);
    println!("max |grouped - dense dispatch| = {diff:.2e}");
    Ok(())
}
