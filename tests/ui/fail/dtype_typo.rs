use tessel::prelude::*;

#[gpu_kernel(dtype = "fp16")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
