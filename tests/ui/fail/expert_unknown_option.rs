use tessel::prelude::*;

#[expert_kernel(num_experts = 4, capacity = 1.5)]
fn ffn(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
