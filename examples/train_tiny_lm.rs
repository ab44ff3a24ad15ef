//! Trains a small decoder-only transformer on a byte-level corpus.
//!
//! ```text
//! cargo run --release --example train_tiny_lm [-- --steps N] [--log-every K] [--devices D]
//! ```
//!
//! The model: byte embedding (tied with the output layer), two blocks of
//! RMSNorm → causal multi-head attention with RoPE (the library's flash
//! attention) → RMSNorm → SwiGLU MLP, a final RMSNorm, and the softmax
//! cross-entropy of the next byte. One training step is one kernel: the
//! loss and every parameter's gradient (`autodiff::value_and_grad`), global
//! norm clipping and an AdamW update of every parameter, all on the device;
//! the parameters and moments stay device-resident between steps.
//! `--devices D` runs the same step data-parallel: the batch is split over
//! D devices and XLA inserts the all-reduce of the gradients.
//!
//! The corpus is generated: sentences from a small grammar, so the model has
//! structure to learn (words, spacing, agreement of the article with the noun
//! class) and the loss falls well below half its first value.

use std::time::Instant;

use tessel::autodiff::value_and_grad;
use tessel::kernel::Kernel;
use tessel::kernels::activation::swiglu;
use tessel::kernels::attention::{flash_attention, FlashOptions};
use tessel::kernels::norm::rms_norm;
use tessel::kernels::rope::{rope, RopeLayout, RopeTable};
use tessel::kernels::train::{adamw, clip_by_global_norm, cross_entropy, AdamW};
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, ShardedBuffer};

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

/// Parameter names and shapes, in order.
fn parameter_shapes() -> Vec<(String, Vec<usize>)> {
    let mut p = vec![("embedding".to_string(), vec![VOCAB, DIM])];
    for l in 0..LAYERS {
        for (name, shape) in [
            ("attn_norm", vec![DIM]),
            ("wq", vec![DIM, DIM]),
            ("wk", vec![DIM, DIM]),
            ("wv", vec![DIM, DIM]),
            ("wo", vec![DIM, DIM]),
            ("mlp_norm", vec![DIM]),
            ("w_gate", vec![DIM, HIDDEN]),
            ("w_up", vec![DIM, HIDDEN]),
            ("w_down", vec![HIDDEN, DIM]),
        ] {
            p.push((format!("layer{l}.{name}"), shape));
        }
    }
    p.push(("final_norm".to_string(), vec![DIM]));
    p
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

/// Splits `[B, S, DIM]` into heads `[B, HEADS, S, DIM / HEADS]`.
fn heads(x: Tensor) -> Tensor {
    x.reshape(&[
        BATCH as isize,
        SEQ as isize,
        HEADS as isize,
        (DIM / HEADS) as isize,
    ])
    .transpose(&[0, 2, 1, 3])
}

/// The mean next-byte loss of `tokens` (`[BATCH, SEQ + 1]`) under `p`.
fn loss(p: &[Tensor], tokens: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
    let (b, s, d) = (BATCH as isize, SEQ as isize, DIM as isize);
    let inputs = tokens.slice_axis(1, 0, SEQ).reshape(&[b * s]);
    let targets = tokens.slice_axis(1, 1, SEQ + 1).reshape(&[b * s]);
    let emb = p[0];
    let mut x = emb.take(inputs, 0).reshape(&[b, s, d]);
    for l in 0..LAYERS {
        let w = &p[1 + 9 * l..1 + 9 * (l + 1)];
        let h = rms_norm(x, w[0], 1e-5);
        let q = rope(heads(h.matmul(w[1])), cos, sin, 0, RopeLayout::HalfSplit);
        let k = rope(heads(h.matmul(w[2])), cos, sin, 0, RopeLayout::HalfSplit);
        let v = heads(h.matmul(w[3]));
        let a = flash_attention(q, k, v, FlashOptions::new().causal(true));
        let a = a.transpose(&[0, 2, 1, 3]).reshape(&[b, s, d]);
        x = x + a.matmul(w[4]);
        let h = rms_norm(x, w[5], 1e-5);
        x = x + swiglu(h.matmul(w[6]), h.matmul(w[7])).matmul(w[8]);
    }
    let x = rms_norm(x, p[p.len() - 1], 1e-5).reshape(&[b * s, d]);
    cross_entropy(x.matmul(emb.t()), targets)
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
    let dev = if devices == env_device.device_count() {
        env_device
    } else {
        Device::cpu_with_devices(devices)?
    };
    let mesh = Mesh::new(&dev, &[("data", devices)])?;
    let replicated = PartitionSpec::replicated();
    let by_batch = PartitionSpec::new([Some("data"), None]);
    let put = |h: &HostTensor, p: &PartitionSpec| ShardedBuffer::from_host(&mesh, h, p);
    let shapes = parameter_shapes();
    let n = shapes.len();
    let mut rng = Rng(42);
    // The training state: parameters, first moments, second moments.
    let mut state = Vec::with_capacity(3 * n);
    for (_, shape) in &shapes {
        state.push(put(&init(shape, &mut rng), &replicated)?);
    }
    for _ in 0..2 {
        for (_, shape) in &shapes {
            let zeros = HostTensor::from_vec(vec![0f32; shape.iter().product()], shape.clone())?;
            state.push(put(&zeros, &replicated)?);
        }
    }
    let table = RopeTable::new(SEQ, DIM / HEADS, 10_000.0)?;
    let cos = put(table.cos(), &replicated)?;
    let sin = put(table.sin(), &replicated)?;

    // One step: args = params, m, v, tokens, step, lr, cos, sin;
    // results = loss, params', m', v'.
    let hp = AdamW {
        weight_decay: 0.0,
        ..AdamW::default()
    };
    let step_kernel = Kernel::new("train_step", move |a: &[Tensor]| {
        let (ps, ms, vs) = (&a[..n], &a[n..2 * n], &a[2 * n..3 * n]);
        let (tokens, step, lr, cos, sin) = (
            a[3 * n],
            a[3 * n + 1],
            a[3 * n + 2],
            a[3 * n + 3],
            a[3 * n + 4],
        );
        let (l, grads) = value_and_grad(|p: Vec<Tensor>| loss(&p, tokens, cos, sin), ps.to_vec());
        let (grads, _) = clip_by_global_norm(&grads, 1.0);
        let mut out = vec![l];
        let mut new_m = Vec::new();
        let mut new_v = Vec::new();
        for i in 0..n {
            let (p2, m2, v2) = adamw(ps[i], grads[i], ms[i], vs[i], step, lr, hp);
            out.push(p2);
            new_m.push(m2);
            new_v.push(v2);
        }
        out.extend(new_m);
        out.extend(new_v);
        out
    });
    let outputs = vec![replicated.clone(); 1 + 3 * n];

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
        let warmup = (step as f32 / 20.0).min(1.0);
        let lr = put(
            &HostTensor::from_vec(vec![3e-3f32 * warmup], [])?,
            &replicated,
        )?;
        let step_t = put(&HostTensor::from_vec(vec![step as i32], [])?, &replicated)?;
        let mut args: Vec<&ShardedBuffer> = state.iter().collect();
        args.extend([&tokens, &step_t, &lr, &cos, &sin]);
        let mut out = step_kernel.call_sharded(&mesh, &outputs, &args)?;
        state = out.split_off(1);
        let l = out[0].to_host()?.to_vec::<f32>()?[0];
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
