//! Serves a small random-weight decoder from a paged KV cache.
//!
//! ```text
//! cargo run --release --example generate [-- --steps N]
//! ```
//!
//! Four prompts of different lengths are prefilled in one call (their
//! tokens packed into one ragged batch, attended with
//! `ragged_paged_attention`), then decoded greedily for 64 steps, one token
//! per sequence per step, with `paged_attention`. Each step is one kernel:
//! embedding, for each layer RMSNorm → q/k/v with RoPE at the tokens'
//! (traced) positions → the new keys and values written into their pages →
//! attention over the cache → MLP, then the logits. The page pools are
//! donated, so the cache is updated in place. Every length and position is
//! traced: the decode loop compiles one program for its batch bucket.
//!
//! At the end the example recomputes each whole sequence without a cache
//! (causal attention over all its tokens) and prints the largest difference
//! between those logits and the ones the cached steps produced.

use std::time::Instant;

use tessel::config::KernelConfig;
use tessel::kernel::Kernel;
use tessel::kernels::activation::swiglu;
use tessel::kernels::attention::{attention_reference_with, AttentionExtras, FlashOptions};
use tessel::kernels::norm::rms_norm;
use tessel::kernels::serving::{
    kv_cache_update_with, paged_attention_with, ragged_paged_attention_with, Buckets, PagePool,
    PagedKv, ServeOptions,
};
use tessel::prelude::*;

const VOCAB: usize = 256;
const DIM: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = DIM / HEADS;
const HIDDEN: usize = 128;
const LAYERS: usize = 2;
const PAGE: usize = 16;
/// Pages per layer; layer `l` uses pages `l · POOL ..` of one pool.
const POOL: usize = 48;
const PARAMS: usize = 2 + 9 * LAYERS;

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn parameter_shapes() -> Vec<Vec<usize>> {
    let mut p = vec![vec![VOCAB, DIM]];
    for _ in 0..LAYERS {
        p.extend([
            vec![DIM],
            vec![DIM, HEADS * HEAD_DIM],
            vec![DIM, KV_HEADS * HEAD_DIM],
            vec![DIM, KV_HEADS * HEAD_DIM],
            vec![HEADS * HEAD_DIM, DIM],
            vec![DIM],
            vec![DIM, HIDDEN],
            vec![DIM, HIDDEN],
            vec![HIDDEN, DIM],
        ]);
    }
    p.push(vec![DIM]);
    p
}

fn init(shape: &[usize], rng: &mut Rng) -> tessel::Result<HostTensor> {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = if shape.len() == 1 {
        vec![1.0; n]
    } else {
        let scale = (3.0 / shape[0] as f32).sqrt();
        (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * scale).collect()
    };
    HostTensor::from_vec(values, shape.to_vec())
}

/// Rotary embedding of `x: [T, H, HEAD_DIM]` at positions `pos: s32 [T]`
/// (half-split pairs, base 10000).
fn rope_rows(x: Tensor, pos: Tensor) -> Tensor {
    let half = HEAD_DIM / 2;
    let t = x.dim(0) as isize;
    let i = Tensor::iota([1, 1, half], 2, F32);
    let inv_freq = (i * (-2.0 * 10_000f64.ln() / HEAD_DIM as f64)).exp();
    let angle = pos.cast(F32).reshape(&[t, 1, 1]) * inv_freq;
    let (cos, sin) = (angle.cos(), angle.sin());
    let (a, b) = (x.slice_axis(2, 0, half), x.slice_axis(2, half, HEAD_DIM));
    concat(&[a * cos - b * sin, b * cos + a * sin], 2)
}

/// How a step attends.
#[derive(Clone, Copy)]
enum Attend {
    /// Packed prompts, `ragged_paged_attention`.
    Prefill,
    /// One token per sequence, `paged_attention`.
    Decode,
}

