//! Reverse-mode automatic differentiation of traced code.
//!
//! [`vjp`] runs a function of tensors inside the kernel being traced and
//! returns its outputs with a [`Pullback`]: called with cotangents of the
//! outputs, the pullback appends the ops that compute the cotangents of the
//! inputs (a vector-Jacobian product). [`grad`] and [`value_and_grad`] are
//! the scalar-loss forms, [`jvp`] the forward-mode product. All of them are
//! ordinary traced code: they can be called in any kernel body, nested in
//! loops and branches, and differentiated again.
//!
//! Every op of the op set has a rule (listed in the guide, `tessel::guide::training`):
//! floating-point values get cotangents, integer and `pred` values do not
//! (their cotangents are zeros). `max`/`min` reductions share the gradient
//! evenly among tied elements, as in JAX; `argmax` has none. Loops run
//! backwards: a `fori_loop` over Rust bounds (and a `scan`) saves each
//! iteration's carried values, except the buffers it only writes into (its
//! stacked outputs); any other loop recomputes them from the start
//! (constant memory).
//! Collectives that move or split values (`all_gather`, `psum_scatter`,
//! `all_to_all`, `ppermute`) transpose as JAX's do for values that vary by
//! device: the loss is the sum of the devices' losses. A gradient that
//! cannot be formed (the updates of a multiplying scatter, a `psum`) is a
//! kernel error naming the op and the line of the forward op.
//!
//! [`custom_vjp`] gives a function a backward of its own, and
//! [`checkpoint`] recomputes a function's intermediates in the backward
//! pass instead of keeping them.
//!
//! ```
//! use tessel_dsl::autodiff::value_and_grad;
//! use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
//! let params = [("w".into(), TensorSpec::new([3], F32)), ("x".into(), TensorSpec::new([3], F32))];
//! let g = trace("loss_and_grad", &params, KernelConfig::default(), |a| {
//!     let x = a[1];
//!     // d/dw sum((w * x)^2) = 2 w x^2
//!     let (loss, dw) = value_and_grad(|w: Tensor| (w * x).square().sum(&[0]), a[0]);
//!     (loss, dw)
//! })?;
//! assert_eq!(g.output_specs()[1], TensorSpec::new([3], F32));
//! # Ok::<(), tessel_dsl::Error>(())
//! ```

mod backprop;
mod control;
mod custom;
mod loop_products;
mod replay;
mod rules;
mod rules_index;
mod tape;

use std::marker::PhantomData;

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::ValueId;
use crate::ops::carry::{flat, Carry};
use crate::shape::TensorSpec;
use crate::trace::tensor::{trace_error, Tensor};

pub use custom::{checkpoint, custom_vjp, stop_gradient, Remat};

use backprop::{accumulate, backprop, differentiable, fail_at, Cotangents};
use tape::Tape;

/// The spans with their own backward, for transforms that re-emit them.
pub(crate) use custom::{
    record_again, records_among, Backward, Kind as SpanKind, Record as SpanRecord,
};
/// Values used inside some regions but defined outside them.
pub(crate) use tape::free_values as free_values_of;

/// The backward half of [`vjp`]: maps cotangents of the outputs (shaped
/// like the outputs, `O`) to cotangents of the inputs (shaped like the
/// primals, `C`). It can be called more than once, and in another region
/// of the same trace (inside a loop body, say), but only in the trace that
/// made it.
pub struct Pullback<C, O> {
    tape: Tape,
    inputs: Vec<ValueId>,
    outputs: Vec<Option<ValueId>>,
    out_specs: Vec<TensorSpec>,
    template: C,
    _out: PhantomData<fn(O)>,
}

impl<C: Carry, O: Carry> Pullback<C, O> {
    /// The cotangents of the inputs for `cotangents` of the outputs.
    ///
    /// A cotangent whose type differs from its output's is a kernel error
    /// (and the result is zeros).
    #[track_caller]
    pub fn call(&self, cotangents: O) -> C {
        self.call_as("vjp", cotangents)
    }

