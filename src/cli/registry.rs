//! The prebuilt kernels the `tessel` command can list, lower and run.

use std::collections::BTreeMap;

use crate::kernels::activation::{gelu, silu, swiglu};
use crate::kernels::attention::{attention_reference, flash_attention, FlashOptions};
use crate::kernels::einsum::einsum;
use crate::kernels::gemm::gemm_bias;
use crate::kernels::gemm::{gemm, Activation, GemmOptions};
use crate::kernels::moe::moe;
use crate::kernels::norm::{layer_norm, rms_norm};
use crate::kernels::quantized::quantized_matmul;
use crate::kernels::rope::{rope, RopeLayout};
use crate::kernels::softmax::log_softmax;
use crate::kernels::softmax::softmax;
use crate::kernels::sparse::block_sparse;
use crate::runtime::Device;
use crate::{DType, Error, HostError, HostTensor, Result, TensorSpec};

/// `--opt key=value` settings, checked against an entry's options.
pub struct Opts(BTreeMap<String, String>);

fn bad(msg: String) -> Error {
    HostError::Other(msg).into()
}

impl Opts {
    /// Checks `given` against `entry`'s options and fills in defaults.
    pub fn new(
        entry: &Entry,
        given: BTreeMap<String, String>,
    ) -> std::result::Result<Opts, String> {
        let mut all: BTreeMap<String, String> = entry
            .options
            .iter()
            .map(|(k, d, _)| (k.to_string(), d.to_string()))
            .collect();
        for (k, v) in given {
            if !all.contains_key(&k) {
                let known: Vec<&str> = entry.options.iter().map(|o| o.0).collect();
                return Err(format!(
                    "kernel {} has no option `{k}`; options: {}",
                    entry.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            }
            all.insert(k, v);
        }
        Ok(Opts(all))
    }

    fn get(&self, k: &str) -> &str {
        self.0.get(k).map(String::as_str).unwrap_or("")
    }

    fn bool(&self, k: &str) -> Result<bool> {
        match self.get(k) {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            v => Err(bad(format!("option {k} takes true or false, got `{v}`"))),
        }
    }

    fn usize_opt(&self, k: &str) -> Result<Option<usize>> {
        match self.get(k) {
            "" | "none" => Ok(None),
            v => v.parse().map(Some).map_err(|_| {
                bad(format!(
                    "option {k} takes a positive integer or none, got `{v}`"
                ))
            }),
        }
    }

    fn f32(&self, k: &str) -> Result<f32> {
        self.get(k)
            .parse()
            .map_err(|_| bad(format!("option {k} takes a number, got `{}`", self.get(k))))
    }

    fn isize(&self, k: &str) -> Result<isize> {
        self.get(k).parse().map_err(|_| {
            bad(format!(
                "option {k} takes an integer, got `{}`",
                self.get(k)
            ))
        })
    }

    /// An option's text with a `'static` lifetime (the command runs once).
    fn leak(&self, k: &str) -> &'static str {
        Box::leak(self.get(k).to_string().into_boxed_str())
    }

    fn dtype_opt(&self, k: &str) -> Result<Option<DType>> {
        match self.get(k) {
            "" | "none" => Ok(None),
            v => DType::parse(v).map(Some).ok_or_else(|| {
                bad(format!(
                    "option {k} takes a dtype (f32, bf16, ...), got `{v}`"
                ))
            }),
        }
    }
}

/// A kernel the command knows: its argument names, options, and how to run and lower it.
pub struct Entry {
    /// The kernel's name on the command line.
    pub name: &'static str,
    /// One line on what it computes.
    pub about: &'static str,
    /// Its tensor arguments, in order.
    pub args: &'static [&'static str],
    /// (option, default, meaning).
    pub options: &'static [(&'static str, &'static str, &'static str)],
    /// Runs it.
    pub run: fn(&Device, &[&HostTensor], &Opts) -> Result<Vec<HostTensor>>,
    /// Lowers it.
    pub lower: fn(&[TensorSpec], &Opts) -> Result<String>,
}

