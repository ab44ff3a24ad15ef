use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: usize) -> Tensor {
    let mut acc = x;
    for _ in 0..n {
        acc = acc * 2.0;
        return acc;
    }
    acc
}

fn main() {}
