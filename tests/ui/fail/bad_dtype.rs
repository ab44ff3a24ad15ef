use tessel::prelude::*;

#[gpu_kernel(dtype = "float128")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
