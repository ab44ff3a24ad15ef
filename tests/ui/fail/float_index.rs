use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor) -> Tensor {
    x[1.5]
}

fn main() {}
