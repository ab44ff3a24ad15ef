//! Automatic batching (JAX's `jax.vmap`): a function written for one
//! example, run over a batch of them as one program.
//!
//! [`vmap`] traces the function once on one example's shapes, then emits
//! its ops again over the batch: each op has a batching rule (beside the
//! op's other rules, listed in `tessel::guide::training`), which moves the
//! batch axis in front, broadcasts the operands that are the same for every
//! example, and shifts the op's axes. Nothing becomes a per-example loop.
//! Loops and conditionals follow JAX: a `while` whose condition differs
//! between examples runs until every example is done, each keeping its
//! values once its own condition fails; a `cond` on a predicate that
//! differs between examples computes both branches and selects.
//!
//! `vmap` composes with itself and with the autodiff transforms in either
//! order: `vmap` of a function that calls `grad` gives per-example
//! gradients, and `grad` of a function that calls `vmap` differentiates
//! the batched program.
//!
//! ```
//! use tessel_dsl::vmap::{vmap, vmap_with, Axes};
//! use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
//! let p = [("xs".into(), TensorSpec::new([8, 3], F32)), ("w".into(), TensorSpec::new([3, 4], F32))];
//! let g = trace("rows", &p, KernelConfig::default(), |a| {
//!     // One row `[3]` times the shared `w`: batched over the 8 rows.
//!     let w = a[1];
//!     let y = vmap(|x: Tensor| x.reshape(&[1, 3]).matmul(w).reshape(&[4]), a[0]);
//!     // The same with the batch axis last in the result.
//!     let yt = vmap_with(|x: Tensor| x.sum(&[0]) * w, a[0], &Axes::new().outputs([Some(-1)]));
//!     (y, yt)
//! })?;
//! assert_eq!(g.output_specs()[0], TensorSpec::new([8, 4], F32));
//! assert_eq!(g.output_specs()[1], TensorSpec::new([3, 4, 8], F32));
//! # Ok::<(), tessel_dsl::Error>(())
//! ```

mod batcher;
mod checks;
mod control;
mod emit;
mod indexing;
mod records;
mod rules;

use crate::error::Location;
use crate::ops::carry::{flat, Carry};
use crate::trace::tensor::fail;
use crate::trace::with_state;

use batcher::{BVal, Batcher};

/// Which axis of each argument and of each result of a [`vmap_with`] is
/// the batch axis (JAX's `in_axes` and `out_axes`), per tensor of the
/// argument and of the result, in their order (a tree's leaves in path
/// order). `None` is an argument that is the same for every example (it
/// is not batched), or a result that is (it must not depend on a batched
/// argument). A negative axis counts from the end. An empty list (the
/// default) is axis 0 for every tensor; a list of one applies to all.
///
/// ```
/// use tessel_dsl::vmap::Axes;
/// // The first argument batched along axis 1, the second shared; the
/// // results batched at their last axis.
/// let axes = Axes::new().inputs([Some(1), None]).outputs([Some(-1)]);
/// # let _ = axes;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Axes {
    inputs: Vec<Option<isize>>,
    outputs: Vec<Option<isize>>,
}

impl Axes {
    /// Axis 0 of every argument and every result.
    pub fn new() -> Axes {
        Axes::default()
    }

    /// The batch axis of each argument tensor.
    pub fn inputs(mut self, axes: impl Into<Vec<Option<isize>>>) -> Axes {
        self.inputs = axes.into();
        self
    }

    /// The batch axis of each result tensor.
    pub fn outputs(mut self, axes: impl Into<Vec<Option<isize>>>) -> Axes {
        self.outputs = axes.into();
        self
    }
}

/// One axis per tensor: `axes` expanded to `n` entries.
fn per_tensor(axes: &[Option<isize>], n: usize, what: &str) -> Result<Vec<Option<isize>>, String> {
    match axes.len() {
        0 => Ok(vec![Some(0); n]),
        1 => Ok(vec![axes[0]; n]),
        k if k == n => Ok(axes.to_vec()),
        k => Err(format!("{k} {what} axes given for {n} {what} tensors")),
    }
}

/// `axis` of a tensor of rank `rank` counted from the front, if in range.
fn normalize(axis: isize, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    (0..rank as isize).contains(&a).then_some(a as usize)
}

/// `f` over a batch: every tensor of `args` has the batch axis 0, and so
/// has every tensor of the result (JAX's `jax.vmap(f)(args)`). See
/// [`vmap_with`] for other axes and arguments shared by all examples.
///
/// ```
/// use tessel_dsl::vmap::vmap;
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// let p = [("a".into(), TensorSpec::new([5, 3], F32)), ("b".into(), TensorSpec::new([5, 3], F32))];
/// let g = trace("dots", &p, KernelConfig::default(), |a| {
///     vmap(|(x, y): (Tensor, Tensor)| (x * y).sum(&[0]), (a[0], a[1]))
/// })?;
/// assert_eq!(g.output_specs()[0], TensorSpec::new([5], F32));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn vmap<C: Carry, O: Carry>(f: impl FnOnce(C) -> O, args: C) -> O {
    vmap_at(f, args, &Axes::new(), Location::caller())
}

