//! The flash attention backward (FlashAttention-2, the `custom_vjp` of the
//! forward) on the CPU plugin: causal, B = 1, H = 8, D = 64, f32, at
//! S = 2048 and S = 8192.
//!
//! `cargo bench --bench attention_backward` compiles the forward
//! (`flash_attention`), the backward alone (`flash_attention_backward`:
//! dq, dk, dv from the saved output and logsumexp) and forward plus
//! backward (`flash_attention_vjp`, what `jax.grad` computes), and times
//! each as the minimum of N runs on device-resident arguments. It prints
//! the backward/forward ratio (target at most 2.5), the temporaries from
//! the compiled programs' memory statistics (target at most 64 MiB at 8192
//! for the backward) and, with
//! `--jax=PYTHON` (a Python with `jax` installed), the same measurement of
//! `jax.grad` of a hand-written JAX flash attention (a `fori_loop` over key
//! blocks; `benches/jax_flash_backward.py`) run right after on the same
//! machine, and the ratio of the two (target at least 1: tessel as fast).
//! `--lengths=2048,4096` and `--blocks=BQxBK` (default 256 × 256) as in
//! the forward benchmark.

use tessel::kernels::attention::{
    flash_attention, flash_attention_backward, flash_attention_lse, FlashOptions,
};
use tessel::kernels::grads::flash_attention_vjp;
use tessel::prelude::*;

mod attention_common;
use attention_common::{arg, blocks, input, lengths, time};

const MIB: f64 = 1024.0 * 1024.0;

/// The minimum over `runs` timed runs (after one untimed), in ms.
fn best(exe: &Executable, args: &[&DeviceBuffer], runs: usize) -> tessel::Result<f64> {
    time(exe, args)?;
    let mut m = f64::INFINITY;
    for _ in 0..runs {
        m = m.min(time(exe, args)? * 1e3);
    }
    Ok(m)
}

/// `S -> (forward ms, backward ms)` from the JAX script.
fn jax_times(python: &str, lengths: &[usize], block: usize) -> Vec<(usize, f64, f64)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/jax_flash_backward.py");
    let list: Vec<String> = lengths.iter().map(|s| s.to_string()).collect();
    let out = std::process::Command::new(python)
        .args([script, &list.join(","), &block.to_string()])
        .output();
    let Ok(out) = out else {
        eprintln!("could not run {python}");
        return Vec::new();
    };
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[..] {
                ["S", s, "fwd_ms", f, "bwd_ms", b] => {
                    Some((s.parse().ok()?, f.parse().ok()?, b.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let (bq, bk) = blocks();
    let lengths = lengths();
    println!("causal flash attention backward, B=1 H=8 D=64 f32, CPU plugin; blocks {bq} x {bk}");
    println!(
        "| S | forward ms | backward alone ms | bwd/fwd | bwd temp MiB | forward+backward (vjp) ms | vjp temp MiB |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|");
    let mut ours = Vec::new();
    for &s in &lengths {
        let (q, k, v, dout) = (input(s, 0), input(s, 1), input(s, 2), input(s, 3));
        let o = FlashOptions::new().causal(true).block_sizes(bq, bk);
        let runs = if s <= 2048 { 7 } else { 3 };
        let dev_q = dev.to_device(&q)?;
        let (dev_k, dev_v, dev_do) = (
            dev.to_device(&k)?,
            dev.to_device(&v)?,
            dev.to_device(&dout)?,
        );
        // The forward's output and logsumexp, for the backward alone.
        let (out, lse) = flash_attention_lse::run(&dev, &q, &k, &v, o)?;
        let dlse = HostTensor::from_fn(lse.spec().clone(), |_| 0.0);
        let (dev_out, dev_lse, dev_dlse) = (
            dev.to_device(&out)?,
            dev.to_device(&lse)?,
            dev.to_device(&dlse)?,
        );
        let fwd = flash_attention::compile(&dev, q.spec(), k.spec(), v.spec(), o)?;
        let alone = flash_attention_backward::compile(
            &dev,
            q.spec(),
            k.spec(),
            v.spec(),
            out.spec(),
            lse.spec(),
            dout.spec(),
            dlse.spec(),
            o,
        )?;
        let vjp = flash_attention_vjp::compile(&dev, q.spec(), k.spec(), v.spec(), dout.spec(), o)?;
        let temp = |e: &Executable| {
            e.memory_stats()
                .map_or(f64::NAN, |m| m.temp_bytes as f64 / MIB)
        };
        let tf = best(&fwd, &[&dev_q, &dev_k, &dev_v], runs)?;
        let ta = best(
            &alone,
            &[
                &dev_q, &dev_k, &dev_v, &dev_out, &dev_lse, &dev_do, &dev_dlse,
            ],
            runs,
        )?;
        let tv = best(&vjp, &[&dev_q, &dev_k, &dev_v, &dev_do], runs)?;
        println!(
            "| {s} | {tf:.1} | {ta:.1} | {:.2} | {:.1} | {tv:.1} | {:.1} |",
            ta / tf,
            temp(&alone),
            temp(&vjp)
        );
        ours.push((s, tf, tv));
    }
    if let Some(python) = arg::<String>("--jax=") {
        println!();
        println!("| S | jax fwd ms | jax.grad ms | tessel vjp ms | jax.grad / tessel vjp |");
        println!("|--:|--:|--:|--:|--:|");
        for (s, jf, jb) in jax_times(&python, &lengths, bk) {
            if let Some(&(_, _, tb)) = ours.iter().find(|o| o.0 == s) {
                println!("| {s} | {jf:.1} | {jb:.1} | {tb:.1} | {:.2} |", jb / tb);
            }
        }
    }
    Ok(())
}
