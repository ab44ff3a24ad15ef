//! The mixture-of-experts layer, written with `#[expert_kernel]`.

use tessel::prelude::*;

/// One expert: a GELU (tanh form) feed-forward block `gelu(x · w1) · w2`.
///
/// The attribute makes `moe::run(&dev, tokens, router, w1, w2)` the routed
/// layer over 8 experts, top-2, capacity factor 1.25: tokens `[T, d]`,
/// router `[d, 8]`, stacked `w1` `[8, d, ff]` and `w2` `[8, ff, d]`; it
/// returns the output `[T, d]`, the load-balancing loss, the router z-loss
/// and the number of dropped assignments. `moe_moe` is that layer as a
/// function to call inside other kernels, `moe_moe_dense` its dense
/// dispatch reference.
#[expert_kernel(num_experts = 8, top_k = 2, capacity_factor = 1.25)]
pub fn moe(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    crate::activation::gelu(x.matmul(w1), true).matmul(w2)
}
