//! The gradient fuzzer (`tessel_testing::fuzz::grad`) on a fixed set of
//! seeds: the interpreter fuzzer's random programs, made all-f64, with
//! their pullbacks compared with central differences on the CPU plugin
//! along a random direction.
//!
//! `GRAD_FUZZ_SEED=n` checks program `n` alone and prints it;
//! `cargo run --release --example fuzz -- --grad --seconds N` runs longer
//! on new seeds.

use std::time::Instant;

use tessel_testing::fuzz::{self, grad};

/// Programs of the fixed-seed run.
const PROGRAMS: u64 = 400;

#[test]
fn pullbacks_of_random_programs_match_central_differences() {
    fuzz::use_fast_compile();
    let print = |case: &fuzz::Case, message: &str| {
        let rust = fuzz::to_rust_grad(case, &format!("grad_fuzz_{}", case.seed), message);
        eprintln!("seed {}: {message}\n{rust}", case.seed);
    };
    if let Some(seed) = std::env::var("GRAD_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        let case = grad::grad_case(seed).expect("an all-f64 program");
        print(&case, "as generated");
        let verdict = grad::check_grad(&case);
        eprintln!("{verdict:?}");
        assert!(!matches!(verdict, grad::GradVerdict::Mismatch(_)));
        return;
    }
    let t = Instant::now();
    let report = grad::run_grads(0..PROGRAMS, None, &print);
    eprintln!(
        "{} programs checked, skipped: {:?}, in {:?}",
        report.checked,
        report.skipped,
        t.elapsed()
    );
    assert!(
        report.mismatches.is_empty(),
        "{} mismatches (printed above): {:?}",
        report.mismatches.len(),
        report.mismatches
    );
    // Most programs with a float input and output are compared (the rest
    // skip for a reason counted above).
    assert!(
        report.checked >= PROGRAMS as usize / 3,
        "only {} of {PROGRAMS} programs were compared: {:?}",
        report.checked,
        report.skipped
    );
    assert!(
        !report.skipped.contains_key(&grad::SkipKind::IllTyped),
        "the f64 programs must type: {:?}",
        report.skipped
    );
}
