use tessel::prelude::*;

#[tpu_kernel]
fn k((a, b): (Tensor, Tensor)) -> Tensor {
    a + b
}

fn main() {}
