use tessel::prelude::*;

#[tpu_kernel]
fn k(x: Tensor) {
    let _ = x;
}

fn main() {}
