use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor) -> Tensor {
    let mut y = x;
    while y.sum(&[0]) < 10.0 {
        y = y * 2.0;
        break;
    }
    y
}

fn main() {}
