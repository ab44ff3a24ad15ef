use tessel::prelude::*;

#[tpu_kernel("high")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
