//! The backward kernels: the forward's arguments and options plus the
//! output cotangent `dout`; one cotangent per floating-point input, in
//! argument order.

use super::{Entry, Opts};
use tessel::kernels::gemm::GemmOptions;
use tessel::kernels::grads::{
    gelu_vjp, gemm_vjp, layer_norm_vjp, moe_vjp, rms_norm_vjp, rope_vjp, silu_vjp,
    softmax_cross_entropy_vjp, softmax_vjp, swiglu_vjp,
};
use tessel::kernels::rope::RopeLayout;
use tessel::kernels::train::softmax_cross_entropy;
use tessel::Result;

fn layout(o: &Opts) -> Result<RopeLayout> {
    super::pointwise::rope_layout(o)
}

fn gemm_opts(o: &Opts) -> Result<GemmOptions> {
    super::matmul::gemm_opts(o)
}

/// The `*_vjp` entries.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: "layer_norm_vjp",
            about: "cotangents (dx, dscale, dbias) of layer_norm for dout",
            args: &["x", "scale", "bias", "dout"],
            options: &[("eps", "1e-5", "added to the variance")],
            run: |d, a, o| {
                let (x, s, b) = layer_norm_vjp::run(d, a[0], a[1], a[2], a[3], o.f64("eps")?)?;
                Ok(vec![x, s, b])
            },
            lower: |s, o| layer_norm_vjp::lower(&s[0], &s[1], &s[2], &s[3], o.f64("eps")?),
        },
        Entry {
            name: "rms_norm_vjp",
            about: "cotangents (dx, dscale) of rms_norm for dout",
            args: &["x", "scale", "dout"],
            options: &[("eps", "1e-6", "added to the mean square")],
            run: |d, a, o| {
                let (x, s) = rms_norm_vjp::run(d, a[0], a[1], a[2], o.f64("eps")?)?;
                Ok(vec![x, s])
            },
            lower: |s, o| rms_norm_vjp::lower(&s[0], &s[1], &s[2], o.f64("eps")?),
        },
        Entry {
            name: "rope_vjp",
            about: "cotangent dx of rope for dout (the rotation by -theta)",
            args: &["x", "cos", "sin", "dout"],
            options: &[
                ("offset", "0", "position of the first row"),
                ("layout", "half_split", "interleaved or half_split"),
            ],
            run: |d, a, o| {
                let off = o.usize_opt("offset")?.unwrap_or(0);
                Ok(vec![rope_vjp::run(
                    d,
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    off,
                    layout(o)?,
                )?])
            },
            lower: |s, o| {
                let off = o.usize_opt("offset")?.unwrap_or(0);
                rope_vjp::lower(&s[0], &s[1], &s[2], &s[3], off, layout(o)?)
            },
        },
        Entry {
            name: "softmax_cross_entropy",
            about: "mean softmax cross-entropy of logits [N, V] against integer labels [N] (out-of-range labels count zero)",
            args: &["logits", "labels"],
            options: &[],
            run: |d, a, _| Ok(vec![softmax_cross_entropy::run(d, a[0], a[1])?]),
            lower: |s, _| softmax_cross_entropy::lower(&s[0], &s[1]),
        },
        Entry {
            name: "softmax_cross_entropy_vjp",
            about: "cotangent dlogits of softmax_cross_entropy for the scalar dout",
            args: &["logits", "labels", "dout"],
            options: &[],
            run: |d, a, _| Ok(vec![softmax_cross_entropy_vjp::run(d, a[0], a[1], a[2])?]),
            lower: |s, _| softmax_cross_entropy_vjp::lower(&s[0], &s[1], &s[2]),
        },
        Entry {
            name: "moe_vjp",
            about: "cotangents (dx, drouter, dw1, dw2) of moe for dout on its output (the grouped backward)",
            args: &["x", "router", "w1", "w2", "dout"],
            options: &[],
            run: |d, a, _| {
                let (x, r, w1, w2) = moe_vjp::run(d, a[0], a[1], a[2], a[3], a[4])?;
                Ok(vec![x, r, w1, w2])
            },
            lower: |s, _| moe_vjp::lower(&s[0], &s[1], &s[2], &s[3], &s[4]),
        },
        Entry {
            name: "gemm_vjp",
            about: "cotangents (da, db) of gemm for dout",
            args: &["a", "b", "dout"],
            options: super::matmul::GEMM_OPTIONS,
            run: |d, a, o| {
                let (x, y) = gemm_vjp::run(d, a[0], a[1], a[2], gemm_opts(o)?)?;
                Ok(vec![x, y])
            },
            lower: |s, o| gemm_vjp::lower(&s[0], &s[1], &s[2], gemm_opts(o)?),
        },
        Entry {
            name: "swiglu_vjp",
            about: "cotangents (dgate, dup) of swiglu for dout",
            args: &["gate", "up", "dout"],
            options: &[],
            run: |d, a, _| {
                let (g, u) = swiglu_vjp::run(d, a[0], a[1], a[2])?;
                Ok(vec![g, u])
            },
            lower: |s, _| swiglu_vjp::lower(&s[0], &s[1], &s[2]),
        },
        Entry {
            name: "softmax_vjp",
            about: "cotangent dx of softmax for dout",
            args: &["x", "dout"],
            options: &[("axis", "-1", "the axis (negative counts from the end)")],
            run: |d, a, o| Ok(vec![softmax_vjp::run(d, a[0], a[1], o.isize("axis")?)?]),
            lower: |s, o| softmax_vjp::lower(&s[0], &s[1], o.isize("axis")?),
        },
        Entry {
            name: "gelu_vjp",
            about: "cotangent dx of gelu for dout",
            args: &["x", "dout"],
            options: &[("approximate", "false", "tanh approximation instead of erf")],
            run: |d, a, o| Ok(vec![gelu_vjp::run(d, a[0], a[1], o.bool("approximate")?)?]),
            lower: |s, o| gelu_vjp::lower(&s[0], &s[1], o.bool("approximate")?),
        },
        Entry {
            name: "silu_vjp",
            about: "cotangent dx of silu for dout",
            args: &["x", "dout"],
            options: &[],
            run: |d, a, _| Ok(vec![silu_vjp::run(d, a[0], a[1])?]),
            lower: |s, _| silu_vjp::lower(&s[0], &s[1]),
        },
    ]
}
