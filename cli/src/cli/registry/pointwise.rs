//! Elementwise and per-row kernels: activations, softmax, normalizations and
//! rotary embeddings.

use super::{bad, Entry, Opts};
use tessel::kernels::activation::{fused_gelu_dropout, gelu, silu, swiglu};
use tessel::kernels::grads::fused_gelu_dropout_vjp;
use tessel::kernels::norm::{
    layer_norm, layer_norm_no_bias, layer_norm_plain, rms_norm, rms_norm_plain,
};
use tessel::kernels::rope::{rope, RopeLayout};
use tessel::kernels::softmax::{log_softmax, softmax};
use tessel::{HostTensor, Result};

pub(super) fn rope_layout(o: &Opts) -> Result<RopeLayout> {
    match o.get("layout") {
        "interleaved" => Ok(RopeLayout::Interleaved),
        "half_split" => Ok(RopeLayout::HalfSplit),
        v => Err(bad(
            "layout",
            format!("takes interleaved or half_split, got `{v}`"),
        )),
    }
}

/// The dropout seed of option `seed`, as the u32 scalar the kernel takes.
fn seed(o: &Opts) -> Result<HostTensor> {
    Ok(HostTensor::scalar(o.u32("seed")?))
}

/// The options of `fused_gelu_dropout` and its backward.
const GELU_DROPOUT_OPTIONS: &[(&str, &str, &str)] = &[
    ("training", "true", "apply dropout; false gives plain GELU"),
    (
        "rate",
        "0.1",
        "probability of zeroing an element, in [0, 1)",
    ),
    ("seed", "0", "the dropout seed (u32)"),
    ("approximate", "false", "use the tanh approximation of GELU"),
];

const LAYER_NORM_EPS: (&str, &str, &str) = ("eps", "1e-5", "added to the variance");
const RMS_NORM_EPS: (&str, &str, &str) = ("eps", "1e-6", "added to the mean square");

