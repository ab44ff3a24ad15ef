use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor) -> Tensor {
    let mut acc = x;
    for _ in 0.. {
        acc = acc * 2.0;
    }
    acc
}

fn main() {}
