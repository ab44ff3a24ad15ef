//! A GEMM written over K blocks with `blocks()`: one traced loop, K padded
//! virtually when it is not a multiple of the block size.
use tessel::prelude::*;

/// `a · b`, accumulating one `block_size`-wide slab of K at a time in f32.
#[tpu_kernel(block_size = 128)]
fn gemm(a: Tensor, b: Tensor) -> Tensor {
    let mut acc = Tensor::zeros([a.dim(0), b.dim(1)], F32);
    for kb in blocks(a.dim(1)) {
        acc = acc + a.block(1, kb).matmul_acc(b.block(0, kb), F32);
    }
    acc.cast(a.dtype())
}

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let (m, k, n) = (64, 300, 32); // K = 300 is not a multiple of 128
    let a = HostTensor::from_fn(TensorSpec::new([m, k], F32), |i| ((i % 7) as f64 - 3.0) / 4.0);
    let b = HostTensor::from_fn(TensorSpec::new([k, n], F32), |i| ((i % 5) as f64 - 2.0) / 4.0);
    let c = gemm::run(&dev, &a, &b)?;
    let (av, bv, cv) = (a.to_f64_vec(), b.to_f64_vec(), c.to_f64_vec());
    let max_err = (0..m * n)
        .map(|idx| {
            let want: f64 = (0..k).map(|p| av[idx / n * k + p] * bv[p * n + idx % n]).sum();
            (cv[idx] - want).abs()
        })
        .fold(0.0, f64::max);
    println!("gemm {m}x{k}x{n} in blocks of 128 (3 K blocks, the last ragged): max |error| = {max_err:.2e}");
    let text = gemm::lower(a.spec(), b.spec())?;
    println!("lowered to {} XLA while loop(s)", text.matches("stablehlo.while").count());
    Ok(())
}
