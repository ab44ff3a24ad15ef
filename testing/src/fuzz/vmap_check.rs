//! The `vmap` fuzzer: each random program ([`generate`]) run over a small
//! batch of examples with `vmap` and as a loop over the examples, side by
//! side in one kernel on the CPU plugin, every output compared with the
//! fuzzer's tolerances. Each parameter gets a batch axis drawn from its
//! axes (any position) or none (shared by every example); at least one
//! has one. Loops, conditionals, indexing and reductions of the random
//! programs exercise the batching rules with batched and shared operands
//! in every combination.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tessel_dsl::kernel::Kernel;
use tessel_dsl::vmap::{vmap_with, Axes};
use tessel_dsl::{concat, HostTensor, Tensor, TensorSpec};

use super::build::build;
use super::check::Verdict;
use super::compare::mismatch;
use super::generate::{generate, random_arg};
use super::program::Case;
use crate::data::Rng;
use crate::{device, fresh_name};

/// A generated program with a batch of arguments.
#[derive(Clone, Debug)]
pub struct VmapCase {
    /// The program and one example's arguments.
    pub case: Case,
    /// Examples in the batch.
    pub size: usize,
    /// Each parameter's batch axis (`None`: shared).
    pub axes: Vec<Option<usize>>,
    /// The batched arguments.
    pub args: Vec<HostTensor>,
}

/// The program of `seed` with a batch of 1 to 3 examples.
pub fn vmap_case(seed: u64) -> VmapCase {
    let case = generate(seed);
    let mut rng = Rng::new(seed ^ 0x005e_ed0f_0a11_ba7c);
    let size = rng.int(1, 3) as usize;
    let n = case.args.len();
    let forced = rng.int(0, n as i64 - 1) as usize;
    let mut axes = Vec::with_capacity(n);
    let mut args = Vec::with_capacity(n);
    for (i, a) in case.args.iter().enumerate() {
        let spec = a.spec();
        let axis =
            (i == forced || rng.int(0, 2) > 0).then(|| rng.int(0, spec.rank() as i64) as usize);
        match axis {
            Some(ax) => {
                let mut shape = spec.shape.clone();
                shape.insert(ax, size);
                args.push(random_arg(&mut rng, &TensorSpec::new(shape, spec.dtype)));
            }
            None => args.push(a.clone()),
        }
        axes.push(axis);
    }
    VmapCase {
        case,
        size,
        axes,
        args,
    }
}

/// Example `i` of `t` along `axis` (or `t` itself).
fn example(t: Tensor, axis: Option<usize>, i: usize) -> Tensor {
    match axis {
        Some(a) => t.slice_axis(a as isize, i, i + 1).squeeze(a as isize),
        None => t,
    }
}

/// Runs `c` with `vmap` and as a loop and compares every output.
pub fn check_vmap(c: &VmapCase) -> Verdict {
    let p = &c.case.program;
    let axes: Vec<Option<isize>> = c.axes.iter().map(|a| a.map(|a| a as isize)).collect();
    let body = |a: &[Tensor]| {
        let batched = vmap_with(
            |xs: Vec<Tensor>| build(p, &xs),
            a.to_vec(),
            &Axes::new().inputs(axes.clone()),
        );
        let mut per: Vec<Vec<Tensor>> = vec![Vec::new(); batched.len()];
        for i in 0..c.size {
            let xs: Vec<Tensor> = a
                .iter()
                .zip(&c.axes)
                .map(|(t, ax)| example(*t, *ax, i))
                .collect();
            for (k, y) in build(p, &xs).into_iter().enumerate() {
                per[k].push(y.expand_dims(0));
            }
        }
        let looped: Vec<Tensor> = per.iter().map(|ys| concat(ys, 0)).collect();
        batched.into_iter().chain(looped).collect::<Vec<Tensor>>()
    };
    let k = Kernel::new(fresh_name("vmap_fuzz"), body);
    let specs: Vec<TensorSpec> = c.args.iter().map(|a| a.spec().clone()).collect();
    match catch_unwind(AssertUnwindSafe(|| k.trace(&specs))) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Verdict::Invalid(e.to_string()),
        Err(_) => return Verdict::Invalid("tracing panicked".into()),
    }
    let args: Vec<&HostTensor> = c.args.iter().collect();
    let outs = match k.run(&device(), &args) {
        Ok(o) => o,
        Err(e) => return Verdict::Mismatch(format!("the plugin fails: {e}")),
    };
    let n = outs.len() / 2;
    let bad: Vec<String> = p
        .outputs
        .iter()
        .enumerate()
        .take(n)
        .filter_map(|(i, o)| {
            mismatch(&outs[i], &outs[n + i], o.terms).map(|m| format!("output {i}: {m}"))
        })
        .collect();
    match bad.is_empty() {
        true => Verdict::Agree,
        false => Verdict::Mismatch(bad.join("\n")),
    }
}
