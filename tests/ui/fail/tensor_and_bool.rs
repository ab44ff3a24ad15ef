use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, strict: bool) -> Tensor {
    let m = x > 0.0 && strict;
    m.select(x, 0.0)
}

fn main() {}