/// One step over the cache: args are the parameters, then `tokens`,
/// `positions` (s32 `[T]`), the key and value pools, the block tables
/// (layer 0's page ids), `kv_lens` and `cu_q_lens`. Returns the logits
/// `[T, VOCAB]` and the two pools.
fn cached_step(a: &[Tensor], mode: Attend) -> Vec<Tensor> {
    let (p, rest) = a.split_at(PARAMS);
    let [tokens, positions, mut k_pool, mut v_pool, tables, kv_lens, cu] = rest else {
        unreachable!("the kernel's parameters are named and counted")
    };
    let t = tokens.dim(0) as isize;
    let mut x = p[0].take(*tokens, 0);
    let opts = ServeOptions::new();
    for l in 0..LAYERS {
        let w = &p[1 + 9 * l..1 + 9 * (l + 1)];
        let h = rms_norm(x, w[0], 1e-5);
        let split = |y: Tensor, heads: usize| y.reshape(&[t, heads as isize, HEAD_DIM as isize]);
        let q = rope_rows(split(h.matmul(w[1]), HEADS), *positions);
        let k = rope_rows(split(h.matmul(w[2]), KV_HEADS), *positions);
        let v = split(h.matmul(w[3]), KV_HEADS);
        let layer_tables = *tables + (l * POOL) as i32;
        let kv = kv_cache_update_with(
            &PagedKv::new(k_pool, v_pool),
            k,
            v,
            layer_tables,
            *kv_lens,
            *cu,
        );
        (k_pool, v_pool) = (kv.k_pages, kv.v_pages);
        let o = match mode {
            Attend::Prefill => {
                ragged_paged_attention_with(q, &kv, layer_tables, *kv_lens, *cu, &opts)
            }
            Attend::Decode => paged_attention_with(q, &kv, layer_tables, *kv_lens, &opts),
        };
        x = x + o.reshape(&[t, DIM as isize]).matmul(w[4]);
        let h = rms_norm(x, w[5], 1e-5);
        x = x + swiglu(h.matmul(w[6]), h.matmul(w[7])).matmul(w[8]);
    }
    let x = rms_norm(x, p[PARAMS - 1], 1e-5);
    vec![x.matmul(p[0].t()), k_pool, v_pool]
}

/// The logits `[S, VOCAB]` of one whole sequence `tokens: s32 [S]`,
/// without a cache: causal attention over all its tokens.
fn full_forward(a: &[Tensor]) -> Tensor {
    let (p, tokens) = (&a[..PARAMS], a[PARAMS]);
    let s = tokens.dim(0) as isize;
    let positions = Tensor::iota([tokens.dim(0)], 0, S32);
    let mut x = p[0].take(tokens, 0);
    // [S, H, D] -> [1, H, S, D]
    let heads = |y: Tensor, h: usize| {
        y.reshape(&[s, h as isize, HEAD_DIM as isize])
            .transpose(&[1, 0, 2])
            .reshape(&[1, h as isize, s, HEAD_DIM as isize])
    };
    for l in 0..LAYERS {
        let w = &p[1 + 9 * l..1 + 9 * (l + 1)];
        let h = rms_norm(x, w[0], 1e-5);
        let split = |y: Tensor, n: usize| y.reshape(&[s, n as isize, HEAD_DIM as isize]);
        let q = rope_rows(split(h.matmul(w[1]), HEADS), positions);
        let k = rope_rows(split(h.matmul(w[2]), KV_HEADS), positions);
        let v = split(h.matmul(w[3]), KV_HEADS);
        let flat = |y: Tensor, n: usize| y.reshape(&[s, (n * HEAD_DIM) as isize]);
        let (q, k, v) = (
            heads(flat(q, HEADS), HEADS),
            heads(flat(k, KV_HEADS), KV_HEADS),
            heads(flat(v, KV_HEADS), KV_HEADS),
        );
        let causal = FlashOptions::new().causal(true);
        let (o, _) = attention_reference_with(q, k, v, &AttentionExtras::default(), &causal);
        let o = o
            .reshape(&[HEADS as isize, s, HEAD_DIM as isize])
            .transpose(&[1, 0, 2]);
        x = x + o.reshape(&[s, DIM as isize]).matmul(w[4]);
        let h = rms_norm(x, w[5], 1e-5);
        x = x + swiglu(h.matmul(w[6]), h.matmul(w[7])).matmul(w[8]);
    }
    rms_norm(x, p[PARAMS - 1], 1e-5).matmul(p[0].t())
}

/// The body of a cached step, as a function pointer (both steps share one
/// kernel type).
type StepBody = fn(&[Tensor]) -> Vec<Tensor>;

fn prefill_body(a: &[Tensor]) -> Vec<Tensor> {
    cached_step(a, Attend::Prefill)
}

