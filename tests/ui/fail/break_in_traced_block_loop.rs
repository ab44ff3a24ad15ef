use tessel::prelude::*;

fn row_blocks(x: &Tensor) -> tessel::tile::Blocks {
    blocks(x.dim(0))
}

#[cpu_kernel(block_size = 8)]
fn k(x: Tensor) -> Tensor {
    let mut acc = x.block(0, 0);
    for b in row_blocks(&x) {
        acc = acc + x.block(0, b);
        break;
    }
    acc
}

fn main() {}
