//! Serves a small random-weight decoder from a paged KV cache.
//!
//! ```text
//! cargo run --release --example generate [-- --steps N]
//! ```
//!
//! Four prompts of different lengths are prefilled in one call (their
//! tokens packed into one ragged batch, attended with
//! `ragged_paged_attention`), then decoded greedily for 64 steps, one token
//! per sequence per step, with `paged_attention`. The parameters, the cache
//! and a step's inputs are `#[derive(Tree)]` structs. Each step is one kernel:
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

use tessel::kernels::activation::swiglu;
use tessel::kernels::attention::{attention_reference_with, AttentionExtras, FlashOptions};
use tessel::kernels::norm::rms_norm;
use tessel::kernels::serving::{
    kv_cache_update_with, paged_attention_with, ragged_paged_attention_with, Buckets, PagePool, PagedKv, ServeOptions,
};
use tessel::prelude::*;
use tessel::{tree, Tree};

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

/// One block's parameters.
#[derive(Tree)]
struct Block<T = Tensor> {
    attn_norm: T,
    wq: T,
    wk: T,
    wv: T,
    wo: T,
    mlp_norm: T,
    w_gate: T,
    w_up: T,
    w_down: T,
}

/// The decoder's parameters: traced in the kernels, device buffers between calls.
#[derive(Tree)]
struct Model<T = Tensor> {
    embedding: T,
    blocks: Vec<Block<T>>,
    final_norm: T,
}

/// The key and value page pools (donated: updated in place).
#[derive(Tree)]
struct Cache<T = Tensor> {
    k: T,
    v: T,
}

