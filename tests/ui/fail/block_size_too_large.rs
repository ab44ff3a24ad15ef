use tessel::prelude::*;

#[sparse_kernel(block_size = 18446744073709551615)]
fn k(a: BlockSparse, b: Tensor) -> Tensor {
    a.to_dense().matmul(b)
}

fn main() {}
