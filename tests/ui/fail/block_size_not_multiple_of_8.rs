use tessel::prelude::*;

#[tpu_kernel(block_size = 100)]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