fn gemm_opts(o: &Opts) -> Result<GemmOptions> {
    let activation = match o.get("activation") {
        "none" | "identity" => Activation::Identity,
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "gelu_tanh" => Activation::GeluTanh,
        "silu" => Activation::Silu,
        v => {
            return Err(bad(format!(
                "option activation takes none, relu, gelu, gelu_tanh or silu, got `{v}`"
            )))
        }
    };
    Ok(GemmOptions {
        transpose_a: o.bool("transpose_a")?,
        transpose_b: o.bool("transpose_b")?,
        out_dtype: o.dtype_opt("out_dtype")?,
        precision: None,
        activation,
        block_k: o.usize_opt("block_k")?,
    })
}

fn flash_opts(o: &Opts) -> Result<FlashOptions> {
    let f = FlashOptions::new().causal(o.bool("causal")?);
    let q = o.usize_opt("block_q")?.unwrap_or(f.block_q);
    let k = o.usize_opt("block_kv")?.unwrap_or(f.block_kv);
    Ok(f.block_sizes(q, k))
}

const GEMM_OPTIONS: &[(&str, &str, &str)] = &[
    ("transpose_a", "false", "use aᵀ"),
    ("transpose_b", "false", "use bᵀ"),
    ("activation", "none", "none, relu, gelu, gelu_tanh or silu"),
    ("out_dtype", "none", "result dtype; none keeps the inputs'"),
    (
        "block_k",
        "none",
        "accumulate over K in blocks of this size",
    ),
];

const ATTENTION_OPTIONS: &[(&str, &str, &str)] = &[
    ("causal", "false", "mask keys after each query"),
    (
        "block_q",
        "none",
        "query block size (flash; default the library's)",
    ),
    (
        "block_kv",
        "none",
        "key/value block size (flash; default the library's)",
    ),
];

fn rope_layout(o: &Opts) -> Result<RopeLayout> {
    match o.get("layout") {
        "interleaved" => Ok(RopeLayout::Interleaved),
        "half_split" => Ok(RopeLayout::HalfSplit),
        v => Err(bad(format!(
            "option layout takes interleaved or half_split, got `{v}`"
        ))),
    }
}

fn block_sparse_config(o: &Opts) -> Result<crate::kernel::KernelConfig> {
    let bs = o.usize_opt("block_size")?.unwrap_or(128);
    Ok(block_sparse::CONFIG.with_block_size(Some(bs)))
}

