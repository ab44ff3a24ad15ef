//! The quickstart: a kernel, its result, and the StableHLO it lowers to.
use tessel::prelude::*;

/// A dense layer with a softmax: softmax(x·w + b) over the last axis.
#[tpu_kernel(precision = "highest")]
fn dense_softmax(x: Tensor, w: Tensor, b: Tensor) -> Tensor {
    (x.matmul(w) + b).softmax(-1)
}

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let x = HostTensor::from_vec(vec![0.0f32, 0.1, 0.2, 0.3, 0.4, 0.5], [2, 3])?;
    let w = HostTensor::from_vec(vec![1.0f32, -1.0, 0.5, 0.5, -0.5, 2.0], [3, 2])?;
    let b = HostTensor::from_vec(vec![0.0f32, 0.1], [2])?;
    let y = dense_softmax::run(&dev, &x, &w, &b)?;
    println!("dense_softmax on {} ({}): {:?}", dev.platform_name(), y.spec(), y.to_vec::<f32>()?);
    println!("{}", dense_softmax::lower(x.spec(), w.spec(), b.spec())?);
    Ok(())
}