    /// [`call`](Self::call), its errors reported under the op name `op`: a
    /// backward kernel built on a pullback names itself, so that a wrong
    /// cotangent is reported as a misuse of that kernel.
    ///
    /// ```
    /// use tessel_dsl::autodiff::vjp;
    /// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, BF16, F32};
    /// let p = [("x".into(), TensorSpec::new([3], F32)), ("dy".into(), TensorSpec::new([3], BF16))];
    /// let err = trace("tanh_vjp", &p, KernelConfig::default(), |a| {
    ///     let (_, pullback) = vjp(|x: Tensor| x.tanh(), a[0]);
    ///     pullback.call_as("tanh_vjp", a[1])
    /// })
    /// .unwrap_err();
    /// let k = err.as_kernel_error().unwrap();
    /// assert_eq!(k.op, "tanh_vjp");
    /// assert!(k.message.contains("cotangent 0 is bf16[3] but output 0 is f32[3]"));
    /// ```
    #[track_caller]
    pub fn call_as(&self, op: &str, cotangents: O) -> C {
        let loc = Location::caller();
        let cts = flat(&cotangents);
        let zeros = |this: &Self| -> C {
            let z: Vec<Tensor> = this
                .inputs
                .iter()
                .map(|&v| tape::handle(this.tape.trace, v).zeros_like())
                .collect();
            this.template.rebuild(&mut z.into_iter())
        };
        match tape::current() {
            Some((t, _)) if t == self.tape.trace => {}
            _ => {
                let m = "a pullback was called outside the kernel trace that made it".to_string();
                trace_error(op, &cts, m);
                return zeros(self);
            }
        }
        if cts.len() != self.out_specs.len() {
            let m = format!(
                "{} cotangents given for {} outputs",
                cts.len(),
                self.out_specs.len()
            );
            fail_at(op, &cts, m, &loc);
            return zeros(self);
        }
        let mut map = Cotangents::new();
        for (i, (ct, want)) in cts.iter().zip(&self.out_specs).enumerate() {
            if ct.spec() != *want {
                let m = format!("cotangent {i} is {} but output {i} is {want}", ct.spec());
                fail_at(op, &cts, m, &loc);
                return zeros(self);
            }
            if let Some(v) = self.outputs[i] {
                if differentiable(v) {
                    accumulate(&mut map, v, *ct);
                }
            }
        }
        let res = backprop(&self.tape, &self.inputs, map);
        let out: Vec<Tensor> = self
            .inputs
            .iter()
            .map(|&v| {
                res.get(&v)
                    .copied()
                    .unwrap_or_else(|| tape::handle(self.tape.trace, v).zeros_like())
            })
            .collect();
        self.template.rebuild(&mut out.into_iter())
    }
}

/// Runs `f` on `primals` and returns its outputs and the [`Pullback`] that
/// maps output cotangents to input cotangents (JAX's `jax.vjp`).
///
/// `primals` and the outputs are any [`Carry`]: a tensor, a tuple, an array
/// or a `Vec` of them. Tensors `f` captures from the enclosing code are
/// constants to the derivative.
///
/// ```
/// use tessel_dsl::autodiff::vjp;
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// let p = [("x".into(), TensorSpec::new([2, 3], F32)), ("w".into(), TensorSpec::new([3, 4], F32))];
/// let g = trace("vjp", &p, KernelConfig::default(), |a| {
///     let (y, pullback) = vjp(|(x, w): (Tensor, Tensor)| x.matmul(w).tanh(), (a[0], a[1]));
///     let (dx, dw) = pullback.call(y.ones_like());
///     (y, dx, dw)
/// })?;
/// assert_eq!(g.output_specs()[2], TensorSpec::new([3, 4], F32));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn vjp<C: Carry, O: Carry>(f: impl FnOnce(C) -> O, primals: C) -> (O, Pullback<C, O>) {
    let loc = Location::caller();
    let inert = |primals: C, out: O| {
        let pb = Pullback {
            tape: Tape::new(0, 0, Vec::new()),
            inputs: Vec::new(),
            outputs: Vec::new(),
            out_specs: Vec::new(),
            template: primals,
            _out: PhantomData,
        };
        (out, pb)
    };
    let Some((trace, region)) = tape::current() else {
        let template = primals.rebuild(&mut flat(&primals).into_iter());
        return inert(template, f(primals));
    };
    let ins: Vec<Tensor> = flat(&primals)
        .into_iter()
        .map(|t| tape::fresh(t, &loc))
        .collect();
    let template = primals.rebuild(&mut ins.clone().into_iter());
    let start = tape::node_count();
    let out = f(primals.rebuild(&mut ins.clone().into_iter()));
    let outs = flat(&out);
    if tape::current() != Some((trace, region)) {
        let m = "the function left the loop or branch it was called in".to_string();
        trace_error("vjp", &outs, m);
        return inert(template, out);
    }
    let nodes = tape::region_nodes_since(region, start);
    let outputs: Vec<Option<ValueId>> = outs
        .iter()
        .map(|&t| tape::value_here(t, "vjp", &loc))
        .collect();
    let out_specs = outs.iter().map(|t| t.spec()).collect();
    let pb = Pullback {
        tape: Tape::new(trace, region, nodes),
        inputs: ins.iter().map(|t| t.value).collect(),
        outputs,
        out_specs,
        template,
        _out: PhantomData,
    };
    (out, pb)
}

