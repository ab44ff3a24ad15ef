//! A small GPT, end to end: train it on a generated corpus, save a
//! checkpoint, resume from it on a fresh device, and generate text from a
//! paged KV cache.
//!
//! ```text
//! cargo run --release --example gpt [-- --steps N]
//! ```
//!
//! The model is one `#[derive(Tree)]` struct written once: it holds traced
//! tensors inside the kernels, device buffers between calls and host tensors
//! in the checkpoint. One training step is one kernel — the loss, every
//! gradient (`value_and_grad` over the tree), clipping and AdamW with a
//! warmup-cosine schedule and no decay on the norms — and the whole training
//! state is donated, so it is updated in place.

use std::time::Instant;

use tessel::kernels::prelude::*;
use tessel::prelude::*;

const VOCAB: usize = 256;
const DIM: usize = 64;
const HEADS: usize = 4;
const HEAD_DIM: usize = DIM / HEADS;
const HIDDEN: usize = 128;
const LAYERS: usize = 2;
const SEQ: usize = 64;
const BATCH: usize = 16;
/// Pages of the KV cache per layer, and tokens per page.
const POOL: usize = 16;
const PAGE: usize = 16;
/// Steps trained again after resuming from the checkpoint.
const RESUMED: usize = 10;

#[derive(Tree, Clone)]
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

/// The KV cache: a pool of pages per layer, all read through the batch's one block table.
#[derive(Tree, Clone)]
struct Cache<T = Tensor>(Vec<PagedKv<T>>);

#[derive(Tree, Clone)]
struct Gpt<T = Tensor> {
    embed: T,
    blocks: Vec<Block<T>>,
    final_norm: T,
}

/// Queries, keys and values `[.., HEADS, HEAD_DIM]` of the normed `h: [.., DIM]`.
fn qkv(b: &Block, h: Tensor, pos: Tensor) -> (Tensor, Tensor, Tensor) {
    let split = |y: Tensor| y.unflatten(-1, &[HEADS, HEAD_DIM]);
    let rope = |y: Tensor| rope_positions(split(y), pos, 10_000.0, RopeLayout::HalfSplit);
    (rope(h.matmul(b.wq)), rope(h.matmul(b.wk)), split(h.matmul(b.wv)))
}

/// The residual stream after attention output `o: [.., HEADS, HEAD_DIM]` and the MLP.
fn finish_block(b: &Block, x: Tensor, o: Tensor) -> Tensor {
    let x = x + o.flatten(-2, -1).matmul(b.wo);
    let h = rms_norm(x, b.mlp_norm, 1e-5);
    x + swiglu(h.matmul(b.w_gate), h.matmul(b.w_up)).matmul(b.w_down)
}

fn logits(p: &Gpt, x: Tensor) -> Tensor {
    rms_norm(x, p.final_norm, 1e-5).matmul(p.embed.t())
}

/// The mean next-token loss of `tokens: s32 [BATCH, SEQ + 1]`.
fn loss(p: &Gpt, tokens: Tensor) -> Tensor {
    let (inputs, targets) = (tokens.slice_axis(1, 0, SEQ), tokens.slice_axis(1, 1, SEQ + 1));
    let pos = Tensor::iota([BATCH, SEQ], 1, S32);
    // [B, S, H, D] <-> flash attention's [B, H, S, D].
    let heads = |y: Tensor| y.transpose(&[0, 2, 1, 3]);
    let mut x = p.embed.take(inputs, 0);
    for blk in &p.blocks {
        let (q, k, v) = qkv(blk, rms_norm(x, blk.attn_norm, 1e-5), pos);
        let o = flash_attention(heads(q), heads(k), heads(v), FlashOptions::new().causal(true));
        x = finish_block(blk, x, heads(o));
    }
    cross_entropy(logits(p, x), targets)
}

#[cpu_kernel(donate(state))]
fn train_step(state: TrainState<Gpt>, tokens: Tensor, opt: Optimizer) -> (TrainState<Gpt>, Tensor) {
    let (l, grads) = value_and_grad(|p: Gpt| loss(&p, tokens), state.params.clone());
    (state.apply_gradients(&opt, grads), l)
}

