use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: f32) -> Tensor {
    let mut acc = x;
    for _ in 0..n {
        acc = acc + 1.0;
    }
    acc
}

fn main() {}
