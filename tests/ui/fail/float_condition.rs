use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, scale: f32) -> Tensor {
    if scale {
        x
    } else {
        x * 2.0
    }
}

fn main() {}
