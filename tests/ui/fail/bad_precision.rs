use tessel::prelude::*;

#[tpu_kernel(precision = "higher")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
