use tessel::prelude::*;

#[expert_kernel(num_experts = 4, top_k = 8)]
fn ffn(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