fn decode_body(a: &[Tensor]) -> Vec<Tensor> {
    cached_step(a, Attend::Decode)
}

fn argmax(row: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as i32
}

/// The three results of a step: the logits and the two pools.
fn three(out: Vec<DeviceBuffer>) -> tessel::Result<[DeviceBuffer; 3]> {
    let got = out.len();
    out.try_into()
        .map_err(|_| tessel::DeviceError::OutputCount { expected: 3, got }.into())
}

fn s32(v: Vec<i32>) -> tessel::Result<HostTensor> {
    let n = v.len();
    HostTensor::from_vec(v, [n])
}

fn main() -> tessel::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let steps = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(64usize);
    let dev = Device::from_env()?;
    let mut rng = Rng(0x5eed);
    let mut params = Vec::new();
    for shape in parameter_shapes() {
        params.push(dev.to_device(&init(&shape, &mut rng)?)?);
    }

    let prompt_lens = [7usize, 19, 33, 12];
    let b = prompt_lens.len();
    let prompts: Vec<Vec<i32>> = prompt_lens
        .iter()
        .map(|&n| (0..n).map(|_| (rng.next() % VOCAB as u64) as i32).collect())
        .collect();
    let total: Vec<usize> = prompt_lens.iter().map(|n| n + steps).collect();
    // Pages handed out 16 tokens at a time, round-robin: every sequence's
    // pages are scattered through the pool.
    let mut pool = PagePool::new(POOL, PAGE);
    let longest = total.iter().copied().max().unwrap_or(0);
    for len in (PAGE..longest + PAGE).step_by(PAGE) {
        for (s, &n) in total.iter().enumerate() {
            pool.reserve(s as u64, len.min(n))?;
        }
    }
    let buckets = Buckets::powers_of_two(1024);
    let width = buckets.bucket(longest.div_ceil(PAGE))?;
    let seqs: Vec<u64> = (0..b as u64).collect();
    let tables = dev.to_device(&pool.block_tables(&seqs, width)?)?;
    let pool_spec = TensorSpec::new(vec![LAYERS * POOL, PAGE, KV_HEADS, HEAD_DIM], F32);
    let mut k_pool = dev.to_device(&HostTensor::zeros(pool_spec.clone()))?;
    let mut v_pool = dev.to_device(&HostTensor::zeros(pool_spec))?;

    let mut names: Vec<String> = (0..PARAMS).map(|i| format!("p{i}")).collect();
    names.extend(
        [
            "tokens",
            "positions",
            "k_pool",
            "v_pool",
            "tables",
            "kv_lens",
            "cu_q_lens",
        ]
        .map(String::from),
    );
    let config = KernelConfig {
        donate: &["k_pool", "v_pool"],
        ..KernelConfig::default()
    };
    let prefill = Kernel::new("prefill_step", prefill_body as StepBody)
        .params(names.clone())
        .config(config);
    let decode = Kernel::new("decode_step", decode_body as StepBody)
        .params(names)
        .config(config);

    // Prefill: the prompts packed into one ragged batch, padded to a bucket.
    let packed: usize = prompt_lens.iter().sum();
    let t = buckets.bucket(packed)?;
    let (mut tokens, mut positions, mut cu) = (Vec::new(), Vec::new(), vec![0i32]);
    for p in &prompts {
        tokens.extend(p);
        positions.extend(0..p.len() as i32);
        cu.push(tokens.len() as i32);
    }
    tokens.resize(t, 0);
    positions.resize(t, 0);
    let mut kv_lens: Vec<i32> = prompt_lens.iter().map(|&n| n as i32).collect();
    let run_step = |kernel: &Kernel<StepBody>,
                    tokens: Vec<i32>,
                    positions: Vec<i32>,
                    kv_lens: &[i32],
                    cu: Vec<i32>,
                    k_pool: &DeviceBuffer,
                    v_pool: &DeviceBuffer|
     -> tessel::Result<Vec<DeviceBuffer>> {
        let small = [
            dev.to_device(&s32(tokens)?)?,
            dev.to_device(&s32(positions)?)?,
            dev.to_device(&s32(kv_lens.to_vec())?)?,
            dev.to_device(&s32(cu)?)?,
        ];
        let mut a: Vec<&DeviceBuffer> = params.iter().collect();
        a.extend([
            &small[0], &small[1], k_pool, v_pool, &tables, &small[2], &small[3],
        ]);
        kernel.call(&dev, &a)
    };
    let start = Instant::now();
    let out = run_step(
        &prefill,
        tokens,
        positions,
        &kv_lens,
        cu.clone(),
        &k_pool,
        &v_pool,
    )?;
    let [logits, k2, v2] = three(out)?;
    (k_pool, v_pool) = (k2, v2);
    let logits = logits.to_host()?.to_vec::<f32>()?;
    let mut cached: Vec<Vec<Vec<f32>>> = vec![Vec::new(); b];
    let mut next = Vec::new();
    for s in 0..b {
        let row = (cu[s + 1] - 1) as usize;
        let r = logits[row * VOCAB..(row + 1) * VOCAB].to_vec();
        next.push(argmax(&r));
        cached[s].push(r);
    }
    let prefill_time = start.elapsed();

    // Greedy decode: one token per sequence per step.
    let mut generated: Vec<Vec<i32>> = vec![Vec::new(); b];
    let decode_cu: Vec<i32> = (0..=b as i32).collect();
    let before = dev.cache().stats();
    let start = Instant::now();
    let mut first_step = None;
    for _ in 0..steps {
        let positions = kv_lens.clone();
        for (s, len) in kv_lens.iter_mut().enumerate() {
            generated[s].push(next[s]);
            *len += 1;
        }
        let out = run_step(
            &decode,
            next.clone(),
            positions,
            &kv_lens,
            decode_cu.clone(),
            &k_pool,
            &v_pool,
        )?;
        let [logits, k2, v2] = three(out)?;
        (k_pool, v_pool) = (k2, v2);
        let logits = logits.to_host()?.to_vec::<f32>()?;
        for s in 0..b {
            let r = logits[s * VOCAB..(s + 1) * VOCAB].to_vec();
            next[s] = argmax(&r);
            cached[s].push(r);
        }
        first_step.get_or_insert_with(|| start.elapsed());
    }
    let decode_time = start.elapsed();
    let first_step = first_step.unwrap_or_default();
    let steady = decode_time.saturating_sub(first_step);
    let after = dev.cache().stats();

    // Recompute each whole sequence without a cache.
    let full = Kernel::new("full_forward", full_forward);
    let mut max_diff = 0f32;
    for s in 0..b {
        let mut seq = prompts[s].clone();
        seq.extend(&generated[s]);
        let seq_t = dev.to_device(&s32(seq.clone())?)?;
        let mut a: Vec<&DeviceBuffer> = params.iter().collect();
        a.push(&seq_t);
        let logits = full.call(&dev, &a)?.remove(0).to_host()?.to_vec::<f32>()?;
        let n = prompt_lens[s];
        for (i, row) in cached[s].iter().enumerate() {
            let at = n - 1 + i;
            for (x, y) in row.iter().zip(&logits[at * VOCAB..(at + 1) * VOCAB]) {
                max_diff = max_diff.max((x - y).abs());
            }
        }
    }
    let tokens = b * steps;
    println!(
        "prefill: {} prompt tokens (bucket {t}) in {:.1} ms (compile included)",
        packed,
        prefill_time.as_secs_f64() * 1e3
    );
    println!(
        "decode: {steps} steps x {b} sequences: first step {:.0} ms (it compiles), then {:.0} tokens/s ({:.2} ms per step)",
        first_step.as_secs_f64() * 1e3,
        (tokens - b) as f64 / steady.as_secs_f64(),
        steady.as_secs_f64() * 1e3 / steps.saturating_sub(1).max(1) as f64
    );
    println!(
        "programs compiled during the decode loop: {} (batch bucket {b}, table width {width})",
        after.compiles - before.compiles
    );
    println!("max |logits - recomputed| = {max_diff:.2e}");
    for (s, g) in generated.iter().enumerate() {
        let head: Vec<String> = g.iter().take(8).map(|t| t.to_string()).collect();
        println!(
            "sequence {s}: prompt {} tokens, generated {} ...",
            prompt_lens[s],
            head.join(" ")
        );
    }
    if max_diff >= 1e-3 {
        eprintln!("the cached logits differ from the recomputation by {max_diff}");
        std::process::exit(1);
    }
    Ok(())
}