/// One step's tokens, their positions and their places in the cache.
#[derive(Tree)]
struct Step<T = Tensor> {
    tokens: T,
    positions: T,
    tables: T,
    kv_lens: T,
    cu_q_lens: T,
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

fn init_model(rng: &mut Rng) -> tessel::Result<Model<HostTensor>> {
    let embedding = init(&[VOCAB, DIM], rng)?;
    let mut blocks = Vec::new();
    for _ in 0..LAYERS {
        blocks.push(Block {
            attn_norm: init(&[DIM], rng)?,
            wq: init(&[DIM, HEADS * HEAD_DIM], rng)?,
            wk: init(&[DIM, KV_HEADS * HEAD_DIM], rng)?,
            wv: init(&[DIM, KV_HEADS * HEAD_DIM], rng)?,
            wo: init(&[HEADS * HEAD_DIM, DIM], rng)?,
            mlp_norm: init(&[DIM], rng)?,
            w_gate: init(&[DIM, HIDDEN], rng)?,
            w_up: init(&[DIM, HIDDEN], rng)?,
            w_down: init(&[HIDDEN, DIM], rng)?,
        });
    }
    Ok(Model { embedding, blocks, final_norm: init(&[DIM], rng)? })
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

/// The residual stream after attention output `o: [T, HEADS, HEAD_DIM]` and the MLP.
fn finish_block(w: &Block, x: Tensor, o: Tensor) -> Tensor {
    let x = x + o.reshape(&[x.dim(0) as isize, DIM as isize]).matmul(w.wo);
    let h = rms_norm(x, w.mlp_norm, 1e-5);
    x + swiglu(h.matmul(w.w_gate), h.matmul(w.w_up)).matmul(w.w_down)
}

/// Queries `[T, HEADS, HEAD_DIM]`, keys and values `[T, KV_HEADS, HEAD_DIM]`.
fn qkv(w: &Block, x: Tensor, positions: Tensor) -> (Tensor, Tensor, Tensor) {
    let h = rms_norm(x, w.attn_norm, 1e-5);
    let split = |y: Tensor, heads: usize| y.reshape(&[x.dim(0) as isize, heads as isize, HEAD_DIM as isize]);
    let q = rope_rows(split(h.matmul(w.wq), HEADS), positions);
    let k = rope_rows(split(h.matmul(w.wk), KV_HEADS), positions);
    (q, k, split(h.matmul(w.wv), KV_HEADS))
}

/// One step over the cache: the prompts packed into one ragged batch
/// (`prefill`, `ragged_paged_attention`) or one token per sequence
/// (`paged_attention`). Returns the cache and the logits `[T, VOCAB]`.
#[cpu_kernel(donate(cache))]
fn cached_step(p: Model, cache: Cache, step: Step, prefill: bool) -> (Cache, Tensor) {
    step_over_cache(&p, cache, &step, prefill)
}

/// The body of [`cached_step`](fn@cached_step).
fn step_over_cache(p: &Model, cache: Cache, step: &Step, prefill: bool) -> (Cache, Tensor) {
    let (mut k_pool, mut v_pool) = (cache.k, cache.v);
    let mut x = p.embedding.take(step.tokens, 0);
    let opts = ServeOptions::new();
    for (l, w) in p.blocks.iter().enumerate() {
        let (q, k, v) = qkv(w, x, step.positions);
        let tables = step.tables + (l * POOL) as i32;
        let kv = PagedKv::new(k_pool, v_pool);
        let kv = kv_cache_update_with(&kv, k, v, tables, step.kv_lens, step.cu_q_lens);
        (k_pool, v_pool) = (kv.k_pages, kv.v_pages);
        let o = attend(q, &kv, tables, step, prefill, &opts);
        x = finish_block(w, x, o);
    }
    let logits = rms_norm(x, p.final_norm, 1e-5).matmul(p.embedding.t());
    (Cache { k: k_pool, v: v_pool }, logits)
}

/// The attention of one step: ragged over the packed prompts, or paged
/// with one query per sequence.
fn attend(q: Tensor, kv: &PagedKv, tables: Tensor, step: &Step, prefill: bool, opts: &ServeOptions) -> Tensor {
    if prefill {
        ragged_paged_attention_with(q, kv, tables, step.kv_lens, step.cu_q_lens, *opts)
    } else {
        paged_attention_with(q, kv, tables, step.kv_lens, *opts)
    }
}

/// The logits `[S, VOCAB]` of one whole sequence `tokens: s32 [S]`,
/// without a cache: causal attention over all its tokens.
#[cpu_kernel]
fn full_forward(p: Model, tokens: Tensor) -> Tensor {
    let s = tokens.dim(0) as isize;
    let positions = Tensor::iota([tokens.dim(0)], 0, S32);
    let mut x = p.embedding.take(tokens, 0);
    // [S, H, D] -> [1, H, S, D]
    let heads = |y: Tensor, h: usize| y.transpose(&[1, 0, 2]).reshape(&[1, h as isize, s, HEAD_DIM as isize]);
    for w in &p.blocks {
        let (q, k, v) = qkv(w, x, positions);
        let causal = FlashOptions::new().causal(true);
        let (q, k, v) = (heads(q, HEADS), heads(k, KV_HEADS), heads(v, KV_HEADS));
        let (o, _) = attention_reference_with(q, k, v, &AttentionExtras::default(), causal);
        x = finish_block(w, x, o.reshape(&[HEADS as isize, s, HEAD_DIM as isize]).transpose(&[1, 0, 2]));
    }
    rms_norm(x, p.final_norm, 1e-5).matmul(p.embedding.t())
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
    let params = tree::to_device(&dev, &init_model(&mut rng)?)?;

    let prompt_lens = [7usize, 19, 33, 12];
    let b = prompt_lens.len();
    let prompts: Vec<Vec<i32>> =
        prompt_lens.iter().map(|&n| (0..n).map(|_| (rng.next() % VOCAB as u64) as i32).collect()).collect();
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
    let tables = pool.block_tables(&seqs, width)?;
    let pool_spec = TensorSpec::new(vec![LAYERS * POOL, PAGE, KV_HEADS, HEAD_DIM], F32);
    let mut cache =
        tree::to_device(&dev, &Cache { k: HostTensor::zeros(pool_spec.clone()), v: HostTensor::zeros(pool_spec) })?;

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
    // One step: its small inputs copied in, the cache donated and returned.
    let mut run_step = |tokens: Vec<i32>,
                        positions: Vec<i32>,
                        kv_lens: &[i32],
                        cu: Vec<i32>,
                        prefill: bool|
     -> tessel::Result<DeviceBuffer> {
        let step = Step {
            tokens: dev.to_device(&s32(tokens)?)?,
            positions: dev.to_device(&s32(positions)?)?,
            tables: dev.to_device(&tables)?,
            kv_lens: dev.to_device(&s32(kv_lens.to_vec())?)?,
            cu_q_lens: dev.to_device(&s32(cu)?)?,
        };
        let (next, logits) = cached_step::call(&dev, &params, &cache, &step, prefill)?;
        cache = next;
        Ok(logits)
    };
    let start = Instant::now();
    let logits = run_step(tokens, positions, &kv_lens, cu.clone(), true)?;
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
        let logits = run_step(next.clone(), positions, &kv_lens, decode_cu.clone(), false)?;
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
    let mut max_diff = 0f32;
    for s in 0..b {
        let mut seq = prompts[s].clone();
        seq.extend(&generated[s]);
        let seq_t = dev.to_device(&s32(seq.clone())?)?;
        let logits = full_forward::call(&dev, &params, &seq_t)?.to_host()?.to_vec::<f32>()?;
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
        println!("sequence {s}: prompt {} tokens, generated {} ...", prompt_lens[s], head.join(" "));
    }
    if max_diff >= 1e-3 {
        eprintln!("the cached logits differ from the recomputation by {max_diff}");
        std::process::exit(1);
    }
    Ok(())
}