/// Every prebuilt kernel, by name.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: "gemm",
            about: "a · b for [.., M, K] x [.., K, N], f32 accumulation, fused activation",
            args: &["a", "b"],
            options: GEMM_OPTIONS,
            run: |d, a, o| {
                let y = gemm::run(d, a[0], a[1], gemm_opts(o)?)?;
                Ok(vec![y])
            },
            lower: |s, o| gemm::lower(&s[0], &s[1], gemm_opts(o)?),
        },
        Entry {
            name: "flash_attention",
            about: "flash attention: q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D] (GQA when Hq is a multiple of Hkv)",
            args: &["q", "k", "v"],
            options: ATTENTION_OPTIONS,
            run: |d, a, o| Ok(vec![flash_attention::run(d, a[0], a[1], a[2], flash_opts(o)?)?]),
            lower: |s, o| flash_attention::lower(&s[0], &s[1], &s[2], flash_opts(o)?),
        },
        Entry {
            name: "attention_reference",
            about: "whole-tensor softmax(QKᵀ·scale)·V, the reference for flash attention",
            args: &["q", "k", "v"],
            options: ATTENTION_OPTIONS,
            run: |d, a, o| Ok(vec![attention_reference::run(d, a[0], a[1], a[2], flash_opts(o)?)?]),
            lower: |s, o| attention_reference::lower(&s[0], &s[1], &s[2], flash_opts(o)?),
        },
        Entry {
            name: "gemm_bias",
            about: "activation(a · b + bias), fused",
            args: &["a", "b", "bias"],
            options: GEMM_OPTIONS,
            run: |d, a, o| Ok(vec![gemm_bias::run(d, a[0], a[1], a[2], gemm_opts(o)?)?]),
            lower: |s, o| gemm_bias::lower(&s[0], &s[1], &s[2], gemm_opts(o)?),
        },
        Entry {
            name: "quantized_matmul",
            about: "x · dequantize(w_q, w_scales) for int8/fp8 weights, per-channel or per-block (block_k) scales",
            args: &["x", "w_q", "w_scales"],
            options: &[("block_k", "none", "rows of K per scale block (none: per-channel scales)")],
            run: |d, a, o| Ok(vec![quantized_matmul::run(d, a[0], a[1], a[2], o.usize_opt("block_k")?)?]),
            lower: |s, o| quantized_matmul::lower(&s[0], &s[1], &s[2], o.usize_opt("block_k")?),
        },
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
            name: "log_softmax",
            about: "numerically stable log-softmax along an axis",
            args: &["x"],
            options: &[("axis", "-1", "the axis (negative counts from the end)")],
            run: |d, a, o| Ok(vec![log_softmax::run(d, a[0], o.isize("axis")?)?]),
            lower: |s, o| log_softmax::lower(&s[0], o.isize("axis")?),
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
            options: &[("eps", "1e-5", "added to the variance")],
            run: |d, a, o| Ok(vec![layer_norm::run(d, a[0], a[1], a[2], o.f32("eps")?)?]),
            lower: |s, o| layer_norm::lower(&s[0], &s[1], &s[2], o.f32("eps")?),
        },
        Entry {
            name: "rms_norm",
            about: "RMS normalization over the last axis with scale [D] (f32 statistics)",
            args: &["x", "scale"],
            options: &[("eps", "1e-6", "added to the mean square")],
            run: |d, a, o| Ok(vec![rms_norm::run(d, a[0], a[1], o.f32("eps")?)?]),
            lower: |s, o| rms_norm::lower(&s[0], &s[1], o.f32("eps")?),
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
            name: "gelu",
            about: "GELU, erf form or tanh approximation",
            args: &["x"],
            options: &[("approximate", "false", "use the tanh approximation")],
            run: |d, a, o| Ok(vec![gelu::run(d, a[0], o.bool("approximate")?)?]),
            lower: |s, o| gelu::lower(&s[0], o.bool("approximate")?),
        },
        Entry {
            name: "einsum",
            about: "two-operand einsum, e.g. --opt equation=bij,bjk->bik",
            args: &["a", "b"],
            options: &[("equation", "ij,jk->ik", "the subscripts")],
            run: |d, a, o| Ok(vec![einsum::run(d, o.leak("equation"), a[0], a[1])?]),
            lower: |s, o| einsum::lower(o.leak("equation"), &s[0], &s[1]),
        },
        Entry {
            name: "block_sparse",
            about: "sparse · dense for a square block-sparse matrix given as values [nnz, b, b] and s32 block indices [nnz, 2]",
            args: &["dense", "sparse_values", "indices"],
            options: &[("block_size", "128", "the kernel's block size")],
            run: |d, a, o| Ok(vec![block_sparse::run_with(&block_sparse_config(o)?, d, a[0], a[1], a[2])?]),
            lower: |s, o| block_sparse::lower_with(&block_sparse_config(o)?, &s[0], &s[1], &s[2]),
        },
        Entry {
            name: "moe",
            about: "routed MoE layer: 8 GELU experts, top-2, capacity 1.25 (outputs: y, aux_loss, z_loss, dropped)",
            args: &["x", "router", "w1", "w2"],
            options: &[],
            run: |d, a, _| {
                let (y, aux, z, dropped) = moe::run(d, a[0], a[1], a[2], a[3])?;
                Ok(vec![y, aux, z, dropped])
            },
            lower: |s, _| moe::lower(&s[0], &s[1], &s[2], &s[3]),
        },
    ]
}

/// The entry called `name`.
pub fn find(name: &str) -> std::result::Result<Entry, String> {
    let all = entries();
    let names: Vec<&str> = all.iter().map(|e| e.name).collect();
    let list = names.join(", ");
    all.into_iter()
        .find(|e| e.name == name)
        .ok_or_else(|| format!("unknown kernel `{name}`; kernels: {list}"))
}
