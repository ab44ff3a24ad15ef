//! The decode step of paged attention against (a) gathering each
//! sequence's pages into a dense cache and running flash attention on it,
//! and (b) the memory bound: the bytes of K and V the step must read,
//! divided by this machine's copy bandwidth measured in the same run (on
//! every core, as the kernel runs).
//!
//! ```text
//! cargo bench --bench paged_attention [-- --context=4096 --pages=16,64 --runs=10 --keys=N --width=W --memory --autotune]
//! ```
//!
//! B=8 sequences, Hq=32, Hkv=8, D=128, f32, every sequence `--context`
//! tokens long, pages handed out round-robin (no sequence's pages are
//! contiguous). Times are the minimum of `--runs` runs on device-resident
//! arguments. `--keys=N` gathers about N keys' pages per step instead of
//! the default (`AUTO_PAGED_KEYS`, 512); `--memory` prints the compiled
//! step's temporaries; `--width=W` makes the block tables W times as wide
//! as the sequences need (gather + flash is then not timed). The "ragged"
//! column runs the same step through `ragged_paged_attention` (8 sequences
//! of one query each, the decode rows of a mixed batch). Each page size's
//! compile times are printed too. `--autotune` also lets autotuning choose
//! the pages per step (`KernelConfig::autotune`) and prints its choice and
//! that step's time, measured by `profile` (the tuned value is remembered
//! in the persistent cache: clear it with `tessel cache clear` to measure
//! again). The "checks" column is the cost of the metadata checks the
//! kernel runs by default (page ids, lengths: see `ServeOptions::unchecked`):
//! the checked step's time over the same step compiled unchecked, minus 1.

#[path = "attention_common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::Instant;

use tessel::kernels::attention::{flash_attention_with, AttentionExtras, FlashOptions};
use tessel::kernels::serving::{paged_attention, ragged_paged_attention, PagePool, ServeOptions};
use tessel::prelude::*;

const B: usize = 8;
const HQ: usize = 32;
const HKV: usize = 8;
const D: usize = 128;

/// Gathers every sequence's pages into `[B, Hkv, S, D]` (all sequences
/// `S = M · page` long), then flash attention of the last position.
#[tpu_kernel(precision = "highest")]
fn gather_then_flash(q: Tensor, k_pages: Tensor, v_pages: Tensor, tables: Tensor) -> Tensor {
    let (b, m) = (tables.dim(0), tables.dim(1));
    let page = k_pages.dim(1);
    let s = (m * page) as isize;
    let dense = |p: Tensor| {
        p.take_with(tables, 0, TakeMode::PromiseInBounds)
            .reshape(&[b as isize, s, HKV as isize, D as isize])
            .transpose(&[0, 2, 1, 3])
    };
    let q4 = q.reshape(&[b as isize, HQ as isize, 1, D as isize]);
    let opts = FlashOptions::new()
        .causal(true)
        .q_offset(s as i64 - 1)
        .block_sizes(8, 512);
    let (o, _) = flash_attention_with(
        q4,
        dense(k_pages),
        dense(v_pages),
        &AttentionExtras::default(),
        opts,
    );
    o.reshape(&[b as isize, HQ as isize, D as isize])
}

fn min_time(runs: usize, mut f: impl FnMut() -> tessel::Result<f64>) -> tessel::Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        best = best.min(f()?);
    }
    Ok(best)
}

/// The host's copy bandwidth in bytes per second (bytes read plus bytes
/// written): the fastest of `runs` copies of a 256 MiB buffer, split into
/// `threads` equal parts copied at once, one thread each.
fn copy_bandwidth(runs: usize, threads: usize) -> f64 {
    let n = 64 << 20;
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dst = vec![0f32; n];
    let part = n.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        std::thread::scope(|s| {
            for (d, from) in dst.chunks_mut(part).zip(src.chunks(part)) {
                s.spawn(move || d.copy_from_slice(from));
            }
        });
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (n * 4) as f64 / best
}