/// The value of a scalar function and its gradient with respect to every
/// tensor of `primals` (JAX's `jax.value_and_grad`). `f` must return a
/// floating-point scalar, and every tensor of `primals` must be floating
/// point; anything else is a kernel error.
#[track_caller]
pub fn value_and_grad<C: Carry>(f: impl FnOnce(C) -> Tensor, primals: C) -> (Tensor, C) {
    let loc = Location::caller();
    for t in flat(&primals) {
        let sp = t.spec();
        if !sp.dtype.is_float() && crate::trace::is_tracing() {
            let m = format!(
                "cannot differentiate with respect to a {sp} value: only floating-point \
                 tensors have gradients (capture integer tensors in the function instead)"
            );
            fail_at("grad", &[t], m, &loc);
        }
    }
    let (y, pb) = vjp(f, primals);
    let sp = y.spec();
    if (sp.rank() != 0 || !sp.dtype.is_float()) && crate::trace::is_tracing() {
        let m = format!("the function must return a floating-point scalar, got {sp}");
        fail_at("grad", &[y], m, &loc);
    }
    let one = Tensor::full(Vec::<usize>::new(), 1.0, sp.dtype);
    (y, pb.call(one))
}

/// The gradient of a scalar function with respect to every tensor of
/// `primals` (JAX's `jax.grad`); see [`value_and_grad`].
///
/// ```
/// use tessel_dsl::autodiff::grad;
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// let g = trace("dsin", &[("x".into(), TensorSpec::new([5], F32))], KernelConfig::default(), |a| {
///     grad(|x: Tensor| x.sin().sum(&[0]), a[0]) // cos(x)
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn grad<C: Carry>(f: impl FnOnce(C) -> Tensor, primals: C) -> C {
    value_and_grad(f, primals).1
}

/// The outputs of `f` at `primals` and their directional derivative along
/// `tangents` (a Jacobian-vector product, JAX's `jax.jvp`). Computed as the
/// transpose of the pullback, so it costs about two backward passes.
///
/// ```
/// use tessel_dsl::autodiff::jvp;
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32};
/// let g = trace("jvp", &[("x".into(), TensorSpec::new([3], F32))], KernelConfig::default(), |a| {
///     let (y, dy) = jvp(|x: Tensor| x.exp(), a[0], a[0].ones_like()); // dy = exp(x)
///     (y, dy)
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn jvp<C: Carry, O: Carry>(f: impl FnOnce(C) -> O, primals: C, tangents: C) -> (O, O) {
    let (out, pb) = vjp(f, primals);
    let outs = flat(&out);
    let u0: Vec<Tensor> = outs
        .iter()
        .map(|t| {
            if t.dtype().is_float() {
                t.zeros_like()
            } else {
                Tensor::zeros(t.shape(), DType::F32).cast(t.dtype())
            }
        })
        .collect();
    let template = out.rebuild(&mut outs.clone().into_iter());
    let (_, pb2) = vjp(
        |u: Vec<Tensor>| flat(&pb.call(template.rebuild(&mut u.into_iter()))),
        u0,
    );
    let t = pb2.call(flat(&tangents));
    let tangent_out = out.rebuild(&mut t.into_iter());
    (out, tangent_out)
}
