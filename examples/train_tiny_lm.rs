//! Trains a small decoder-only transformer on a byte-level corpus.
//!
//! ```text
//! cargo run --release --example train_tiny_lm [-- --steps N] [--log-every K] [--devices D]
//! ```
//!
//! The model: byte embedding (tied with the output layer), two blocks of
//! RMSNorm → causal multi-head attention with RoPE (the library's flash
//! attention) → RMSNorm → SwiGLU MLP, a final RMSNorm, and the softmax
//! cross-entropy of the next byte. The parameters are one `#[derive(Tree)]`
//! struct and the training state (parameters and optimizer state) another.
//! One training step is one kernel: the loss and every parameter's gradient
//! (`autodiff::value_and_grad` over the tree), global norm clipping and an
//! AdamW update (`tessel::kernels::optim`), all on the device; the state is
//! donated, so it stays device-resident and is updated in place.
//! `--devices D` runs the same step data-parallel: the batch is split over
//! D devices and XLA inserts the all-reduce of the gradients.
//!
//! The corpus is generated: sentences from a small grammar, so the model has
//! structure to learn (words, spacing, agreement of the article with the noun
//! class) and the loss falls well below half its first value.

use std::time::Instant;

use tessel::autodiff::value_and_grad;
use tessel::kernels::activation::swiglu;
use tessel::kernels::attention::{flash_attention, FlashOptions};
use tessel::kernels::norm::rms_norm;
use tessel::kernels::optim::{Optimizer, PathMask, Schedule, TrainState};
use tessel::kernels::rope::{rope, RopeLayout, RopeTable};
use tessel::kernels::train::cross_entropy;
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, ShardedBuffer};
use tessel::{Tree, TreeValue};

const VOCAB: usize = 256;
const DIM: usize = 64;
const HEADS: usize = 4;
const HIDDEN: usize = 128;
const LAYERS: usize = 2;
const SEQ: usize = 64;
const BATCH: usize = 16;

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
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
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
        let subject = animals[rng.below(animals.len())];
        let verb = verbs[rng.below(verbs.len())];
        let object = if rng.below(2) == 0 {
            format!("a {}", animals[rng.below(animals.len())])
        } else {
            format!("an {}", things[rng.below(things.len())])
        };
        let adj = adjs[rng.below(adjs.len())];
        text.push_str(&format!("the {adj} {subject} {verb} {object}. "));
    }
    text.into_bytes()[..len].to_vec()
}

/// One transformer block's parameters.
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

/// The model: written once, it holds traced tensors in the kernel and
/// sharded buffers on the mesh.
#[derive(Tree, Clone)]
struct Model<T = Tensor> {
    embedding: T,
    blocks: Vec<Block<T>>,
    final_norm: T,
}

/// The RoPE table's two halves.
#[derive(Tree)]
struct Rope<T = Tensor> {
    cos: T,
    sin: T,
}

fn init(shape: &[usize], rng: &mut Rng) -> HostTensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = if shape.len() == 1 {
        vec![1.0; n]
    } else {
        let scale = (3.0 / shape[0] as f32).sqrt();
        (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * scale).collect()
    };
    HostTensor::from_vec(values, shape.to_vec()).expect("shape matches")
}

fn init_model(rng: &mut Rng) -> Model<HostTensor> {
    let embedding = init(&[VOCAB, DIM], rng);
    let blocks = (0..LAYERS)
        .map(|_| Block {
            attn_norm: init(&[DIM], rng),
            wq: init(&[DIM, DIM], rng),
            wk: init(&[DIM, DIM], rng),
            wv: init(&[DIM, DIM], rng),
            wo: init(&[DIM, DIM], rng),
            mlp_norm: init(&[DIM], rng),
            w_gate: init(&[DIM, HIDDEN], rng),
            w_up: init(&[DIM, HIDDEN], rng),
            w_down: init(&[HIDDEN, DIM], rng),
        })
        .collect();
    Model { embedding, blocks, final_norm: init(&[DIM], rng) }
}

/// Splits `[B, S, DIM]` into heads `[B, HEADS, S, DIM / HEADS]`.
fn heads(x: Tensor) -> Tensor {
    x.reshape(&[BATCH as isize, SEQ as isize, HEADS as isize, (DIM / HEADS) as isize]).transpose(&[0, 2, 1, 3])
}

