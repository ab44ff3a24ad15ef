use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: usize) -> Tensor {
    let mut acc = x;
    'outer: for _ in 0..n {
        acc = acc * 2.0;
    }
    acc
}

fn main() {}
