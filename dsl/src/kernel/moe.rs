//! Mixture-of-experts routing: what `#[expert_kernel]` builds around one
//! expert's computation.
//!
//! A softmax router picks the `top_k` experts of each token (gates optionally
//! renormalized over the chosen experts). Assignments are ranked first by
//! choice (every token's first choice before any second choice) then by
//! token, and each expert accepts at most `capacity = ceil(capacity_factor ·
//! T · top_k / E)` of them; the rest are dropped (and counted). The grouped
//! form sorts the kept assignments by expert into one `[E, C, d]` buffer,
//! runs the expert computation once over all experts (megablox style: no
//! dense `T × E × C` dispatch tensor) and scatters the gated results back.
//! The dense-dispatch form builds the one-hot `T × E × C` dispatch and
//! combine tensors and uses them in two contractions; it is the reference.

use crate::dtype::DType;
use crate::ir::{DotDims, ScatterCombine};
use crate::ops::TakeMode;
use crate::shape::TensorSpec;
use crate::trace::tensor::{trace_error, Tensor};

/// Routing options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeOptions {
    /// Number of experts.
    pub num_experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Capacity per expert, as a multiple of the even share `T · top_k / E`.
    pub capacity_factor: f64,
    /// Renormalize the chosen gates to sum to 1 per token.
    pub renormalize: bool,
}

impl MoeOptions {
    /// Slots per expert for `tokens` tokens.
    pub fn capacity(&self, tokens: usize) -> usize {
        let share = (tokens * self.top_k) as f64 / self.num_experts.max(1) as f64;
        ((self.capacity_factor * share).ceil() as usize).max(1)
    }
}

/// What a routed layer returns.
#[derive(Clone, Copy, Debug)]
pub struct MoeOutput {
    /// The combined output, `[T, d_out]`.
    pub output: Tensor,
    /// The load-balancing loss `E · Σ_e f_e · P_e` (f32 scalar).
    pub aux_loss: Tensor,
    /// The router z-loss `mean(logsumexp(logits)²)` (f32 scalar).
    pub z_loss: Tensor,
    /// How many (token, expert) assignments were dropped for capacity (s32 scalar).
    pub dropped: Tensor,
}

/// The routing decisions, in expert-sorted order.
struct Routing {
    /// Expert of each sorted assignment, s32 `[A]`.
    expert: Tensor,
    /// Token of each sorted assignment, s32 `[A]`.
    token: Tensor,
    /// Gate of each sorted assignment, f32 `[A]`.
    gate: Tensor,
    /// Position within its expert's slots, s32 `[A]`.
    pos: Tensor,
    /// Whether it fits the capacity, pred `[A]`.
    kept: Tensor,
    capacity: usize,
    aux_loss: Tensor,
    z_loss: Tensor,
    dropped: Tensor,
}

#[track_caller]
fn route(tokens: Tensor, router: Tensor, o: &MoeOptions) -> Routing {
    let (t, e, k) = (tokens.dim(0), o.num_experts, o.top_k);
    let logits =
        tokens
            .cast(DType::F32)
            .matmul_with(router.cast(DType::F32), None, Some(DType::F32));
    let probs = logits.softmax(-1);
    let (mut gate, idx) = probs.top_k(k);
    if o.renormalize {
        gate = gate / gate.sum_keepdims(&[-1]);
    }
    // Assignment a = choice · T + token: first choices rank first.
    let a = t * k;
    let expert_of = idx.t().reshape(&[a as isize]);
    let gate_of = gate.t().reshape(&[a as isize]);
    let token_of = Tensor::iota([k, t], 1, DType::S32).reshape(&[a as isize]);
    // Stable sort by expert keeps the ranking inside each expert.
    let order = expert_of.argsort(0, false);
    let expert = expert_of.take_with(order, 0, TakeMode::PromiseInBounds);
    let token = token_of.take_with(order, 0, TakeMode::PromiseInBounds);
    let gate = gate_of.take_with(order, 0, TakeMode::PromiseInBounds);
    let one_hot = expert_of
        .expand_dims(1)
        .eq(Tensor::iota([a, e], 1, DType::S32));
    let counts = one_hot.cast(DType::S32).sum(&[0]);
    // start[e] = Σ_{e' < e} counts[e'].
    let before = Tensor::iota([e, e], 1, DType::S32).lt(Tensor::iota([e, e], 0, DType::S32));
    let start = (before.cast(DType::S32) * counts.expand_dims(0)).sum(&[1]);
    let pos =
        Tensor::iota([a], 0, DType::S32) - start.take_with(expert, 0, TakeMode::PromiseInBounds);
    let capacity = o.capacity(t);
    let kept = pos.lt(capacity as i32);
    let dropped = kept.logical_not().cast(DType::S32).sum(&[0]);
    let mean_prob = probs.mean(&[0]);
    let share = counts.cast(DType::F32) / (a as f32);
    let aux_loss = (mean_prob * share).sum(&[0]) * e as f32;
    let z = logits.logsumexp(-1);
    let z_loss = (z * z).mean(&[0]);
    Routing {
        expert,
        token,
        gate,
        pos,
        kept,
        capacity,
        aux_loss,
        z_loss,
        dropped,
    }
}

