use tessel::prelude::*;

#[tpu_kernel]
fn k(x: Tensor) -> f32 {
    let _ = x;
    1.0
}

fn main() {}
