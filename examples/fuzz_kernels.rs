//! The kernel-body fuzzer, for longer runs than the test suite's fixed
//! batch (`tests/kernel_fuzz.rs`): batch after batch of random kernels
//! (`tessel_testing::kernel_fuzz`) is written into a scratch crate that
//! depends on this workspace's `tessel`, built with `cargo` and run; each
//! kernel runs on XLA and on the interpreter and the results are compared.
//!
//! ```text
//! cargo run --example fuzz_kernels -- --seconds 60 [--seed 7] [--batch 16] [--dir PATH]
//! ```
//!
//! The scratch crate lives in the system's temporary directory (or
//! `--dir`) with its own target directory, kept between runs: the first
//! run builds tessel there once (minutes), later batches only rebuild the
//! generated kernels. A new batch starts while time is left. A kernel that
//! fails to compile is a bug of the generator or of the macros: it is
//! reported with its source and its errors, counted as a mismatch, and left
//! out of the batch so the others still run. Ends with one line, `N
//! kernels, M mismatches`; the exit status is 1 when there is a mismatch.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use tessel_testing::kernel_fuzz::{kernels, source_without};

/// The scratch crate's main: runs every case and prints one line each.
const MAIN: &str = r#"mod generated;

fn main() {
    let seed: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (first, second) = tessel_testing::kernel_fuzz::devices().expect("the devices");
    for (i, case) in generated::CASES.iter().enumerate() {
        match tessel_testing::kernel_fuzz::compare(case, seed + i as u64, &first, &second) {
            Ok(()) => println!("ok {}", case.name),
            Err(m) => println!("mismatch {} {}", case.name, m.replace('\n', " ")),
        }
    }
}
"#;

struct Options {
    seconds: u64,
    seed: u64,
    batch: usize,
    dir: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut o = Options { seconds: 60, seed: 1, batch: 16, dir: std::env::temp_dir().join("tessel-kernel-fuzz") };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--seconds" => o.seconds = number()?,
            "--seed" => o.seed = number()?,
            "--batch" => o.batch = number()?.max(1) as usize,
            "--dir" => o.dir = PathBuf::from(value),
            _ => return Err(format!("unknown option {flag} (--seconds, --seed, --batch, --dir)")),
        }
    }
    Ok(o)
}

/// Writes the scratch crate's manifest and main (once; unchanged files are
/// left alone so cargo does not rebuild for nothing).
fn scaffold(dir: &Path) -> std::io::Result<()> {
    let root = env!("CARGO_MANIFEST_DIR");
    let manifest = format!(
        "[package]\nname = \"tessel-kernel-fuzz-batch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\ntessel = {{ path = {root:?} }}\ntessel-testing = {{ path = {:?} }}\n\n\
         [profile.dev]\ndebug = false\n\n[profile.dev.package.\"*\"]\nopt-level = 2\n\n[workspace]\n",
        Path::new(root).join("testing")
    );
    std::fs::create_dir_all(dir.join("src"))?;
    write_if_changed(&dir.join("Cargo.toml"), &manifest)?;
    // The workspace's lock file: the same dependency versions, nothing to resolve.
    let lock = dir.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(Path::new(root).join("Cargo.lock"), lock)?;
    }
    write_if_changed(&dir.join("src/main.rs"), MAIN)
}

fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// The kernel a line of the generated module belongs to (its function,
/// runner or table entry).
fn kernel_at(source: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = source.lines().collect();
    let here = lines.get(line.checked_sub(1)?)?;
    if let Some(rest) = here.split("name: \"").nth(1) {
        return rest.split('"').next().map(str::to_string);
    }
    lines[..line].iter().rev().find_map(|l| {
        let rest = l.strip_prefix("fn run_").or_else(|| l.strip_prefix("fn "))?;
        Some(rest.split('(').next()?.to_string())
    })
}

/// Builds the scratch crate; the kernels its errors point at (with the
/// errors), or an error when the build fails elsewhere.
fn build(dir: &Path, source: &str) -> Result<Vec<(String, String)>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--message-format=short"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if out.status.success() {
        return Ok(Vec::new());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut bad: Vec<(String, String)> = Vec::new();
    for l in stderr.lines().filter(|l| l.contains("error")) {
        let Some(rest) = l.split("src/generated.rs:").nth(1) else {
            continue;
        };
        let Some(line) = rest.split(':').next().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some(name) = kernel_at(source, line) {
            match bad.iter_mut().find(|(n, _)| *n == name) {
                Some((_, errors)) => errors.push_str(&format!("\n{l}")),
                None => bad.push((name, l.to_string())),
            }
        }
    }
    if bad.is_empty() {
        return Err(format!("the scratch crate does not build:\n{stderr}"));
    }
    Ok(bad)
}

fn run() -> Result<(usize, usize), String> {
    let o = options()?;
    scaffold(&o.dir).map_err(|e| format!("{}: {e}", o.dir.display()))?;
    let start = Instant::now();
    let budget = Duration::from_secs(o.seconds);
    let (mut total, mut mismatches) = (0, 0);
    let mut batch_seed = o.seed;
    while total == 0 || start.elapsed() < budget {
        let texts = kernels(batch_seed, o.batch);
        let mut excluded: Vec<usize> = Vec::new();
        // Leave out the kernels that do not compile, one build at a time.
        loop {
            let source = source_without(batch_seed, o.batch, &excluded);
            write_if_changed(&o.dir.join("src/generated.rs"), &source).map_err(|e| e.to_string())?;
            let bad = build(&o.dir, &source)?;
            if bad.is_empty() {
                break;
            }
            for (name, errors) in bad {
                let Some(i) = texts.iter().position(|k| k.name == name) else {
                    return Err(format!("an error in {name}, which is not a kernel:\n{errors}"));
                };
                if excluded.contains(&i) {
                    return Err(format!("{name} is left out but still fails:\n{errors}"));
                }
                println!("does not compile: {name} (batch seed {batch_seed})\n{errors}\n{}", texts[i].function);
                excluded.push(i);
                mismatches += 1;
            }
        }
        let out = Command::new(o.dir.join("target/debug/tessel-kernel-fuzz-batch"))
            .arg(batch_seed.to_string())
            .output()
            .map_err(|e| format!("running the batch: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut ran = 0;
        for l in stdout.lines() {
            ran += 1;
            if let Some(rest) = l.strip_prefix("mismatch ") {
                mismatches += 1;
                let name = rest.split(' ').next().unwrap_or_default();
                let function = texts.iter().find(|k| k.name == name).map(|k| k.function.as_str());
                println!("mismatch (batch seed {batch_seed}): {rest}\n{}", function.unwrap_or(""));
            }
        }
        if !out.status.success() {
            mismatches += 1;
            println!(
                "the batch (seed {batch_seed}) stopped after {ran} kernels: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        total += o.batch;
        batch_seed += 1;
    }
    Ok((total, mismatches))
}

fn main() -> ExitCode {
    match run() {
        Ok((total, mismatches)) => {
            println!("{total} kernels, {mismatches} mismatches");
            if mismatches == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
