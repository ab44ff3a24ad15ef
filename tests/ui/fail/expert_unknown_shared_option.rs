use tessel::prelude::*;

#[expert_kernel(num_experts = 4, precison = "high")]
fn ffn(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w)
}

fn main() {}
