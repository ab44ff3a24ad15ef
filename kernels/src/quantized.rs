//! Quantized matmuls: int8 or fp8 weights (and optionally activations) with
//! per-channel or per-block scales, and the quantize / dequantize helpers.
//!
//! Scales are absmax-based and symmetric: `q = round(x / scale)` with
//! `scale = max|x| / qmax` over each channel (or block of K), `qmax` = 127
//! for int8 and the largest finite value for fp8 (448 for e4m3fn, 57344 for
//! e5m2). Dequantization is `x ≈ q · scale`.

use tessel::prelude::*;
use tessel::tensor::trace_error;

/// The largest magnitude a quantized dtype holds.
pub fn qmax(dtype: DType) -> f64 {
    match dtype {
        DType::S8 => 127.0,
        DType::F8E4M3FN => 448.0,
        DType::F8E5M2 => 57344.0,
        DType::U8 => 255.0,
        _ => f64::MAX,
    }
}

/// Quantizes `x` (`[.., K, N]`) to `dtype` (`S8`, `F8E4M3FN` or `F8E5M2`)
/// with one scale per column (`axis = -1` reduced over K: scales `[N]`) when
/// `block_k` is `None`, or one per block of `block_k` rows and column
/// (scales `[ceil(K / block_k), N]`). Returns (quantized, f32 scales).
#[cpu_kernel]
pub fn quantize(x: Tensor, dtype: DType, block_k: Option<usize>) -> (Tensor, Tensor) {
    if block_k == Some(0) {
        let bad = trace_error(
            "quantize",
            &[x],
            "block_k must be at least 1 (None: one block over K)",
        );
        return (bad, bad);
    }
    let xf = x.cast(F32);
    let k = xf.dim(-2);
    let n = xf.dim(-1);
    if k == 0 {
        // No rows to scale: an empty result, and the smallest scale per block.
        let scale_shape = match block_k {
            Some(_) => vec![0, n],
            None => vec![n],
        };
        return (
            x.cast(dtype),
            Tensor::full(scale_shape, f32::MIN_POSITIVE as f64, F32),
        );
    }
    let bk = block_k.unwrap_or(k).min(k);
    let nb = k.div_ceil(bk);
    // [K, N] -> [nb, bk, N] (zero-padded), absmax over bk.
    let padded = xf.pad_to_multiple(-2, bk, 0.0);
    let blocked = padded.reshape(&[nb as isize, bk as isize, n as isize]);
    let absmax = blocked.abs().max(&[1]);
    let scale = (absmax / qmax(dtype)).maximum(f32::MIN_POSITIVE);
    let scaled = blocked / scale.expand_dims(1);
    let rounded = if dtype.is_integer() {
        scaled.round().clamp(-qmax(dtype), qmax(dtype))
    } else {
        scaled
    };
    let q = rounded
        .reshape(&[(nb * bk) as isize, n as isize])
        .slice_axis(0, 0, k)
        .cast(dtype);
    let scales = if block_k.is_some() {
        scale
    } else {
        scale.reshape(&[n as isize])
    };
    (q, scales)
}

/// Quantizes the rows of `x` `[M, K]`: one scale per row (`[M]`), as the
/// activations of [`quantized_matmul_both`](fn@quantized_matmul_both) need.
#[cpu_kernel]
pub fn quantize_rows(x: Tensor, dtype: DType) -> (Tensor, Tensor) {
    let (q, s) = quantize(x.t(), dtype, None);
    (q.t(), s)
}

/// `q · scale` back in f32, for scales as [`quantize`](fn@quantize) returns them.
#[cpu_kernel]
pub fn dequantize(q: Tensor, scales: Tensor, block_k: Option<usize>) -> Tensor {
    let qf = q.cast(F32);
    match block_k {
        None => qf * scales,
        Some(0) => trace_error(
            "dequantize",
            &[q, scales],
            "block_k must be at least 1 (None: per-channel scales)",
        ),
        Some(bk) => {
            let (k, n) = (qf.dim(-2), qf.dim(-1));
            let nb = k.div_ceil(bk);
            let per_row = scales
                .expand_dims(1)
                .broadcast_to([nb, bk, n])
                .reshape(&[(nb * bk) as isize, n as isize]);
            qf * per_row.slice_axis(0, 0, k)
        }
    }
}

/// `x · dequantize(w_q, w_scales)` for an f32/bf16 `x` `[M, K]` and quantized
/// weights `w_q` `[K, N]` (int8 or fp8): per-channel scales `[N]` are applied
/// once after the dot (the scale factors out of the sum over K); per-block
/// scales `[K / block_k, N]` are applied per block of K in one batched dot.
/// The dot accumulates in f32.
#[tpu_kernel]
pub fn quantized_matmul(
    x: Tensor,
    w_q: Tensor,
    w_scales: Tensor,
    block_k: Option<usize>,
) -> Tensor {
    let out_dtype = x.dtype();
    let xf = x.cast(F32);
    let wf = w_q.cast(F32);
    let y = match block_k {
        None => xf.matmul_with(wf, Some(Precision::Highest), Some(F32)) * w_scales,
        Some(0) => trace_error(
            "quantized_matmul",
            &[x, w_q, w_scales],
            "block_k must be at least 1 (None: per-channel scales)",
        ),
        Some(bk) => {
            let (m, k, n) = (xf.dim(0), xf.dim(1), wf.dim(1));
            let nb = k.div_ceil(bk);
            // [M, nb, bk] x [nb, bk, N] -> [nb, M, N], scaled per block, summed over blocks.
            let xb = xf
                .pad_to_multiple(1, bk, 0.0)
                .reshape(&[m as isize, nb as isize, bk as isize])
                .transpose(&[1, 0, 2]);
            let wb =
                wf.pad_to_multiple(0, bk, 0.0)
                    .reshape(&[nb as isize, bk as isize, n as isize]);
            let partial = xb.matmul_with(wb, Some(Precision::Highest), Some(F32));
            (partial * w_scales.expand_dims(1)).sum(&[0])
        }
    };
    y.cast(out_dtype)
}

/// Both operands quantized: `x_q` `[M, K]` with per-row scales `[M]` and
/// `w_q` `[K, N]` with per-column scales `[N]`, both int8 (an s32 dot) or both
/// fp8; the result is f32 `x_q·w_q · x_scale[m] · w_scale[n]`.
#[tpu_kernel]
pub fn quantized_matmul_both(
    x_q: Tensor,
    x_scales: Tensor,
    w_q: Tensor,
    w_scales: Tensor,
) -> Tensor {
    let acc = if x_q.dtype().is_integer() {
        x_q.matmul_with(w_q, None, Some(S32)).cast(F32)
    } else {
        x_q.cast(BF16).matmul_with(w_q.cast(BF16), None, Some(F32))
    };
    acc * x_scales.expand_dims(1) * w_scales
}