/// The mean next-byte loss of `tokens` (`[BATCH, SEQ + 1]`) under `p`.
fn loss(p: &Model, tokens: Tensor, rope_table: &Rope) -> Tensor {
    let (b, s, d) = (BATCH as isize, SEQ as isize, DIM as isize);
    let (cos, sin) = (rope_table.cos, rope_table.sin);
    let inputs = tokens.slice_axis(1, 0, SEQ).reshape(&[b * s]);
    let targets = tokens.slice_axis(1, 1, SEQ + 1).reshape(&[b * s]);
    let mut x = p.embedding.take(inputs, 0).reshape(&[b, s, d]);
    for w in &p.blocks {
        let h = rms_norm(x, w.attn_norm, 1e-5);
        let q = rope(heads(h.matmul(w.wq)), cos, sin, 0, RopeLayout::HalfSplit);
        let k = rope(heads(h.matmul(w.wk)), cos, sin, 0, RopeLayout::HalfSplit);
        let v = heads(h.matmul(w.wv));
        let a = flash_attention(q, k, v, FlashOptions::new().causal(true));
        let a = a.transpose(&[0, 2, 1, 3]).reshape(&[b, s, d]);
        x = x + a.matmul(w.wo);
        let h = rms_norm(x, w.mlp_norm, 1e-5);
        x = x + swiglu(h.matmul(w.w_gate), h.matmul(w.w_up)).matmul(w.w_down);
    }
    let x = rms_norm(x, p.final_norm, 1e-5).reshape(&[b * s, d]);
    cross_entropy(x.matmul(p.embedding.t()), targets)
}

/// One training step: loss and gradients of every parameter, clipping and
/// the optimizer's update, the whole state donated and updated in place.
#[cpu_kernel(donate(state))]
fn train_step(state: TrainState<Model>, tokens: Tensor, table: Rope, opt: Optimizer) -> (TrainState<Model>, Tensor) {
    let (l, grads) = value_and_grad(|p: Model| loss(&p, tokens, &table), state.params.clone());
    (state.apply_gradients(&opt, grads), l)
}

fn main() -> tessel::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let steps = flag("--steps", 300);
    let log_every = flag("--log-every", 25).max(1);

    // The device from TESSEL_DEVICE (`cpu:2` for two CPU devices), unless
    // --devices asks for another number of CPU devices.
    let env_device = Device::from_env()?;
    let devices = flag("--devices", env_device.device_count()).max(1);
    if !BATCH.is_multiple_of(devices) {
        eprintln!("--devices must divide the batch of {BATCH}");
        std::process::exit(2);
    }

    // The batch is split over the mesh axis "data"; parameters and moments
    // are replicated. XLA partitions the step and inserts the all-reduce of
    // the gradients (with one device, the mesh is that device).
    let dev = if devices == env_device.device_count() { env_device } else { Device::cpu_with_devices(devices)? };
    let mesh = Mesh::new(&dev, &[("data", devices)])?;
    let replicated = PartitionSpec::replicated();
    let by_batch = PartitionSpec::new([Some("data"), None]);
    let put = |h: &HostTensor, p: &PartitionSpec| ShardedBuffer::from_host(&mesh, h, p);
    let place = |h: &HostTensor| put(h, &replicated);
    // AdamW without weight decay, the gradients clipped to norm 1, the rate
    // warmed up linearly to 3e-3 over 20 steps.
    let opt = Optimizer::adamw(Schedule::warmup_constant(3e-3, 20), 0.0, PathMask::All).clip_by_global_norm(1.0);
    let params = init_model(&mut Rng(42));
    let host_state = TrainState::create(params, &opt)?;
    let mut state = host_state.try_map_leaves(|_, h| place(h))?;
    let table = RopeTable::new(SEQ, DIM / HEADS, 10_000.0)?;
    let rope_table = Rope { cos: place(table.cos())?, sin: place(table.sin())? };

    let text = corpus(1 << 16);
    let mut data_rng = Rng(7);
    let mut first = None;
    let mut last = 0.0f32;
    let start = Instant::now();
    let mut window = Instant::now();
    for step in 1..=steps {
        let mut tokens = Vec::with_capacity(BATCH * (SEQ + 1));
        for _ in 0..BATCH {
            let at = data_rng.below(text.len() - SEQ - 1);
            tokens.extend(text[at..at + SEQ + 1].iter().map(|&b| i32::from(b)));
        }
        let tokens = put(&HostTensor::from_vec(tokens, [BATCH, SEQ + 1])?, &by_batch)?;
        // No output shardings given: every result (the new state, the loss) replicated.
        let (next, l) = train_step::call_sharded(&mesh, &[], &state, &tokens, &rope_table, opt.clone())?;
        state = next;
        let l = l.to_host()?.to_vec::<f32>()?[0];
        first.get_or_insert(l);
        last = l;
        if step % log_every == 0 || step == 1 {
            let steps_done = if step == 1 { 1 } else { log_every };
            let tps = (steps_done * BATCH * SEQ) as f64 / window.elapsed().as_secs_f64();
            println!("step {step} loss {l:.4} tokens/s {tps:.0}");
            window = Instant::now();
        }
    }
    let first = first.unwrap_or(last);
    println!(
        "first loss {first:.4} last loss {last:.4} ({:.1} s on {devices} device(s))",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