/// [`vmap`] with the batch axis of each argument and result given by
/// `axes` (an argument whose axis is `None` is passed to `f` as it is).
///
/// Errors (kernel errors naming `vmap` and the line of the call): axes
/// out of range, a count of axes that fits neither one nor every tensor,
/// batch axes of different extents, no batched argument, an extent of 0,
/// and a result whose axis is `None` that depends on a batched argument.
#[track_caller]
pub fn vmap_with<C: Carry, O: Carry>(f: impl FnOnce(C) -> O, args: C, axes: &Axes) -> O {
    vmap_at(f, args, axes, Location::caller())
}

fn vmap_at<C: Carry, O: Carry>(f: impl FnOnce(C) -> O, args: C, axes: &Axes, loc: Location) -> O {
    let ins = flat(&args);
    let refuse = |m: String| fail("vmap", &ins, m, &loc);
    let in_axes = match per_tensor(&axes.inputs, ins.len(), "argument") {
        Ok(a) => a,
        Err(m) => {
            refuse(m);
            return f(args);
        }
    };
    let Some((trace, region)) = with_state(|s| (s.id, s.region)) else {
        return f(args);
    };
    // The batch size, and each argument's batch axis counted from the front.
    let mut size: Option<(usize, usize)> = None;
    let mut axes_in = Vec::with_capacity(ins.len());
    for (i, (t, a)) in ins.iter().zip(&in_axes).enumerate() {
        let Some(a) = *a else {
            axes_in.push(None);
            continue;
        };
        let sp = t.spec();
        let Some(ax) = normalize(a, sp.rank()) else {
            refuse(format!(
                "batch axis {a} is out of range for argument {i} ({sp})"
            ));
            return f(args);
        };
        match size {
            Some((j, n)) if n != sp.shape[ax] => {
                let m = format!(
                    "batch axes of different extents: argument {j} has {n}, argument {i} ({sp}) has {} along axis {ax}",
                    sp.shape[ax]
                );
                refuse(m);
                return f(args);
            }
            Some(_) => {}
            None => size = Some((i, sp.shape[ax])),
        }
        axes_in.push(Some(ax));
    }
    let size = match size {
        Some((_, 0)) => Err("a batch of 0 examples".to_string()),
        Some((_, n)) => Ok(n),
        None => Err("no argument has a batch axis (every input axis is None)".to_string()),
    };
    let size = match size {
        Ok(n) => n,
        Err(m) => {
            refuse(m);
            return f(args);
        }
    };
    // Each batched argument with its batch axis in front, and its first
    // example, which `f` is traced on.
    let mut batched = Vec::with_capacity(ins.len());
    let mut example = Vec::with_capacity(ins.len());
    for (t, a) in ins.iter().zip(&axes_in) {
        match a {
            None => {
                batched.push(None);
                example.push(*t);
            }
            Some(a) => {
                let m = emit::move_axis(*t, *a, 0, &loc);
                batched.push(Some(m));
                example.push(emit::example(m, 0, &loc));
            }
        }
    }
    let start = with_state(|s| s.graph.regions[region].nodes.len()).unwrap_or(0);
    let out = f(args.rebuild(&mut example.clone().into_iter()));
    let outs = flat(&out);
    if with_state(|s| (s.id, s.region)) != Some((trace, region)) {
        let m = "the function left the loop or branch it was called in".to_string();
        fail("vmap", &outs, m, &loc);
        return out;
    }
    let nodes = with_state(|s| s.graph.regions[region].nodes[start..].to_vec()).unwrap_or_default();
    let mut b = Batcher::new(trace, size);
    for (e, m) in example.iter().zip(&batched) {
        if let Some(m) = m {
            b.bind(e.value, BVal::batched(*m));
        }
    }
    b.run(&nodes);
    checks::batch_checks(&b, region, &loc);
    let out_axes = match per_tensor(&axes.outputs, outs.len(), "result") {
        Ok(a) => a,
        Err(m) => {
            fail("vmap", &outs, m, &loc);
            return out;
        }
    };
    let mut results = Vec::with_capacity(outs.len());
    for (i, (o, a)) in outs.iter().zip(out_axes).enumerate() {
        let v = b.get(o.value);
        let r = match a {
            None if v.batched => {
                let m = format!("result {i} differs between examples but its batch axis is None");
                fail("vmap", &outs, m, &loc);
                v.t
            }
            None => v.t,
            Some(a) => {
                let sp = o.spec();
                let full = b.full(v, &sp, &loc);
                match normalize(a, sp.rank() + 1) {
                    Some(ax) => emit::move_axis(full, 0, ax, &loc),
                    None => {
                        let m = format!(
                            "batch axis {a} is out of range for result {i} ({sp} per example)"
                        );
                        fail("vmap", &outs, m, &loc);
                        full
                    }
                }
            }
        };
        results.push(r);
    }
    out.rebuild(&mut results.into_iter())
}
