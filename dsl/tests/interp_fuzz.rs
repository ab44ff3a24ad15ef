//! The interpreter's differential fuzzer (`tessel_testing::fuzz`) on a
//! fixed set of seeds: random well-typed graphs evaluated by the
//! interpreter and run on the CPU plugin, traced in batches so that XLA
//! compiles once per batch. Every mismatch is shrunk and printed as a Rust
//! test that reproduces it.
//!
//! XLA compiles with `fuzz::FAST_COMPILE_FLAGS` added to `XLA_FLAGS`: its
//! HLO passes (where its rewrites are) as by default, cheaper machine
//! code, about a quarter of the compile time. The example compiles with
//! XLA's defaults.
//!
//! `INTERP_FUZZ_SEED=n` checks graph `n` alone and prints it as Rust and
//! as StableHLO; `cargo run --release --example fuzz -- --seconds N` runs
//! longer on new seeds.

use std::time::Instant;

use tessel_dsl::kernel::Kernel;
use tessel_dsl::TensorSpec;
use tessel_testing::fuzz::{self, Budget, Config};

/// Graphs of the fixed-seed run.
const GRAPHS: u64 = 2000;

/// Checks graph `seed` alone, printing it first.
fn one(seed: u64) {
    let case = fuzz::generate(seed);
    eprintln!(
        "{}",
        fuzz::to_rust(&case, &format!("interp_fuzz_{seed}"), "As generated.")
    );
    let p = case.program.clone();
    let specs: Vec<TensorSpec> = case.args.iter().map(|a| a.spec().clone()).collect();
    match Kernel::new(format!("fuzz_{seed}"), |a| fuzz::build(&p, a)).lower(&specs) {
        Ok(text) => eprintln!("{text}"),
        Err(e) => eprintln!("it does not lower: {e}"),
    }
    if let Err(f) = fuzz::check_seed(seed, Budget::default()) {
        panic!("seed {seed}: {}\nshrunk:\n{}", f.message, f.rust);
    }
}

#[test]
fn random_graphs_agree_with_the_cpu_plugin() {
    fuzz::use_fast_compile();
    if let Some(seed) = std::env::var("INTERP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return one(seed);
    }
    let t = Instant::now();
    let report = fuzz::run(0..GRAPHS, &Config::default(), None, &|f| {
        eprintln!("seed {}: {}\n{}", f.seed, f.message, f.rust);
    });
    eprintln!("{} graphs in {:?}", report.graphs, t.elapsed());
    assert!(
        report.invalid.is_empty(),
        "programs that do not trace: {:?}",
        report.invalid
    );
    assert!(
        report.findings.is_empty(),
        "{} mismatches (printed above), seeds {:?}",
        report.findings.len(),
        report.findings.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
}
