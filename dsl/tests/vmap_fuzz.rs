//! The `vmap` fuzzer (`tessel_testing::fuzz::check_vmap`) on a fixed set
//! of seeds: random programs over a batch with `vmap`, against a loop over
//! the examples. `VMAP_FUZZ_SEED=n` checks program `n` alone and prints it.

use tessel_testing::fuzz::{self, Verdict};

/// Programs of the fixed-seed run.
const PROGRAMS: u64 = 120;

#[test]
fn random_programs_under_vmap_match_a_loop_over_examples() {
    fuzz::use_fast_compile();
    let seeds: Vec<u64> = match std::env::var("VMAP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => (0..PROGRAMS).collect(),
    };
    let (mut agreed, mut invalid, mut mismatches) = (0, Vec::new(), Vec::new());
    for seed in seeds {
        let c = fuzz::vmap_case(seed);
        match fuzz::check_vmap(&c) {
            Verdict::Agree => agreed += 1,
            Verdict::Invalid(m) => invalid.push((seed, m)),
            Verdict::Mismatch(m) => {
                let rust = fuzz::to_rust(&c.case, &format!("vmap_fuzz_{seed}"), "under vmap");
                eprintln!(
                    "seed {seed}, batch {} axes {:?}: {m}\n{rust}",
                    c.size, c.axes
                );
                mismatches.push(seed);
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "vmap differs from the loop for seeds {mismatches:?} (printed above)"
    );
    eprintln!(
        "{agreed} programs agree; {} do not trace: {invalid:?}",
        invalid.len()
    );
    // A program that traces alone traces under vmap: none is invalid.
    assert!(invalid.is_empty(), "{invalid:?}");
    assert!(agreed > 0);
}
