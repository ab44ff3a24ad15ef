//! The comparison of the host interpreter with the XLA CPU plugin, shared
//! by the interpreter's tests: the fuzzer's tolerance per dtype
//! (`tessel_testing::fuzz::compare`) and runners that evaluate a traced
//! kernel both ways.

#![allow(dead_code)]

use crate::common::*;
use tessel_dsl::interp::{evaluate, Checks, Evaluation};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::trace::Outputs;
use tessel_dsl::{HostTensor, Tensor, TensorSpec};

use tessel_testing::fuzz::compare::assert_same;

/// Traces `body` for `args`, evaluates it with the interpreter and runs it
/// on the CPU plugin, compares every output (sums of up to `terms` terms)
/// and returns the evaluation.
#[track_caller]
pub fn both_n<O: Outputs>(
    body: impl Fn(&[Tensor]) -> O,
    args: &[HostTensor],
    terms: usize,
) -> Evaluation {
    let k = Kernel::new(fresh_name("interp"), body);
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let g = k.trace(&specs).expect("the kernel traces");
    let e = evaluate(&g, args, Checks::default()).expect("the interpreter evaluates");
    let refs: Vec<&HostTensor> = args.iter().collect();
    let xla = k.run(&device(), &refs).expect("the plugin runs");
    assert_eq!(e.outputs.len(), xla.len(), "output count");
    for (i, (a, b)) in e.outputs.iter().zip(&xla).enumerate() {
        assert_same(a, b, terms, &format!("output {i}"));
    }
    e
}

/// [`both_n`] for elementwise results.
#[track_caller]
pub fn both<O: Outputs>(body: impl Fn(&[Tensor]) -> O, args: &[HostTensor]) -> Evaluation {
    both_n(body, args, 1)
}
