//! Backward kernels: each takes its forward kernel's arguments plus the
//! output cotangent `dout` and returns one cotangent per floating-point
//! input, in argument order. Each is the pullback of the forward (whose
//! own backward is used where it has one: the normalizations' fused
//! passes), so it agrees with `tessel::autodiff::vjp` of the forward.
//!
//! | kernel | returns |
//! |---|---|
//! | [`layer_norm_vjp`](fn@layer_norm_vjp)`(x, scale, bias, dout, eps)` | `(dx, dscale, dbias)` |
//! | [`rms_norm_vjp`](fn@rms_norm_vjp)`(x, scale, dout, eps)` | `(dx, dscale)` |
//! | [`rope_vjp`](fn@rope_vjp)`(x, cos, sin, dout, offset, layout)` | `dx` (the rotation by −θ) |
//! | [`gemm_vjp`](fn@gemm_vjp)`(a, b, dout, opts)` | `(da, db)` |
//! | [`swiglu_vjp`](fn@swiglu_vjp)`(gate, up, dout)` | `(dgate, dup)` |
//! | [`softmax_vjp`](fn@softmax_vjp)`(x, dout, axis)` | `dx` |
//! | [`gelu_vjp`](fn@gelu_vjp)`(x, dout, approximate)`, [`silu_vjp`](fn@silu_vjp)`(x, dout)` | `dx` |
//! | [`fused_gelu_dropout_vjp`](fn@fused_gelu_dropout_vjp)`(x, dout, training, rate, seed, approximate)` | `dx` (the same mask from the same seed) |
//! | [`flash_attention_vjp`](fn@flash_attention_vjp)`(q, k, v, dout, opts)` | `(dq, dk, dv)` |
//! | [`flash_attention_lse_vjp`](fn@flash_attention_lse_vjp)`(q, k, v, dout, dlse, opts)` | `(dq, dk, dv)` |
//! | [`quantized_matmul_vjp`](fn@quantized_matmul_vjp)`(x, w_q, w_scales, dout, block_k)` | `dx` (the quantized weights get none) |
//! | [`softmax_cross_entropy_vjp`](fn@softmax_cross_entropy_vjp)`(logits, labels, dout)` | `dlogits` |
//! | [`moe_vjp`](fn@moe_vjp)`(x, router, w1, w2, dout)` | `(dx, drouter, dw1, dw2)` |
//! | [`block_sparse_attention_vjp`](fn@block_sparse_attention_vjp)`(q, k, v, dout, mask, opts)` | `(dq, dk, dv)` |
//!
//! A `dout` whose type differs from the forward's output is a kernel error.

use tessel::autodiff::vjp;
use tessel::prelude::*;

use crate::activation::{fused_gelu_dropout, gelu, silu, swiglu};
use crate::attention::{
    block_sparse_attention_with, flash_attention_with, AttentionExtras, AttentionMask, FlashOptions,
};
use crate::gemm::{gemm, GemmOptions};
use crate::norm::{layer_norm, rms_norm};
use crate::quantized::quantized_matmul;
use crate::rope::{rope, RopeLayout};
use crate::softmax::softmax;
use crate::train::cross_entropy;

/// The cotangents of [`layer_norm`](fn@layer_norm)'s `x`, `scale` and `bias`.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::grads::layer_norm_vjp;
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
/// let ones = HostTensor::from_vec(vec![1.0f32; 2], [2])?;
/// let zeros = HostTensor::from_vec(vec![0.0f32; 2], [2])?;
/// let dout = HostTensor::from_vec(vec![1.0f32; 4], [2, 2])?;
/// let (dx, dscale, dbias) = layer_norm_vjp::run(&dev, &x, &ones, &zeros, &dout, 1e-5)?;
/// assert_eq!(dbias.to_vec::<f32>()?, vec![2.0, 2.0]); // the column sums of dout
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn layer_norm_vjp(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    dout: Tensor,
    eps: f64,
) -> (Tensor, Tensor, Tensor) {
    let (_, pb) = vjp(
        |(x, s, b): (Tensor, Tensor, Tensor)| layer_norm(x, s, b, eps),
        (x, scale, bias),
    );
    pb.call_as("layer_norm_vjp", dout)
}

