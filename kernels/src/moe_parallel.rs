//! Expert parallelism for per-device (`shard_map`) kernels: the routed MoE
//! layer with its experts split over a mesh axis.
//!
//! Each device routes its own tokens (softmax router, top-k, gates
//! renormalized over the chosen experts, as the one-device layer of
//! [`moe`](crate::moe) does), packs each assignment into the slot buffer of
//! its expert, sends the buffers to the experts' devices with one
//! `all_to_all`, runs its own experts on everything that arrived, and sends
//! the results back with a second `all_to_all`; the losses are combined
//! with `psum`. Each device reserves one slot per local assignment for every
//! expert, so no assignment is ever dropped: the output and the losses equal
//! the one-device layer's when that layer drops nothing either (a capacity
//! factor of at least `E / top_k`).

use tessel::prelude::*;

use crate::activation::gelu;

/// What [`expert_parallel_layer`] returns on each device.
#[derive(Clone, Copy, Debug)]
pub struct ExpertParallelOutput {
    /// This device's tokens' output, `[T_local, d]`.
    pub output: Tensor,
    /// The load-balancing loss over all tokens, `E · Σ_e mean_prob_e ·
    /// share_e` (f32 scalar, the same on every device).
    pub aux_loss: Tensor,
    /// The router z-loss over all tokens, `mean(logsumexp(logits)²)`.
    pub z_loss: Tensor,
}

/// How the layer is spread: over the mesh axis `axis` of `devices`
/// devices, `tokens` tokens in all, each routed to `top_k` experts.
#[derive(Clone, Copy, Debug)]
pub struct ExpertParallel<'a> {
    /// The mesh axis the experts and the tokens are split over.
    pub axis: &'a str,
    /// The devices along `axis`.
    pub devices: usize,
    /// Experts per token.
    pub top_k: usize,
    /// The token count over all devices.
    pub tokens: usize,
}

/// The routed layer with GELU (tanh form) experts `gelu(x · w1) · w2`,
/// spread as `p` says: `x` is this device's tokens `[T_local, d]`, `router`
/// `[d, E]` (replicated), `w1` `[E / devices, d, ff]` and `w2`
/// `[E / devices, ff, d]` this device's experts (expert `e` lives on device
/// `e / (E / devices)`).
///
/// ```
/// # extern crate tessel_dsl as tessel;
/// use tessel_dsl::prelude::*;
/// use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};
/// use tessel_kernels::moe_parallel::{expert_parallel_layer, ExpertParallel};
///
/// #[cpu_kernel]
/// fn layer(x: Tensor, router: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
///     let p = ExpertParallel { axis: "expert", devices: 2, top_k: 2, tokens: 8 };
///     expert_parallel_layer(x, router, w1, w2, &p).output
/// }
///
/// let dev = Device::cpu_with_devices(2)?;
/// let mesh = Mesh::new(&dev, &[("expert", 2)])?;
/// let split = |rank: usize| {
///     let mut axes = vec![None; rank];
///     axes[0] = Some("expert");
///     PartitionSpec::new(axes)
/// };
/// let shardings = Shardings::new(
///     [split(2), PartitionSpec::replicated(), split(3), split(3)],
///     [split(2)],
/// );
/// let f = |shape: [usize; 2]| HostTensor::from_fn(TensorSpec::new(shape, F32), |i| (i % 5) as f64 * 0.1);
/// let g = |shape: [usize; 3]| HostTensor::from_fn(TensorSpec::new(shape, F32), |i| (i % 7) as f64 * 0.01);
/// let (x, router) = (f([8, 4]), f([4, 4]));
/// let y = layer::run_shard_map(&mesh, &shardings, &x, &router, &g([4, 4, 6]), &g([4, 6, 4]))?;
/// assert_eq!(y.spec().shape, vec![8, 4]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn expert_parallel_layer(
    x: Tensor,
    router: Tensor,
    w1: Tensor,
    w2: Tensor,
    p: &ExpertParallel<'_>,
) -> ExpertParallelOutput {
    let (axis, devices, tokens) = (p.axis, p.devices, p.tokens);
    let (t, dm, local) = (x.dim(0), x.dim(1), w1.dim(0));
    let (e, k) = (local * devices, p.top_k);
    let logits = x.matmul(router);
    let probs = logits.softmax(-1);
    let (gate, idx) = probs.top_k(k);
    let gate = gate / gate.sum_keepdims(&[-1]);
    // Assignments, first choices first; each one's slot among this device's
    // assignments to the same expert.
    let a = t * k;
    let expert = idx.t().reshape(&[a as isize]);
    let gate_a = gate.t().reshape(&[a as isize]);
    let token = Tensor::iota([k, t], 1, S32).reshape(&[a as isize]);
    let same = expert.expand_dims(1).eq(expert.expand_dims(0));
    let before = Tensor::iota([a, a], 1, S32).lt(Tensor::iota([a, a], 0, S32));
    let pos = (same & before).cast(S32).sum(&[1]);
    // Send buffer [devices, local experts, slots, d]: slot `pos` of expert
    // `expert` holds the assignment's token (a one-hot dispatch product).
    let slot = expert * a as i32 + pos;
    let dispatch = Tensor::iota([e * a, a], 0, S32)
        .eq(slot.expand_dims(0))
        .cast(x.dtype());
    let send = dispatch
        .matmul(x.take_with(token, 0, TakeMode::PromiseInBounds))
        .reshape(&[devices as isize, local as isize, a as isize, dm as isize]);
    let arrived = send.all_to_all(&[axis], 0, 0);
    // This device's experts over everything that arrived.
    let per_expert = arrived.transpose(&[1, 0, 2, 3]).reshape(&[
        local as isize,
        (devices * a) as isize,
        dm as isize,
    ]);
    let y = gelu(per_expert.matmul(w1), true).matmul(w2);
    let back = y
        .reshape(&[local as isize, devices as isize, a as isize, dm as isize])
        .transpose(&[1, 0, 2, 3])
        .all_to_all(&[axis], 0, 0)
        .reshape(&[(e * a) as isize, dm as isize]);
    // Each assignment's result, gated, summed into its token.
    let y_a = dispatch.t().matmul(back) * gate_a.expand_dims(1).cast(x.dtype());
    let combine = Tensor::iota([t, a], 0, S32)
        .eq(token.expand_dims(0))
        .cast(x.dtype());
    let output = combine.matmul(y_a);
    let mean_prob = probs.sum(&[0]).psum(&[axis]) / tokens as f64;
    let one_hot = expert.expand_dims(1).eq(Tensor::iota([a, e], 1, S32));
    let counts = one_hot.cast(F32).sum(&[0]).psum(&[axis]);
    let share = counts / (tokens * k) as f64;
    let aux_loss = (mean_prob * share).sum(&[0]) * e as f64;
    let z = logits.logsumexp(-1);
    let z_loss = (z * z).sum(&[0]).psum(&[axis]) / tokens as f64;
    ExpertParallelOutput {
        output,
        aux_loss,
        z_loss,
    }
}