fn main() -> tessel::Result<()> {
    let context: usize = common::arg("--context=").unwrap_or(4096);
    let runs: usize = common::arg("--runs=").unwrap_or(10);
    let pages: Vec<usize> = common::arg::<String>("--pages=")
        .map(|l| l.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![16, 64]);
    let dev = Device::cpu()?;
    // The bound uses every core, as the kernel does; one thread's rate is
    // printed beside it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one_thread = copy_bandwidth(runs, 1);
    let bandwidth = copy_bandwidth(runs, cores).max(one_thread);
    let kv_bytes = (2 * B * context * HKV * D * 4) as f64;
    let bound = kv_bytes / bandwidth;
    println!(
        "paged decode attention: B={B} Hq={HQ} Hkv={HKV} D={D} f32, context {context}; copy bandwidth \
         {:.1} GB/s on {cores} threads ({:.1} GB/s on one), K+V {:.0} MiB, memory bound {:.2} ms",
        bandwidth / 1e9,
        one_thread / 1e9,
        kv_bytes / (1 << 20) as f64,
        bound * 1e3
    );
    println!(
        "| page | paged_attention | ragged | gather + flash | gather / paged | paged / memory bound | checks |"
    );
    println!("|---|---|---|---|---|---|---|");
    for page in pages {
        let per_seq = context.div_ceil(page);
        let num = B * per_seq;
        let mut pool = PagePool::new(num, page);
        for len in (page..=context).step_by(page) {
            for s in 0..B as u64 {
                pool.reserve(s, len)?;
            }
        }
        let seqs: Vec<u64> = (0..B as u64).collect();
        // `--width=W`: block tables W times as wide as the sequences need
        // (a server's tables fit its longest context).
        let width: usize = common::arg("--width=").unwrap_or(1);
        let tables = dev.to_device(&pool.block_tables(&seqs, per_seq * width)?)?;
        let pages_t = |salt: usize| {
            HostTensor::from_fn(TensorSpec::new([num, page, HKV, D], F32), move |i| {
                ((i * (2 * salt + 7)) % 101) as f64 / 101.0 - 0.5
            })
        };
        let kp = dev.to_device(&pages_t(1))?;
        let vp = dev.to_device(&pages_t(2))?;
        let q = dev.to_device(&HostTensor::from_fn(
            TensorSpec::new([B, HQ, D], F32),
            |i| ((i * 13) % 17) as f64 / 17.0 - 0.5,
        ))?;
        let lens = dev.to_device(&HostTensor::from_vec(vec![context as i32; B], [B])?)?;
        // `--keys=N`: gather about N keys' pages per step (default
        // `AUTO_PAGED_KEYS`).
        let opts = match common::arg::<usize>("--keys=") {
            Some(keys) => ServeOptions::new().pages_per_block(keys.div_ceil(page)),
            None => ServeOptions::new(),
        };
        let compile_paged = |o: ServeOptions| {
            paged_attention::compile(
                &dev,
                q.spec(),
                kp.spec(),
                vp.spec(),
                tables.spec(),
                lens.spec(),
                o,
            )
        };
        let compile_start = std::time::Instant::now();
        let paged = compile_paged(opts)?;
        let t_compile_paged = compile_start.elapsed().as_secs_f64();
        let unchecked = compile_paged(opts.unchecked())?;
        let dense =
            gather_then_flash::compile(&dev, q.spec(), kp.spec(), vp.spec(), tables.spec())?;
        let cu = dev.to_device(&HostTensor::from_vec((0..=B as i32).collect(), [B + 1])?)?;
        let ragged_start = std::time::Instant::now();
        let ragged = ragged_paged_attention::compile(
            &dev,
            q.spec(),
            kp.spec(),
            vp.spec(),
            tables.spec(),
            lens.spec(),
            cu.spec(),
            opts,
        )?;
        let t_compile_ragged = ragged_start.elapsed().as_secs_f64();
        let args = [&q, &kp, &vp, &tables, &lens];
        // `profile` of the step on the same arguments, under `config`.
        let profile = |config: &KernelConfig, options: tessel::profile::ProfileOptions| {
            let h = |b: &DeviceBuffer| b.to_host();
            paged_attention::profile_with(
                config,
                &dev,
                options,
                &h(&q)?,
                &h(&kp)?,
                &h(&vp)?,
                &h(&tables)?,
                &h(&lens)?,
                opts,
            )
        };
        if std::env::args().any(|a| a == "--memory") {
            let prof = profile(
                &paged_attention::CONFIG,
                tessel::profile::ProfileOptions { warmup: 0, runs: 1 },
            )?;
            if let Some(m) = &prof.memory {
                println!(
                    "page {page}: temporaries {:.1} MiB, peak {:.1} MiB",
                    m.temp_bytes as f64 / (1 << 20) as f64,
                    m.peak_bytes as f64 / (1 << 20) as f64
                );
            }
        }
        if std::env::args().any(|a| a == "--autotune") {
            let prof = profile(
                &paged_attention::CONFIG.autotune(true),
                tessel::profile::ProfileOptions { warmup: 1, runs },
            )?;
            println!(
                "page {page}: autotuned {} ({:.2} ms, {:.2}x the memory bound)",
                prof.tuned.join(", "),
                prof.run.min * 1e3,
                prof.run.min / bound
            );
        }
        let t_paged = min_time(runs, || common::time(&paged, &args))?;
        let t_unchecked = min_time(runs, || common::time(&unchecked, &args))?;
        // Over a wider table, gather + flash would attend to the padding:
        // it is timed at the natural width only.
        let t_dense = if width == 1 {
            min_time(runs, || common::time(&dense, &args[..4]))?
        } else {
            f64::NAN
        };
        let ragged_args = [&q, &kp, &vp, &tables, &lens, &cu];
        let t_ragged = min_time(runs, || common::time(&ragged, &ragged_args))?;
        println!(
            "page {page}: compiled paged_attention in {t_compile_paged:.2} s, ragged_paged_attention in \
             {t_compile_ragged:.2} s"
        );
        println!(
            "| {page} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2}x | {:.2}x | {:+.1}% |",
            t_paged * 1e3,
            t_ragged * 1e3,
            t_dense * 1e3,
            t_dense / t_paged,
            t_paged / bound,
            (t_paged / t_unchecked - 1.0) * 100.0
        );
    }
    Ok(())
}
