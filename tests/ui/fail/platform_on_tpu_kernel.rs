use tessel::prelude::*;

#[tpu_kernel(platform = "gpu")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
