use tessel::prelude::*;

#[tpu_kernel]
fn k(x: Tensor, device: usize) -> Tensor {
    x * device as f32
}

fn main() {}
