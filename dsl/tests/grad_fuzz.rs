//! The gradient fuzzer (`tessel_testing::fuzz::grad`) on a fixed set of
//! seeds: the interpreter fuzzer's random programs, made all-f64, with
//! their pullbacks compared with central differences on the CPU plugin
//! along a random direction.
//!
//! `GRAD_FUZZ_SEED=n` checks program `n` alone and prints it;
//! `cargo run --release --example fuzz -- --grad --seconds N` runs longer
//! on new seeds.

use std::rc::Rc;
use std::time::Instant;

use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{DType, HostTensor, TensorSpec};
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
    let report = grad::run_grads(0..PROGRAMS, &fuzz::Config::default(), None, &print);
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

#[test]
fn a_batch_gives_each_program_the_verdict_it_gets_alone() {
    fuzz::use_fast_compile();
    let cases: Vec<fuzz::Case> = (1000..1020)
        .map(|s| grad::grad_case(s).expect("an all-f64 program"))
        .collect();
    let batch = grad::check_grads(&cases);
    let alone: Vec<grad::GradVerdict> = cases.iter().map(grad::check_grad).collect();
    assert_eq!(batch, alone);
    assert!(batch.contains(&grad::GradVerdict::Agree));
}

#[test]
fn a_function_whose_gradient_fails_leaves_the_others_in_its_batch_checked() {
    fuzz::use_fast_compile();
    let spec = TensorSpec::new([5], DType::F64);
    let x = HostTensor::from_fn(spec.clone(), |i| 0.3 + i as f64 / 7.0);
    let at = HostTensor::from_vec(vec![1i32, 3], [2]).unwrap();
    let square: grad::Func = Rc::new(|a| vec![a[0] * a[0]]);
    // A multiplying scatter whose updates depend on a parameter: the
    // pullback refuses it (JAX defines no gradient there).
    let scatter: grad::Func = Rc::new(|a| {
        let updates = a[0].slice_axis(0, 0, 2);
        vec![a[0].index_update(0, a[1], updates, ScatterCombine::Mul)]
    });
    let args_x = [x.clone()];
    let args_scatter = [x.clone(), at];
    let fns = vec![
        (1, &args_x[..], square.clone()),
        (2, &args_scatter[..], scatter),
        (
            3,
            &args_x[..],
            Rc::new(|a: &[tessel_dsl::Tensor]| vec![a[0].exp()]) as grad::Func,
        ),
    ];
    let batch = grad::check_fns(fns.clone());
    let alone: Vec<grad::GradVerdict> = fns
        .into_iter()
        .map(|f| grad::check_fns(vec![f]).remove(0))
        .collect();
    for verdicts in [&batch, &alone] {
        assert_eq!(verdicts[0], grad::GradVerdict::Agree);
        assert!(
            matches!(&verdicts[1], grad::GradVerdict::Mismatch(m)
                if m.contains("gradient does not run") && m.contains("multiplying scatter")),
            "{:?}",
            verdicts[1]
        );
        assert_eq!(verdicts[2], grad::GradVerdict::Agree);
    }
}
