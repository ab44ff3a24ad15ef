use tessel::prelude::*;

#[tpu_kernel]
async fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
