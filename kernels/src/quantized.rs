//! Quantized matmuls: int8 or fp8 weights (and optionally activations) with
//! per-channel or per-block scales, and the quantize / dequantize helpers.
//!
//! Scales are absmax-based and symmetric: `q = round(x / scale)` with
//! `scale = max|x| / qmax` over each channel (or block of K), `qmax` = 127
//! for int8 and the largest finite value for fp8 (448 for e4m3fn, 57344 for
//! e5m2). Dequantization is `x ≈ q · scale`.

use tessel::prelude::*;
use tessel::tensor::trace_error;

use crate::gemm::checks::{float, matrix, shaped};

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

/// Quantizes `x` (`[K, N]`) to `dtype` (`S8`, `F8E4M3FN` or `F8E5M2`)
/// with one scale per column (`axis = -1` reduced over K: scales `[N]`) when
/// `block_k` is `None`, or one per block of `block_k` rows and column
/// (scales `[ceil(K / block_k), N]`). Returns (quantized, f32 scales).
#[cpu_kernel]
#[track_caller]
pub fn quantize(x: Tensor, dtype: DType, block_k: Option<usize>) -> (Tensor, Tensor) {
    if let Err(m) = quantize_problem(&x.spec(), dtype, block_k) {
        let bad = trace_error("quantize", &[x], m);
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
#[track_caller]
pub fn quantize_rows(x: Tensor, dtype: DType) -> (Tensor, Tensor) {
    if let Err(m) = quantize_problem(&x.spec(), dtype, None) {
        let bad = trace_error("quantize_rows", &[x], m);
        return (bad, bad);
    }
    let (q, s) = quantize(x.t(), dtype, None);
    (q.t(), s)
}

/// `q · scale` back in f32, for scales as [`quantize`](fn@quantize) returns them.
#[cpu_kernel]
#[track_caller]
pub fn dequantize(q: Tensor, scales: Tensor, block_k: Option<usize>) -> Tensor {
    let check = matrix("q", &q.spec(), "[K, N]")
        .and_then(|(k, n)| scales_problem("scales", &scales.spec(), k, n, block_k));
    if let Err(m) = check {
        return trace_error("dequantize", &[q, scales], m);
    }
    let scales = scales.cast(F32);
    let qf = q.cast(F32);
    match block_k {
        None => qf * scales,
        Some(bk) => {
            let bk = bk.max(1); // 0 was refused above
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
#[track_caller]
pub fn quantized_matmul(
    x: Tensor,
    w_q: Tensor,
    w_scales: Tensor,
    block_k: Option<usize>,
) -> Tensor {
    let (xs, ws) = (x.spec(), w_q.spec());
    let check = float("x", &xs)
        .and_then(|_| matrix("x", &xs, "[M, K]"))
        .and_then(|(_, k)| {
            let (_, n) = matrix("w_q", &ws, "[K, N]")?;
            shaped("w_q", &ws, &[k, n], "K as x's columns")?;
            scales_problem("w_scales", &w_scales.spec(), k, n, block_k)
        });
    if let Err(m) = check {
        return trace_error("quantized_matmul", &[x, w_q, w_scales], m);
    }
    let w_scales = w_scales.cast(F32);
    let out_dtype = x.dtype();
    let xf = x.cast(F32);
    let wf = w_q.cast(F32);
    let y = match block_k {
        None => xf.matmul_with(wf, Some(Precision::Highest), Some(F32)) * w_scales,
        Some(bk) => {
            let bk = bk.max(1); // 0 was refused above
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

/// `x · w` in s32 for 8-bit integer operands of either signedness. When
/// they differ (u8 activations with s8 weights, say), the u8 operand is
/// shifted by 128 into s8's range and the shift is added back as 128 times
/// the other operand's sums, so the product stays one 8-bit dot (the fast
/// integer GEMM) and is exact.
fn int8_product(x: Tensor, w: Tensor) -> Tensor {
    let shifted = |u: Tensor| (u.cast(S32) - 128).cast(S8);
    match (x.dtype(), w.dtype()) {
        (DType::U8, DType::S8) => {
            let col_sums = w.cast(S32).sum(&[0]).expand_dims(0);
            shifted(x).matmul_with(w, None, Some(S32)) + col_sums * 128
        }
        (DType::S8, DType::U8) => {
            let row_sums = x.cast(S32).sum(&[1]).expand_dims(1);
            x.matmul_with(shifted(w), None, Some(S32)) + row_sums * 128
        }
        _ => x.matmul_with(w, None, Some(S32)),
    }
}

/// Both operands quantized: `x_q` `[M, K]` with per-row scales `[M]` and
/// `w_q` `[K, N]` with per-column scales `[N]`, both 8-bit integers (s8 or
/// u8, in any mix; an exact s32 dot) or both fp8; the result is f32
/// `x_q·w_q · x_scale[m] · w_scale[n]`.
#[tpu_kernel]
#[track_caller]
pub fn quantized_matmul_both(
    x_q: Tensor,
    x_scales: Tensor,
    w_q: Tensor,
    w_scales: Tensor,
) -> Tensor {
    let (xs, ws) = (x_q.spec(), w_q.spec());
    let check = matrix("x_q", &xs, "[M, K]").and_then(|(m, k)| {
        let (_, n) = matrix("w_q", &ws, "[K, N]")?;
        shaped("w_q", &ws, &[k, n], "K as x_q's columns")?;
        let int = |d: DType| matches!(d, DType::S8 | DType::U8);
        let fp8 = |d: DType| matches!(d, DType::F8E4M3FN | DType::F8E5M2);
        if !(int(xs.dtype) && int(ws.dtype) || fp8(xs.dtype) && fp8(ws.dtype)) {
            return Err(format!(
                "x_q and w_q must both be 8-bit integers or both fp8, got {} and {}",
                xs.dtype, ws.dtype
            ));
        }
        let (xsc, wsc) = (x_scales.spec(), w_scales.spec());
        float("x_scales", &xsc)?;
        float("w_scales", &wsc)?;
        shaped("x_scales", &xsc, &[m], "one per row of x_q")?;
        shaped("w_scales", &wsc, &[n], "one per column of w_q")
    });
    if let Err(m) = check {
        return trace_error("quantized_matmul_both", &[x_q, x_scales, w_q, w_scales], m);
    }
    let acc = if x_q.dtype().is_integer() {
        int8_product(x_q, w_q).cast(F32)
    } else {
        x_q.cast(BF16).matmul_with(w_q.cast(BF16), None, Some(F32))
    };
    acc * x_scales.cast(F32).expand_dims(1) * w_scales.cast(F32)
}

/// What is wrong with [`quantize`](fn@quantize)'s arguments.
fn quantize_problem(x: &TensorSpec, dtype: DType, block_k: Option<usize>) -> Result<(), String> {
    if block_k == Some(0) {
        return Err("block_k must be at least 1 (None: one block over K)".into());
    }
    if !matches!(dtype, DType::S8 | DType::F8E4M3FN | DType::F8E5M2) {
        return Err(format!("quantizes to s8, f8e4m3fn or f8e5m2, not {dtype}"));
    }
    if x.dtype.is_pred() {
        return Err(format!("needs numbers to quantize, got {x}"));
    }
    matrix("x", x, "[K, N]").map(|_| ())
}

/// What is wrong with the scales of a `[k, n]` quantized matrix:
/// per-channel `[n]` (`block_k` `None`) or per block `[ceil(k / block_k), n]`.
fn scales_problem(
    name: &str,
    s: &TensorSpec,
    k: usize,
    n: usize,
    block_k: Option<usize>,
) -> Result<(), String> {
    float(name, s)?;
    match block_k {
        None => shaped(name, s, &[n], "one per column"),
        Some(0) => Err("block_k must be at least 1 (None: per-channel scales)".into()),
        Some(bk) => shaped(
            name,
            s,
            &[k.div_ceil(bk), n],
            "one per block of K and column",
        ),
    }
}
