use tessel::prelude::*;

#[expert_kernel(top_k = 2)]
fn ffn(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
