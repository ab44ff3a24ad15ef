use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor) -> Tensor {
    let _f = async { 1 };
    x
}

fn main() {}