/// The elementwise and per-row kernels.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: "rope",
            about: "rotary position embeddings on [.., S, D] with cos/sin tables [max_len, D/2]",
            args: &["x", "cos", "sin"],
            options: &[
                ("offset", "0", "position of the first row"),
                ("layout", "half_split", "interleaved or half_split"),
            ],
            run: |d, a, o| {
                let off = o.usize_opt("offset")?.unwrap_or(0);
                Ok(vec![rope::run(d, a[0], a[1], a[2], off, rope_layout(o)?)?])
            },
            lower: |s, o| rope::lower(&s[0], &s[1], &s[2], o.usize_opt("offset")?.unwrap_or(0), rope_layout(o)?),
        },
        Entry {
            name: "softmax",
            about: "numerically stable softmax along an axis",
            args: &["x"],
            options: &[("axis", "-1", "the axis (negative counts from the end)")],
            run: |d, a, o| Ok(vec![softmax::run(d, a[0], o.isize("axis")?)?]),
            lower: |s, o| softmax::lower(&s[0], o.isize("axis")?),
        },
        Entry {
            name: "log_softmax",
            about: "numerically stable log-softmax along an axis",
            args: &["x"],
            options: &[("axis", "-1", "the axis (negative counts from the end)")],
            run: |d, a, o| Ok(vec![log_softmax::run(d, a[0], o.isize("axis")?)?]),
            lower: |s, o| log_softmax::lower(&s[0], o.isize("axis")?),
        },
        Entry {
            name: "gelu",
            about: "GELU, erf form or tanh approximation",
            args: &["x"],
            options: &[("approximate", "false", "use the tanh approximation")],
            run: |d, a, o| Ok(vec![gelu::run(d, a[0], o.bool("approximate")?)?]),
            lower: |s, o| gelu::lower(&s[0], o.bool("approximate")?),
        },
        Entry {
            name: "fused_gelu_dropout",
            about: "GELU then inverted dropout in one fusion (the mask a function of the seed and each element's index)",
            args: &["x"],
            options: GELU_DROPOUT_OPTIONS,
            run: |d, a, o| {
                let y = fused_gelu_dropout::run(d, a[0], o.bool("training")?, o.f64("rate")?, &seed(o)?, o.bool("approximate")?)?;
                Ok(vec![y])
            },
            lower: |s, o| {
                let seed = seed(o)?;
                fused_gelu_dropout::lower(&s[0], o.bool("training")?, o.f64("rate")?, seed.spec(), o.bool("approximate")?)
            },
        },
        Entry {
            name: "fused_gelu_dropout_vjp",
            about: "cotangent dx of fused_gelu_dropout for dout (the same mask from the same seed)",
            args: &["x", "dout"],
            options: GELU_DROPOUT_OPTIONS,
            run: |d, a, o| {
                let dx = fused_gelu_dropout_vjp::run(d, a[0], a[1], o.bool("training")?, o.f64("rate")?, &seed(o)?, o.bool("approximate")?)?;
                Ok(vec![dx])
            },
            lower: |s, o| {
                let seed = seed(o)?;
                fused_gelu_dropout_vjp::lower(&s[0], &s[1], o.bool("training")?, o.f64("rate")?, seed.spec(), o.bool("approximate")?)
            },
        },
        Entry {
            name: "silu",
            about: "x · sigmoid(x)",
            args: &["x"],
            options: &[],
            run: |d, a, _| Ok(vec![silu::run(d, a[0])?]),
            lower: |s, _| silu::lower(&s[0]),
        },
        Entry {
            name: "swiglu",
            about: "silu(gate) · up for projected inputs",
            args: &["gate", "up"],
            options: &[],
            run: |d, a, _| Ok(vec![swiglu::run(d, a[0], a[1])?]),
            lower: |s, _| swiglu::lower(&s[0], &s[1]),
        },
        Entry {
            name: "layer_norm",
            about: "layer normalization over the last axis with scale and bias [D] (f32 statistics)",
            args: &["x", "scale", "bias"],
            options: &[LAYER_NORM_EPS],
            run: |d, a, o| Ok(vec![layer_norm::run(d, a[0], a[1], a[2], o.f64("eps")?)?]),
            lower: |s, o| layer_norm::lower(&s[0], &s[1], &s[2], o.f64("eps")?),
        },
        Entry {
            name: "layer_norm_no_bias",
            about: "layer normalization over the last axis with scale [D] and no bias",
            args: &["x", "scale"],
            options: &[LAYER_NORM_EPS],
            run: |d, a, o| Ok(vec![layer_norm_no_bias::run(d, a[0], a[1], o.f64("eps")?)?]),
            lower: |s, o| layer_norm_no_bias::lower(&s[0], &s[1], o.f64("eps")?),
        },
        Entry {
            name: "layer_norm_plain",
            about: "layer normalization over the last axis without learned parameters",
            args: &["x"],
            options: &[LAYER_NORM_EPS],
            run: |d, a, o| Ok(vec![layer_norm_plain::run(d, a[0], o.f64("eps")?)?]),
            lower: |s, o| layer_norm_plain::lower(&s[0], o.f64("eps")?),
        },
        Entry {
            name: "rms_norm",
            about: "RMS normalization over the last axis with scale [D] (f32 statistics)",
            args: &["x", "scale"],
            options: &[RMS_NORM_EPS],
            run: |d, a, o| Ok(vec![rms_norm::run(d, a[0], a[1], o.f64("eps")?)?]),
            lower: |s, o| rms_norm::lower(&s[0], &s[1], o.f64("eps")?),
        },
        Entry {
            name: "rms_norm_plain",
            about: "RMS normalization over the last axis without a scale",
            args: &["x"],
            options: &[RMS_NORM_EPS],
            run: |d, a, o| Ok(vec![rms_norm_plain::run(d, a[0], o.f64("eps")?)?]),
            lower: |s, o| rms_norm_plain::lower(&s[0], o.f64("eps")?),
        },
    ]
}