/// One serving step over the paged cache: the prompts packed in one ragged
/// batch (`prefill`) or one token per sequence. Returns the cache and the
/// next step's batch, its tokens chosen greedily: the decode loop's
/// metadata never leaves the device.
#[cpu_kernel(donate(kv))]
fn serve_step(p: Gpt, mut kv: Cache, tables: Tensor, batch: RaggedBatch, prefill: bool) -> (Cache, RaggedBatch) {
    let mut x = p.embed.take(batch.tokens, 0);
    for (kv, blk) in kv.0.iter_mut().zip(&p.blocks) {
        let (q, k, v) = qkv(blk, rms_norm(x, blk.attn_norm, 1e-5), batch.positions);
        *kv = kv_cache_update_with(kv, k, v, tables, batch.kv_lens, batch.cu_q_lens);
        let o = if prefill {
            prefill_attention(q, k, v, &batch, ServeOptions::new())
        } else {
            paged_attention_with(q, kv, tables, batch.kv_lens, ServeOptions::new())
        };
        x = finish_block(blk, x, o);
    }
    let next = logits(&p, batch.last_rows(x)).argmax(-1);
    (kv, batch.decode_next(next))
}

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn matrix(&mut self, rows: usize, cols: usize) -> HostTensor {
        let scale = (3.0 / rows as f64).sqrt();
        let spec = TensorSpec::new([rows, cols], F32);
        HostTensor::from_fn(spec, |_| ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale)
    }
}

fn init(rng: &mut Rng) -> Gpt<HostTensor> {
    let ones = || HostTensor::from_fn(TensorSpec::new([DIM], F32), |_| 1.0);
    let block = |rng: &mut Rng| Block {
        attn_norm: ones(),
        wq: rng.matrix(DIM, DIM),
        wk: rng.matrix(DIM, DIM),
        wv: rng.matrix(DIM, DIM),
        wo: rng.matrix(DIM, DIM),
        mlp_norm: ones(),
        w_gate: rng.matrix(DIM, HIDDEN),
        w_up: rng.matrix(DIM, HIDDEN),
        w_down: rng.matrix(HIDDEN, DIM),
    };
    Gpt { embed: rng.matrix(VOCAB, DIM), blocks: (0..LAYERS).map(|_| block(rng)).collect(), final_norm: ones() }
}

