//! The host interpreter's differential fuzzer: random well-typed graphs,
//! evaluated by the interpreter (`tessel::interp`) and run on the XLA CPU
//! plugin, for a given time. Each mismatch is shrunk and printed as a Rust
//! test that reproduces it; the last line is `N graphs, M mismatches`,
//! followed by the mismatching seeds (rerun one with `--seed S --seconds 1`).
//!
//! ```text
//! cargo run --release --example fuzz -- --seconds 30 [--seed S]
//! ```
//!
//! With `--grad`, it fuzzes reverse-mode autodiff instead: each seed's
//! program, made all-f64, has its pullback compared with central
//! differences on the plugin (`tessel_testing::fuzz::grad`); the last line
//! is `N programs checked, K skipped, M mismatches`, with the reasons for
//! skipping above it.
//!
//! With `--vmap`, it fuzzes `vmap` instead: each seed's program runs over a
//! small batch with `vmap` and as a loop over the examples
//! (`tessel_testing::fuzz::check_vmap`); the last line is `N programs, M
//! mismatches`.
//!
//! Exits with 1 when there is a mismatch, 2 on a bad argument.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tessel_testing::fuzz::{self, grad, Config};

const USAGE: &str = "usage: fuzz [--seconds N] [--seed S] [--grad | --vmap]
  --seconds N  how long to run (default 10; batches already started finish)
  --seed S     the first graph's seed (default: from the clock); graphs S, S+1, ... run
  --grad       check gradients against central differences instead
  --vmap       check vmap against a loop over examples instead";

/// What the command line asks for.
struct Args {
    seconds: u64,
    seed: Option<u64>,
    grad: bool,
    vmap: bool,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args { seconds: 10, seed: None, grad: false, vmap: false };
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name} needs a whole number, got `{v}`"))
        };
        match a.as_str() {
            "--seconds" => args.seconds = number("--seconds")?,
            "--seed" => args.seed = Some(number("--seed")?),
            "--grad" => args.grad = true,
            "--vmap" => args.vmap = true,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs().wrapping_mul(1_000_003))
    });
    println!("seeds from {seed}, for {} s", args.seconds);
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let config = Config { batch: 25, ..Config::default() };
    let seeds = (0u64..).map(move |i| seed.wrapping_add(i));
    if args.grad {
        return grads(seeds, &config, deadline);
    }
    if args.vmap {
        return vmaps(seeds, deadline);
    }
    let report = fuzz::run(seeds, &config, Some(deadline), &|f| {
        println!("\n// seed {}: {}\n{}", f.seed, f.message, f.rust);
    });
    for (seed, why) in &report.invalid {
        println!("\n// seed {seed}: the generated program does not trace: {why}");
    }
    let mut failed: Vec<u64> = report.findings.iter().map(|f| f.seed).collect();
    failed.extend(report.invalid.iter().map(|(s, _)| *s));
    failed.sort_unstable();
    println!("{} graphs, {} mismatches{}", report.graphs, failed.len(), seed_list(&failed));
    if !failed.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The gradient fuzzer's run.
fn grads(seeds: impl Iterator<Item = u64> + Send, config: &Config, deadline: Instant) -> ExitCode {
    let report = grad::run_grads(seeds, config, Some(deadline), &|case, message| {
        let note = format!("Gradient fuzzer, seed {}: {}", case.seed, first_line(message));
        let rust = fuzz::to_rust_grad(case, &format!("grad_fuzz_{}", case.seed), &note);
        println!("\n// seed {}: {message}\n{rust}", case.seed);
    });
    let skipped: usize = report.skipped.values().sum();
    for (why, n) in &report.skipped {
        println!("skipped {n}: {why}");
    }
    let failed: Vec<u64> = report.mismatches.iter().map(|(s, _)| *s).collect();
    println!(
        "{} programs checked, {skipped} skipped, {} mismatches{}",
        report.checked,
        failed.len(),
        seed_list(&failed)
    );
    if report.mismatches.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The `vmap` fuzzer's run, one program at a time.
fn vmaps(seeds: impl Iterator<Item = u64>, deadline: Instant) -> ExitCode {
    let (mut programs, mut failed) = (0, Vec::new());
    for seed in seeds {
        if Instant::now() >= deadline {
            break;
        }
        let c = fuzz::vmap_case(seed);
        programs += 1;
        match fuzz::check_vmap(&c) {
            fuzz::Verdict::Agree => {}
            fuzz::Verdict::Invalid(m) | fuzz::Verdict::Mismatch(m) => {
                let note = format!("vmap over {} examples, batch axes {:?}", c.size, c.axes);
                println!("\n// seed {seed}: {m}\n{}", fuzz::to_rust(&c.case, &format!("vmap_fuzz_{seed}"), &note));
                failed.push(seed);
            }
        }
    }
    println!("{programs} programs, {} mismatches{}", failed.len(), seed_list(&failed));
    match failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

/// ` (seeds A, B, ..)` after the count on the last line, so that a run
/// whose output was cut still names the seeds to rerun; empty for none.
fn seed_list(seeds: &[u64]) -> String {
    if seeds.is_empty() {
        return String::new();
    }
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    format!(" (seeds {})", list.join(", "))
}

/// The first line of `s`.
fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
