//! The kernel-body fuzzer's fixed batch: random kernel bodies
//! (`tessel_testing::kernel_fuzz`) expanded by the macros, traced, and run
//! on XLA and on the interpreter, whose results must agree. The kernels
//! are checked in (`kernel_fuzz/generated.rs`) so that a failure points at
//! source one can read; the first test keeps that file equal to what the
//! generator writes from the seed. `cargo run --example fuzz_kernels`
//! runs new batches for as long as asked.

use std::path::Path;
use std::time::Instant;

use tessel_testing::kernel_fuzz::{compare, devices, source};

#[rustfmt::skip]
#[path = "kernel_fuzz/generated.rs"]
mod generated;

/// The seed of the checked-in batch.
const SEED: u64 = 1;
/// The number of kernels in it.
const COUNT: usize = 48;
/// Where it is, from the crate root.
const FILE: &str = "tests/kernel_fuzz/generated.rs";

#[test]
fn the_checked_in_kernels_are_the_generated_ones() {
    let want = source(SEED, COUNT);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE);
    if std::env::var_os("TESSEL_REGENERATE").is_some() {
        std::fs::write(&path, &want).expect("the generated file is writable");
        return;
    }
    let have = std::fs::read_to_string(&path).expect("the generated file is readable");
    assert!(
        have == want,
        "{FILE} is not what the generator writes for seed {SEED}: regenerate it with \
         `TESSEL_REGENERATE=1 cargo test --test kernel_fuzz` (then build again)"
    );
}

#[test]
fn xla_and_the_interpreter_agree_on_every_generated_kernel() {
    let (first, second) = devices().expect("the devices");
    let start = Instant::now();
    let failures: Vec<String> = generated::CASES
        .iter()
        .enumerate()
        .filter_map(|(i, case)| compare(case, SEED + i as u64, &first, &second).err())
        .collect();
    eprintln!(
        "{} kernels compared in {:.1} s",
        generated::CASES.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} kernels of {FILE} disagree:\n{}",
        failures.len(),
        generated::CASES.len(),
        failures.join("\n")
    );
}