/// Sentences from a small grammar, as bytes.
fn corpus(len: usize) -> Vec<u8> {
    let animals = ["cat", "dog", "owl", "fox", "hen", "bee"];
    let things = ["apple", "egg", "idea", "orange", "umbrella"];
    let verbs = ["sees", "likes", "finds", "eats", "wants", "keeps"];
    let adjs = ["small", "red", "quiet", "happy", "old"];
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut text = String::new();
    while text.len() < len {
        let pick = |rng: &mut Rng, words: &[&'static str]| words[rng.below(words.len())];
        let (adj, subject, verb) = (pick(&mut rng, &adjs), pick(&mut rng, &animals), pick(&mut rng, &verbs));
        let (a, object) =
            if rng.below(2) == 0 { ("a", pick(&mut rng, &animals)) } else { ("an", pick(&mut rng, &things)) };
        text.push_str(&format!("the {adj} {subject} {verb} {a} {object}. "));
    }
    text.into_bytes()[..len].to_vec()
}

type DeviceState = TrainState<Gpt<DeviceBuffer>, DeviceBuffer>;

/// Trains on `data` from `state`; returns the losses.
fn train(dev: &Device, state: &mut DeviceState, data: &[HostTensor], opt: &Optimizer) -> Result<Vec<f32>> {
    let mut losses = Vec::new();
    for tokens in data {
        let (next, l) = train_step::call(dev, state, &dev.to_device(tokens)?, opt.clone())?;
        *state = next;
        losses.push(l.to_host()?.to_vec::<f32>()?[0]);
    }
    Ok(losses)
}

/// Greedy generation of `new` bytes after each prompt, from the paged cache.
fn generate(dev: &Device, params: &Gpt<DeviceBuffer>, prompts: &[&str], new: usize) -> Result<Vec<String>> {
    let ids: Vec<Vec<i32>> = prompts.iter().map(|p| p.bytes().map(i32::from).collect()).collect();
    // Sequence i holds pages for its prompt and the `new` tokens after it.
    let lens = ids.iter().map(|p| p.len() + new);
    let tables = dev.to_device(&PagePool::new(POOL, PAGE).reserve_batch((0..).zip(lens))?)?;
    let mut cache = tree::to_device(dev, &Cache(vec![PagedKv::zeros(POOL, PAGE, HEADS, HEAD_DIM, F32); LAYERS]))?;
    let mut batch = tree::to_device(dev, &RaggedBatch::prefill(&ids)?)?;
    let mut out: Vec<String> = prompts.iter().map(|p| p.to_string()).collect();
    for step in 0..new {
        (cache, batch) = serve_step::call(dev, params, &cache, &tables, &batch, step == 0)?;
        let next = batch.tokens.to_host()?.to_vec::<i32>()?;
        out.iter_mut().zip(next).for_each(|(text, t)| text.push(t as u8 as char));
    }
    Ok(out)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let steps = args.iter().position(|a| a == "--steps");
    let steps = steps.and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(300usize).max(RESUMED + 1);
    let (text, mut rng) = (corpus(1 << 16), Rng(7));
    let window = |a: usize| text[a..a + SEQ + 1].iter().map(|&c| i32::from(c));
    let tokens = |rng: &mut Rng| (0..BATCH).flat_map(|_| window(rng.below(text.len() - SEQ - 1))).collect();
    let batches =
        (0..steps).map(|_| HostTensor::from_vec(tokens(&mut rng), [BATCH, SEQ + 1])).collect::<Result<Vec<_>>>()?;
    let schedule = Schedule::warmup_cosine(3e-3, 20, steps as u64, 3e-4);
    let opt = Optimizer::adamw(schedule, 0.01, PathMask::except(["*norm*"])).clip_by_global_norm(1.0);

    // Train, saving a checkpoint `RESUMED` steps before the end.
    let dev = Device::from_env()?;
    let params = init(&mut Rng(42));
    let mut state = tree::to_device(&dev, &TrainState::create(params, &opt)?)?;
    let (first, rest) = batches.split_at(steps - RESUMED);
    let start = Instant::now();
    let losses = train(&dev, &mut state, first, &opt)?;
    let path = std::env::temp_dir().join(format!("tessel-gpt-{}.safetensors", std::process::id()));
    let count = tree::save(&path, &tree::to_host(&state)?)?;
    let tail = train(&dev, &mut state, rest, &opt)?;
    let seconds = start.elapsed().as_secs_f64();
    for (i, l) in losses.iter().chain(&tail).enumerate().filter(|(i, _)| i % 50 == 0 || *i == steps - 1) {
        println!("step {:>4} loss {l:.4}", i + 1);
    }
    println!("train: {:.0} tokens/s", (steps * BATCH * SEQ) as f64 / seconds);
    // The donated state is updated in place: its buffers are the results'.
    let exe = train_step::compile_for(&dev, &state, &dev.to_device(&batches[0])?, opt.clone())?;
    println!("train step memory: {}", exe.memory_stats()?);

    // Resume on a fresh device from the checkpoint: the same losses, bit for bit.
    let fresh = Device::cpu()?;
    let mut resumed = tree::to_device(&fresh, &tree::load(&path, &state)?)?;
    let again = train(&fresh, &mut resumed, rest, &opt)?;
    // Equal f32s: the same bits, for these finite, positive losses.
    println!("resumed loss matches: {}", again == tail);
    println!("checkpoint: {} ({count} tensors)", path.display());

    // Generate from the resumed parameters with the paged cache (the first
    // run compiles the prefill and decode programs; the second is timed).
    generate(&fresh, &resumed.params, &["the small ", "an "], 48)?;
    let start = Instant::now();
    let texts = generate(&fresh, &resumed.params, &["the small ", "an "], 48)?;
    println!("decode: {:.0} tokens/s", (2 * 48) as f64 / start.elapsed().as_secs_f64());
    texts.iter().for_each(|t| println!("> {t}"));
    std::fs::remove_file(&path).ok();
    Ok(())
}
