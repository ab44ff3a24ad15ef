use tessel::prelude::*;

#[sparse_kernel(platform = "tpu")]
fn k(a: BlockSparse, b: Tensor) -> Tensor {
    b
}

fn main() {}