/// The cotangents of [`rms_norm`](fn@rms_norm)'s `x` and `scale`.
#[tpu_kernel]
#[track_caller]
pub fn rms_norm_vjp(x: Tensor, scale: Tensor, dout: Tensor, eps: f64) -> (Tensor, Tensor) {
    let (_, pb) = vjp(|(x, s): (Tensor, Tensor)| rms_norm(x, s, eps), (x, scale));
    pb.call_as("rms_norm_vjp", dout)
}

/// The cotangent of [`rope`](fn@rope)'s `x`: `dout` rotated by −θ.
#[tpu_kernel]
#[track_caller]
pub fn rope_vjp(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    dout: Tensor,
    offset: usize,
    layout: RopeLayout,
) -> Tensor {
    let (_, pb) = vjp(|x: Tensor| rope(x, cos, sin, offset, layout), x);
    pb.call_as("rope_vjp", dout)
}

/// The cotangents of [`gemm`](fn@gemm)'s `a` and `b`.
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn gemm_vjp(a: Tensor, b: Tensor, dout: Tensor, opts: GemmOptions) -> (Tensor, Tensor) {
    let (_, pb) = vjp(|(a, b): (Tensor, Tensor)| gemm(a, b, opts), (a, b));
    pb.call_as("gemm_vjp", dout)
}

/// The cotangents of [`swiglu`](fn@swiglu)'s `gate` and `up`.
#[tpu_kernel]
#[track_caller]
pub fn swiglu_vjp(gate: Tensor, up: Tensor, dout: Tensor) -> (Tensor, Tensor) {
    let (_, pb) = vjp(|(g, u): (Tensor, Tensor)| swiglu(g, u), (gate, up));
    pb.call_as("swiglu_vjp", dout)
}

/// The cotangent of [`softmax`](fn@softmax)'s `x`.
#[tpu_kernel]
#[track_caller]
pub fn softmax_vjp(x: Tensor, dout: Tensor, axis: isize) -> Tensor {
    let (_, pb) = vjp(|x: Tensor| softmax(x, axis), x);
    pb.call_as("softmax_vjp", dout)
}

/// The cotangent of [`gelu`](fn@gelu)'s `x`.
#[tpu_kernel]
#[track_caller]
pub fn gelu_vjp(x: Tensor, dout: Tensor, approximate: bool) -> Tensor {
    let (_, pb) = vjp(|x: Tensor| gelu(x, approximate), x);
    pb.call_as("gelu_vjp", dout)
}

/// The cotangent of [`silu`](fn@silu)'s `x`.
#[tpu_kernel]
#[track_caller]
pub fn silu_vjp(x: Tensor, dout: Tensor) -> Tensor {
    let (_, pb) = vjp(silu, x);
    pb.call_as("silu_vjp", dout)
}

/// The cotangents `(dq, dk, dv)` of [`flash_attention`](fn@crate::attention::flash_attention)
/// for the output cotangent `dout`: the FlashAttention-2 backward
/// (probabilities recomputed per block from the logsumexp, the blocks the
/// forward skips skipped).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::FlashOptions;
/// use tessel::kernels::grads::flash_attention_vjp;
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![0.5f32; 2 * 16 * 8], [1, 2, 16, 8])?;
/// let opts = FlashOptions::new().causal(true).block_sizes(8, 8);
/// let (dq, dk, dv) = flash_attention_vjp::run(&dev, &x, &x, &x, &x, opts)?;
/// assert_eq!(dq.shape(), &[1, 2, 16, 8]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn flash_attention_vjp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    opts: FlashOptions,
) -> (Tensor, Tensor, Tensor) {
    let x = AttentionExtras::default();
    let (_, pb) = vjp(
        |(q, k, v): (Tensor, Tensor, Tensor)| flash_attention_with(q, k, v, &x, opts).0,
        (q, k, v),
    );
    pb.call_as("flash_attention_vjp", dout)
}

