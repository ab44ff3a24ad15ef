use tessel::prelude::*;

#[cpu_kernel]
fn k(#[donate(all)] x: Tensor, y: Tensor) -> Tensor {
    x + y
}

fn main() {}
