//! Causal flash attention against the whole-tensor reference, on the CPU
//! plugin: B = 1, H = 8, D = 64, f32, at S = 2048 and S = 8192.
//!
//! `cargo bench --bench attention` profiles both kernels at each length
//! (medians of several runs on device-resident arguments) and prints the
//! median times, their ratio, and the compiled memory statistics (peak and
//! temporary bytes) beside the targets: flash at least 3× faster at 2048
//! and 5× at 8192, with at most 64 MiB of temporaries at 8192.
//!
//! The reference at S = 8192 materializes `[1, 8, 8192, 8192]` f32 logits
//! (about 4 GiB of temporaries) and takes seconds per run; pass
//! `--reference-max=4096` to measure it only up to that length.
//! `--blocks=BQxBK` overrides the flash block sizes, `--lengths=2048,4096`
//! the sequence lengths.

use tessel::kernels::attention::{attention_reference, flash_attention, FlashOptions};
use tessel::prelude::*;
use tessel::profile::{Profile, ProfileOptions};

const MIB: f64 = 1024.0 * 1024.0;

fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::args().find_map(|a| a.strip_prefix(name).and_then(|v| v.parse().ok()))
}

fn input(s: usize, salt: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new([1, 8, s, 64], F32), |i| {
        ((i * (2 * salt + 7)) % 101) as f64 / 101.0 - 0.5
    })
}

fn memory(p: &Profile) -> (f64, f64) {
    p.memory
        .as_ref()
        .map(|m| (m.peak_bytes as f64 / MIB, m.temp_bytes as f64 / MIB))
        .unwrap_or((f64::NAN, f64::NAN))
}

fn row(s: usize, name: &str, p: &Profile, ratio: Option<f64>) {
    let (peak, temp) = memory(p);
    let ratio = ratio.map_or("—".to_string(), |r| format!("{r:.2}× faster"));
    println!(
        "| {s:>5} | {name:<28} | {:>10.1} ms | {:>14} | {:>9.1} MiB | {:>9.1} MiB | {:>6.2} s |",
        p.run.median * 1e3,
        ratio,
        peak,
        temp,
        p.compile_seconds
    );
}

fn main() -> tessel::Result<()> {
    let dev = Device::cpu()?;
    let reference_max: usize = arg("--reference-max=").unwrap_or(8192);
    let (bq, bk) = arg::<String>("--blocks=")
        .and_then(|b| {
            let (a, c) = b.split_once('x')?;
            Some((a.parse().ok()?, c.parse().ok()?))
        })
        .unwrap_or((
            FlashOptions::default().block_q,
            FlashOptions::default().block_kv,
        ));
    println!("causal attention, B=1 H=8 D=64 f32, CPU plugin; flash blocks {bq} x {bk}");
    println!(
        "| {:>5} | {:<28} | {:>13} | {:>14} | {:>13} | {:>13} | {:>8} |",
        "S", "kernel", "median", "vs reference", "peak", "temp", "compile"
    );
    println!("|------:|:-----------------------------|--------------:|---------------:|--------------:|--------------:|---------:|");
    let mut verdicts = Vec::new();
    let lengths: Vec<usize> = arg::<String>("--lengths=")
        .map(|l| l.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![2048, 8192]);
    for s in lengths {
        let (q, k, v) = (input(s, 0), input(s, 1), input(s, 2));
        let options = FlashOptions::new().causal(true).block_sizes(bq, bk);
        let runs = if s <= 2048 {
            ProfileOptions { warmup: 2, runs: 9 }
        } else {
            ProfileOptions { warmup: 1, runs: 5 }
        };
        let flash = flash_attention::profile(&dev, runs, &q, &k, &v, options.clone())?;
        let reference = if s <= reference_max {
            let runs = ProfileOptions {
                warmup: 1,
                runs: runs.runs.min(5),
            };
            Some(attention_reference::profile(
                &dev, runs, &q, &k, &v, options,
            )?)
        } else {
            None
        };
        let ratio = reference.as_ref().map(|r| r.run.median / flash.run.median);
        row(s, "flash_attention", &flash, ratio);
        if let Some(r) = &reference {
            row(s, "attention_reference", r, None);
        }
        let target = if s <= 2048 { 3.0 } else { 5.0 };
        if let Some(r) = ratio {
            verdicts.push(format!(
                "S={s}: {r:.2}x (target >= {target}x: {})",
                if r >= target { "met" } else { "missed" }
            ));
        }
        if s == 8192 {
            let temp = memory(&flash).1;
            verdicts.push(format!(
                "S=8192: flash temp {temp:.1} MiB (target <= 64 MiB: {})",
                if temp <= 64.0 { "met" } else { "missed" }
            ));
        }
    }
    for v in verdicts {
        println!("{v}");
    }
    Ok(())
}
