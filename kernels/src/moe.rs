//! The mixture-of-experts layer, written with `#[expert_kernel]`.

use tessel::prelude::*;
use tessel::tensor::trace_error;

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
    if let Some(m) = weights_problem(&x.spec(), &w1.spec(), &w2.spec()) {
        return trace_error("moe", &[x, w1, w2], m);
    }
    crate::activation::gelu(x.matmul(w1), true).matmul(w2)
}

/// What is wrong with the stacked weights for the experts' inputs
/// `[E, C, d]`: `w1` must be `[E, d, ff]` and `w2` `[E, ff, d]`, both in the
/// inputs' dtype.
fn weights_problem(x: &TensorSpec, w1: &TensorSpec, w2: &TensorSpec) -> Option<String> {
    // The layer has checked the tokens: the inputs are [E, C, d].
    let [e, _, d] = x.shape[..] else {
        return None;
    };
    let fits = match (&w1.shape[..], &w2.shape[..]) {
        (&[e1, d1, ff], &[e2, ff2, d2]) => (e1, d1, e2, ff2, d2) == (e, d, e, ff, d),
        _ => false,
    };
    if !fits {
        return Some(format!(
            "the stacked weights must be w1 [E, d, ff] = [{e}, {d}, ff] and w2 [E, ff, d] = [{e}, ff, {d}], \
             got {w1} and {w2}"
        ));
    }
    (w1.dtype != x.dtype || w2.dtype != x.dtype).then(|| {
        format!(
            "the weights must have the tokens' dtype {}, got {w1} and {w2}",
            x.dtype
        )
    })
}
