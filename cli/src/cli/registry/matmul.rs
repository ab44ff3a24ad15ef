//! Matrix products: gemm, quantized matmuls with their quantize /
//! dequantize helpers, einsum, the block-sparse product and the MoE layer.

use super::{bad, Entry, Opts};
use tessel::kernels::einsum::{einsum, einsum1};
use tessel::kernels::gemm::gemm_bias;
use tessel::kernels::gemm::{gemm, Activation, GemmOptions};
use tessel::kernels::grads::quantized_matmul_vjp;
use tessel::kernels::moe::moe;
use tessel::kernels::quantized::{
    dequantize, quantize, quantize_rows, quantized_matmul, quantized_matmul_both,
};
use tessel::kernels::sparse::{block_sparse, check_block_indices};
use tessel::{DType, HostTensor, Result, TensorSpec};

pub(super) fn gemm_opts(o: &Opts) -> Result<GemmOptions> {
    let activation = match o.get("activation") {
        "none" | "identity" => Activation::Identity,
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "gelu_tanh" => Activation::GeluTanh,
        "silu" => Activation::Silu,
        v => {
            return Err(bad(
                "activation",
                format!("takes none, relu, gelu, gelu_tanh or silu, got `{v}`"),
            ))
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

pub(super) const GEMM_OPTIONS: &[(&str, &str, &str)] = &[
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

/// The quantized dtype of option `dtype`: int8, fp8 (e4m3fn) or fp8 e5m2.
fn quant_dtype(o: &Opts) -> Result<DType> {
    match o.get("dtype") {
        "int8" | "s8" | "i8" => Ok(DType::S8),
        "fp8" | "f8e4m3fn" | "f8e4m3" => Ok(DType::F8E4M3FN),
        "f8e5m2" => Ok(DType::F8E5M2),
        v => Err(bad(
            "dtype",
            format!("takes int8, fp8 (the same as f8e4m3fn) or f8e5m2, got `{v}`"),
        )),
    }
}

/// The dtype option `q_dtype` gives quantized inputs (`None`: as stored).
fn q_dtype(o: &Opts) -> Result<Option<DType>> {
    match o.get("q_dtype") {
        "" | "none" => Ok(None),
        "fp8" | "f8e4m3fn" | "f8e4m3" => Ok(Some(DType::F8E4M3FN)),
        "f8e5m2" => Ok(Some(DType::F8E5M2)),
        v => Err(bad(
            "q_dtype",
            format!("takes none, fp8 (the same as f8e4m3fn) or f8e5m2, got `{v}`"),
        )),
    }
}

/// A quantized input as `q_dtype` says: `.npy` has no fp8, so fp8 values
/// arrive as their uint8 bit patterns and are reinterpreted here.
fn stored(t: &HostTensor, o: &Opts) -> Result<HostTensor> {
    match q_dtype(o)? {
        Some(d) => t.clone().bitcast(d),
        None => Ok(t.clone()),
    }
}

/// The spec of a quantized argument under `q_dtype` (as [`stored`] for `run`).
fn stored_spec(s: &TensorSpec, o: &Opts) -> Result<TensorSpec> {
    match q_dtype(o)? {
        Some(d) if d.size_in_bytes() != s.dtype.size_in_bytes() => Err(bad(
            "q_dtype",
            format!(
                "{} needs 1-byte quantized arguments, got {s}",
                o.get("q_dtype")
            ),
        )),
        Some(d) => Ok(TensorSpec::new(s.shape.clone(), d)),
        None => Ok(s.clone()),
    }
}

const Q_DTYPE: (&str, &str, &str) = (
    "q_dtype",
    "none",
    "read 1-byte quantized inputs as fp8 (f8e4m3fn) or f8e5m2 (.npy stores fp8 as uint8 bits); none keeps the file's dtype",
);

const BLOCK_K: (&str, &str, &str) = (
    "block_k",
    "none",
    "rows of K per scale block (none: per-channel scales)",
);

fn block_sparse_config(o: &Opts) -> Result<tessel::kernel::KernelConfig> {
    let bs = o.usize_opt("block_size")?.unwrap_or(128);
    Ok(block_sparse::CONFIG.with_block_size(Some(bs)))
}

/// The matrix products.
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
            options: &[BLOCK_K, Q_DTYPE],
            run: |d, a, o| {
                let wq = stored(a[1], o)?;
                Ok(vec![quantized_matmul::run(d, a[0], &wq, a[2], o.usize_opt("block_k")?)?])
            },
            lower: |s, o| {
                quantized_matmul::lower(&s[0], &stored_spec(&s[1], o)?, &s[2], o.usize_opt("block_k")?)
            },
        },
        Entry {
            name: "quantized_matmul_vjp",
            about: "cotangent dx of quantized_matmul for dout (the quantized weights get none)",
            args: &["x", "w_q", "w_scales", "dout"],
            options: &[BLOCK_K, Q_DTYPE],
            run: |d, a, o| {
                let wq = stored(a[1], o)?;
                let dx = quantized_matmul_vjp::run(d, a[0], &wq, a[2], a[3], o.usize_opt("block_k")?)?;
                Ok(vec![dx])
            },
            lower: |s, o| {
                quantized_matmul_vjp::lower(
                    &s[0],
                    &stored_spec(&s[1], o)?,
                    &s[2],
                    &s[3],
                    o.usize_opt("block_k")?,
                )
            },
        },
        Entry {
            name: "quantized_matmul_both",
            about: "x_q · w_q · x_scales[m] · w_scales[n] (f32) for int8 or fp8 x_q [M, K] and w_q [K, N] with per-row / per-column scales",
            args: &["x_q", "x_scales", "w_q", "w_scales"],
            options: &[Q_DTYPE],
            run: |d, a, o| {
                let (xq, wq) = (stored(a[0], o)?, stored(a[2], o)?);
                Ok(vec![quantized_matmul_both::run(d, &xq, a[1], &wq, a[3])?])
            },
            lower: |s, o| {
                let (xq, wq) = (stored_spec(&s[0], o)?, stored_spec(&s[2], o)?);
                quantized_matmul_both::lower(&xq, &s[1], &wq, &s[3])
            },
        },
        Entry {
            name: "quantize",
            about: "absmax quantization of [.., K, N] to int8/fp8 with per-column or per-block scales (outputs: q, f32 scales [N] or [ceil(K / block_k), N])",
            args: &["x"],
            options: &[
                ("dtype", "int8", "int8, fp8 (f8e4m3fn) or f8e5m2; fp8 is written as uint8 bits"),
                BLOCK_K,
            ],
            run: |d, a, o| {
                let (q, s) = quantize::run(d, a[0], quant_dtype(o)?, o.usize_opt("block_k")?)?;
                Ok(vec![q, s])
            },
            lower: |s, o| quantize::lower(&s[0], quant_dtype(o)?, o.usize_opt("block_k")?),
        },
        Entry {
            name: "quantize_rows",
            about: "absmax quantization of the rows of x [M, K] to int8/fp8 (outputs: q, f32 scales [M])",
            args: &["x"],
            options: &[("dtype", "int8", "int8, fp8 (f8e4m3fn) or f8e5m2; fp8 is written as uint8 bits")],
            run: |d, a, o| {
                let (q, s) = quantize_rows::run(d, a[0], quant_dtype(o)?)?;
                Ok(vec![q, s])
            },
            lower: |s, o| quantize_rows::lower(&s[0], quant_dtype(o)?),
        },
        Entry {
            name: "dequantize",
            about: "q · scales back in f32, for scales as quantize makes them",
            args: &["q", "scales"],
            options: &[BLOCK_K, Q_DTYPE],
            run: |d, a, o| Ok(vec![dequantize::run(d, &stored(a[0], o)?, a[1], o.usize_opt("block_k")?)?]),
            lower: |s, o| dequantize::lower(&stored_spec(&s[0], o)?, &s[1], o.usize_opt("block_k")?),
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
            name: "einsum1",
            about: "one-operand einsum: transposes, reductions, diagonals, traces, e.g. --opt equation=ijk->kj",
            args: &["a"],
            options: &[("equation", "ij->ji", "the subscripts")],
            run: |d, a, o| Ok(vec![einsum1::run(d, o.leak("equation"), a[0])?]),
            lower: |s, o| einsum1::lower(o.leak("equation"), &s[0]),
        },
        Entry {
            name: "block_sparse",
            about: "sparse · dense for a square block-sparse matrix given as values [nnz, b, b] and s32 block indices [nnz, 2]",
            args: &["dense", "sparse_values", "indices"],
            options: &[("block_size", "128", "the kernel's block size")],
            run: |d, a, o| {
                let cfg = block_sparse_config(o)?;
                // The indices are read on the device, which clamps bad ones: check them here.
                check_block_indices(a[0], a[1], a[2], cfg.block_size)?;
                Ok(vec![block_sparse::run_with(&cfg, d, a[0], a[1], a[2])?])
            },
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
