use tessel::prelude::*;

#[tpu_kernel(block_size = "128")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
