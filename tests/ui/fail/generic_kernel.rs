use tessel::prelude::*;

#[tpu_kernel]
fn k<T: Copy>(x: Tensor, t: T) -> Tensor {
    x
}

fn main() {}