/// What is wrong with a routed layer's tokens `[T, d]`, router `[d, E]`
/// and options, found before any op is built.
fn layer_problem(tokens: &TensorSpec, router: &TensorSpec, o: &MoeOptions) -> Option<String> {
    let e = o.num_experts;
    if e == 0 || o.top_k == 0 || o.top_k > e {
        return Some(format!(
            "needs 1 <= top_k <= num_experts, got top_k = {} and num_experts = {e}",
            o.top_k
        ));
    }
    if !(o.capacity_factor.is_finite() && o.capacity_factor > 0.0) {
        return Some(format!(
            "the capacity factor must be positive, got {}",
            o.capacity_factor
        ));
    }
    let [_, d] = tokens.shape[..] else {
        return Some(format!("the tokens must be a matrix [T, d], got {tokens}"));
    };
    if !tokens.dtype.is_float() || !router.dtype.is_float() {
        return Some(format!(
            "the tokens and the router must be float tensors, got {tokens} and {router}"
        ));
    }
    (router.shape != [d, e]).then(|| {
        format!(
            "the router must be [d, num_experts] = [{d}, {e}] for tokens {tokens}, got {router}"
        )
    })
}

/// The layer's results, all one poisoned tensor.
fn poisoned(bad: Tensor) -> MoeOutput {
    MoeOutput {
        output: bad,
        aux_loss: bad,
        z_loss: bad,
        dropped: bad,
    }
}

/// Whether `ye` is what the expert must return for inputs `[e, c, d]`:
/// `[e, c, d_out]`.
fn expert_output_problem(ye: &TensorSpec, e: usize, c: usize) -> Option<String> {
    match ye.shape[..] {
        [e2, c2, _] if (e2, c2) == (e, c) => None,
        _ => Some(format!(
            "the expert must map its inputs [E, C, d] = [{e}, {c}, ..] to [E, C, d_out], got {ye}"
        )),
    }
}

/// The grouped (megablox-style) routed layer: `expert` maps the expert
/// inputs `[E, C, d]` to outputs `[E, C, d_out]` in one computation.
#[track_caller]
pub fn grouped_layer(
    tokens: Tensor,
    router: Tensor,
    o: &MoeOptions,
    expert: impl FnOnce(Tensor) -> Tensor,
) -> MoeOutput {
    if let Some(m) = layer_problem(&tokens.spec(), &router.spec(), o) {
        return poisoned(trace_error("expert_kernel", &[tokens, router], m));
    }
    let (t, d, e) = (tokens.dim(0), tokens.dim(1), o.num_experts);
    let r = route(tokens, router, o);
    let c = r.capacity;
    // Kept assignments go to slot expert · C + pos; dropped ones past the end (skipped by scatter).
    let slot = r.kept.select(r.expert * c as i32 + r.pos, (e * c) as i32);
    let rows = tokens.take_with(r.token, 0, TakeMode::PromiseInBounds);
    let buffer =
        Tensor::zeros([e * c, d], tokens.dtype()).index_update(0, slot, rows, ScatterCombine::Set);
    let ye = expert(buffer.reshape(&[e as isize, c as isize, d as isize]));
    if let Some(m) = expert_output_problem(&ye.spec(), e, c) {
        return poisoned(trace_error("expert_kernel", &[ye], m));
    }
    let d_out = ye.dim(-1);
    let flat = ye.reshape(&[(e * c) as isize, d_out as isize]);
    let weight = r.kept.select(r.gate, 0.0).cast(ye.dtype());
    let picked = flat.take_with(
        slot.minimum((e * c - 1) as i32),
        0,
        TakeMode::PromiseInBounds,
    ) * weight.expand_dims(1);
    let output =
        Tensor::zeros([t, d_out], ye.dtype()).index_update(0, r.token, picked, ScatterCombine::Add);
    MoeOutput {
        output,
        aux_loss: r.aux_loss,
        z_loss: r.z_loss,
        dropped: r.dropped,
    }
}

/// The dense-dispatch (einsum) routed layer with the same routing: one-hot
/// dispatch and gated combine tensors `[T, E, C]`, contracted with the tokens
/// and with the expert outputs. The reference for [`grouped_layer`].
#[track_caller]
pub fn dense_dispatch_layer(
    tokens: Tensor,
    router: Tensor,
    o: &MoeOptions,
    expert: impl FnOnce(Tensor) -> Tensor,
) -> MoeOutput {
    if let Some(m) = layer_problem(&tokens.spec(), &router.spec(), o) {
        return poisoned(trace_error("expert_kernel", &[tokens, router], m));
    }
    let (t, e) = (tokens.dim(0), o.num_experts);
    let r = route(tokens, router, o);
    let c = r.capacity;
    let cell = r.token * (e * c) as i32 + r.expert * c as i32 + r.pos;
    let cell = r.kept.select(cell, (t * e * c) as i32);
    let n = r.expert.dim(0);
    let dispatch = Tensor::zeros([t * e * c], tokens.dtype())
        .index_update(
            0,
            cell,
            Tensor::ones([n], tokens.dtype()),
            ScatterCombine::Set,
        )
        .reshape(&[t as isize, e as isize, c as isize]);
    let combine = Tensor::zeros([t * e * c], DType::F32)
        .index_update(0, cell, r.gate, ScatterCombine::Set)
        .reshape(&[t as isize, e as isize, c as isize]);
    // einsum("tec,td->ecd")
    let dims_in = DotDims {
        lhs_batch: vec![],
        rhs_batch: vec![],
        lhs_contract: vec![0],
        rhs_contract: vec![0],
    };
    let expert_in = dispatch.dot_general(tokens, dims_in, None, None);
    let ye = expert(expert_in);
    if let Some(m) = expert_output_problem(&ye.spec(), e, c) {
        return poisoned(trace_error("expert_kernel", &[ye], m));
    }
    // einsum("tec,ecd->td")
    let dims_out = DotDims {
        lhs_batch: vec![],
        rhs_batch: vec![],
        lhs_contract: vec![1, 2],
        rhs_contract: vec![0, 1],
    };
    let output = combine
        .cast(ye.dtype())
        .dot_general(ye, dims_out, None, None);
    MoeOutput {
        output,
        aux_loss: r.aux_loss,
        z_loss: r.z_loss,
        dropped: r.dropped,
    }
}