/// The cotangents `(dq, dk, dv)` of
/// [`flash_attention_lse`](fn@crate::attention::flash_attention_lse) for the
/// cotangents of its output (`dout`) and of its logsumexp (`dlse`, f32
/// `[B, Hq, Sq]`).
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn flash_attention_lse_vjp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    dlse: Tensor,
    opts: FlashOptions,
) -> (Tensor, Tensor, Tensor) {
    let x = AttentionExtras::default();
    let (_, pb) = vjp(
        |(q, k, v): (Tensor, Tensor, Tensor)| flash_attention_with(q, k, v, &x, opts),
        (q, k, v),
    );
    pb.call_as("flash_attention_lse_vjp", (dout, dlse))
}

/// The cotangents `(dq, dk, dv)` of
/// [`block_sparse_attention`](fn@crate::attention::block_sparse_attention)
/// for `dout`: the same backward, over the blocks the mask keeps.
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn block_sparse_attention_vjp(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dout: Tensor,
    mask: AttentionMask,
    opts: FlashOptions,
) -> (Tensor, Tensor, Tensor) {
    let x = AttentionExtras::default();
    let (_, pb) = vjp(
        |(q, k, v): (Tensor, Tensor, Tensor)| {
            block_sparse_attention_with(q, k, v, &mask, &x, opts).0
        },
        (q, k, v),
    );
    pb.call_as("block_sparse_attention_vjp", dout)
}

/// The cotangents `(dx, drouter, dw1, dw2)` of the library's MoE layer
/// ([`moe`](fn@crate::moe::moe): 8 experts, top-2) for the cotangent `dout`
/// of its output (the auxiliary losses' cotangents zero). The grouped
/// backward: token gradients go back through the combine (a gather's
/// transpose, a scatter-add) and the dispatch (a scatter's transpose, a
/// gather); the expert weights' gradients are batched matmuls over the same
/// `[E, C, d]` buffer the forward built; the router's flows through the
/// gates.
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn moe_vjp(
    x: Tensor,
    router: Tensor,
    w1: Tensor,
    w2: Tensor,
    dout: Tensor,
) -> (Tensor, Tensor, Tensor, Tensor) {
    let (_, pb) = vjp(
        |(x, r, w1, w2): (Tensor, Tensor, Tensor, Tensor)| crate::moe::moe_moe(x, r, w1, w2).0,
        (x, router, w1, w2),
    );
    pb.call_as("moe_vjp", dout)
}

/// The cotangent of [`fused_gelu_dropout`](fn@fused_gelu_dropout)'s `x`:
/// `dout · gelu'(x)` on the elements the seed keeps, scaled by
/// `1 / (1 − rate)`, and 0 on the dropped ones (the mask is recomputed from
/// the seed, not stored).
#[tpu_kernel]
#[track_caller]
pub fn fused_gelu_dropout_vjp(
    x: Tensor,
    dout: Tensor,
    training: bool,
    rate: f64,
    seed: Tensor,
    approximate: bool,
) -> Tensor {
    let (_, pb) = vjp(
        |x: Tensor| fused_gelu_dropout(x, training, rate, seed, approximate),
        x,
    );
    pb.call_as("fused_gelu_dropout_vjp", dout)
}

/// The cotangent of [`quantized_matmul`](fn@quantized_matmul)'s input `x`:
/// `dout · dequantize(w_q, w_scales)ᵀ`, in `x`'s dtype (quantized weights
/// are frozen: integer and fp8 weights get no gradient, and none flows
/// through their scales).
#[tpu_kernel]
#[track_caller]
pub fn quantized_matmul_vjp(
    x: Tensor,
    w_q: Tensor,
    w_scales: Tensor,
    dout: Tensor,
    block_k: Option<usize>,
) -> Tensor {
    let (_, pb) = vjp(|x: Tensor| quantized_matmul(x, w_q, w_scales, block_k), x);
    pb.call_as("quantized_matmul_vjp", dout)
}

/// The cotangent of [`softmax_cross_entropy`](fn@crate::train::softmax_cross_entropy)'s
/// logits for the loss cotangent `dout` (a scalar): `(softmax − onehot) ·
/// dout / N`, from the fused backward (rows with an out-of-range label get
/// none).
#[tpu_kernel(precision = "highest")]
#[track_caller]
pub fn softmax_cross_entropy_vjp(logits: Tensor, labels: Tensor, dout: Tensor) -> Tensor {
    let (_, pb) = vjp(|l: Tensor| cross_entropy(l, labels), logits);
    pb.call_as("softmax_cross_entropy_vjp", dout)
}
