use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: usize) -> Tensor {
    let mut acc = x;
    let mut count = 0usize;
    for _ in 0..n {
        acc = acc * 2.0;
        count += 1;
    }
    acc * count as f32
}

fn main() {}
