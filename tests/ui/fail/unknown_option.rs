use tessel::prelude::*;

#[tpu_kernel(precison = "high")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
