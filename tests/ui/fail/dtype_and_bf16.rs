use tessel::prelude::*;

#[tpu_kernel(dtype = "f32", use_bfloat16 = true)]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
