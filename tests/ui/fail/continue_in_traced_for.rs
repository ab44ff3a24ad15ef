use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: usize) -> Tensor {
    let mut acc = x;
    for _ in 0..n {
        if n > 3 {
            continue;
        }
        acc = acc + 1.0;
    }
    acc
}

fn main() {}
