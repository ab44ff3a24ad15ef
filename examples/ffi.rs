//! Native Rust inside a kernel: top-p (nucleus) sampling, written in plain
//! Rust and registered as a native function, called from a decode step
//! that keeps its state on the device. The same steps are computed in f64
//! on the host; the example prints how far the sampled probabilities are
//! from it and whether every token agrees.
//!
//! ```text
//! cargo run --release --example ffi
//! TESSEL_DEVICE=interpreter cargo run --release --example ffi
//! ```

use tessel::ffi::{ffi_call_with, register, FfiAttr, FfiCall};
use tessel::prelude::*;

const BATCH: usize = 4;
const DIM: usize = 16;
const VOCAB: usize = 32;
const STEPS: usize = 8;
const TOP_P: f64 = 0.9;

/// Nucleus sampling of one row of logits with the uniform draw `u`: the
/// smallest set of most likely tokens whose probability reaches `p`,
/// renormalized, sampled by inverting its cumulative sum. Returns the
/// token and its probability in the nucleus.
fn top_p(logits: &[f64], u: f64, p: f64) -> (usize, f64) {
    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
    let z: f64 = e.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| e[b].total_cmp(&e[a]).then(a.cmp(&b)));
    let (mut kept, mut mass) = (0, 0.0);
    while kept < order.len() && (kept == 0 || mass < p) {
        mass += e[order[kept]] / z;
        kept += 1;
    }
    let mut acc = 0.0;
    for &t in &order[..kept] {
        acc += e[t] / z / mass;
        if u < acc {
            return (t, e[t] / z / mass);
        }
    }
    let t = order[kept - 1];
    (t, e[t] / z / mass)
}

/// The native function: logits `f32 [B, V]`, draws `f32 [B]`, attribute
/// `p` → tokens `s32 [B]` and their probabilities `f32 [B]`.
fn sample(call: &FfiCall<'_>) -> std::result::Result<Vec<HostTensor>, String> {
    let logits = call.args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
    let draws = call.args[1].to_vec::<f32>().map_err(|e| e.to_string())?;
    let p = call.f64("p")?;
    let v = call.args[0].shape()[1];
    let (mut tokens, mut probs) = (Vec::new(), Vec::new());
    for (row, &u) in logits.chunks(v).zip(&draws) {
        let row: Vec<f64> = row.iter().map(|&x| f64::from(x)).collect();
        let (t, q) = top_p(&row, f64::from(u), p);
        tokens.push(t as i32);
        probs.push(q as f32);
    }
    let b = draws.len();
    Ok(vec![
        HostTensor::from_vec(tokens, [b]).map_err(|e| e.to_string())?,
        HostTensor::from_vec(probs, [b]).map_err(|e| e.to_string())?,
    ])
}

/// One decode step: logits from the state, a token sampled natively, the
/// state moved by the token's embedding. Returns (state, token, probability).
#[cpu_kernel(precision = "highest")]
fn decode_step(h: Tensor, w_out: Tensor, embed: Tensor, u: Tensor, p: f64) -> (Tensor, Tensor, Tensor) {
    let logits = h.tanh().matmul(w_out);
    let results = [TensorSpec::new([BATCH], S32), TensorSpec::new([BATCH], F32)];
    let picked = ffi_call_with("top_p_sample", &[logits, u], &results, &[("p", FfiAttr::F64(p))]);
    let next = h * 0.5 + embed.take(picked[0], 0);
    (next, picked[0], picked[1])
}

fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn host(v: &[f64], shape: &[usize]) -> Result<HostTensor> {
    HostTensor::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)
}

fn main() -> Result<()> {
    register("top_p_sample", sample);
    let dev = Device::from_env()?;
    let (w, e, h0) = (values(DIM * VOCAB, 1, 2.0), values(VOCAB * DIM, 2, 1.0), values(BATCH * DIM, 3, 1.0));
    let (w_d, e_d) = (dev.to_device(&host(&w, &[DIM, VOCAB])?)?, dev.to_device(&host(&e, &[VOCAB, DIM])?)?);
    let mut h = dev.to_device(&host(&h0, &[BATCH, DIM])?)?;
    // The reference: the same steps in f64 on the host.
    let mut h_ref = h0.clone();
    let (mut max_diff, mut same) = (0.0f64, true);
    for step in 0..STEPS {
        let draws = values(BATCH, 100 + step as u64, 0.5).iter().map(|x| x + 0.5).collect::<Vec<_>>();
        let u = dev.to_device(&host(&draws, &[BATCH])?)?;
        let (next, tokens, probs) = decode_step::call(&dev, &h, &w_d, &e_d, &u, TOP_P)?;
        h = next;
        let (tokens, probs) = (tokens.to_host()?.to_vec::<i32>()?, probs.to_host()?.to_vec::<f32>()?);
        for b in 0..BATCH {
            let row = &h_ref[b * DIM..(b + 1) * DIM];
            let logits: Vec<f64> = (0..VOCAB)
                .map(|j| (0..DIM).map(|k| row[k].tanh() * f64::from(w[k * VOCAB + j] as f32)).sum())
                .collect();
            let (t, q) = top_p(&logits, f64::from(draws[b] as f32), TOP_P);
            same &= t as i32 == tokens[b];
            max_diff = max_diff.max((q - f64::from(probs[b])).abs());
            let next: Vec<f64> = (0..DIM).map(|k| row[k] * 0.5 + f64::from(e[t * DIM + k] as f32)).collect();
            h_ref.splice(b * DIM..(b + 1) * DIM, next);
        }
        println!("step {step}: tokens {tokens:?}");
    }
    println!("tokens match the reference: {same}");
    println!("max |ffi - reference|: {max_diff:e}");
    Ok(())
}
