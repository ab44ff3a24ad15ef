//! An attribute kernel's `value_and_grad` companion: the kernel's scalar
//! loss and its gradients with respect to the tensor and tree parameters
//! named at the call. Generic over the kernel's parameters, which the expansion
//! passes as a nested list (`(x, (w, (b, ())))`), so that what does not
//! depend on the kernel's signature is compiled once, here, and not once
//! per kernel.

use super::params::{single_output, ArgCollector, KernelParam};
use super::Kernel;
use crate::autodiff::value_and_grad;
use crate::config::KernelConfig;
use crate::error::{DeviceError, Error, Result};
use crate::host::HostTensor;
use crate::runtime::Device;
use crate::trace::tensor::{trace_error, Tensor};
use crate::trace::Outputs;

/// A kernel's parameters as a nested list `(first, (second, ()))`: what
/// [`kernel_value_and_grad`] needs of each.
pub trait ParamList: Sized {
    /// Each parameter's tensors (a tree's leaves in path order; `None` for
    /// a static argument), in order.
    fn primals(&self, out: &mut Vec<Option<Vec<Tensor>>>);
    /// The parameters with each tensor whose flag is set replaced by the
    /// next of `next`.
    fn substitute(
        self,
        flags: &mut dyn Iterator<Item = bool>,
        next: &mut dyn Iterator<Item = Tensor>,
    ) -> Self;
}

impl ParamList for () {
    fn primals(&self, _: &mut Vec<Option<Vec<Tensor>>>) {}
    fn substitute(
        self,
        _: &mut dyn Iterator<Item = bool>,
        _: &mut dyn Iterator<Item = Tensor>,
    ) -> Self {
    }
}

impl<H: KernelParam, T: ParamList> ParamList for (H, T) {
    fn primals(&self, out: &mut Vec<Option<Vec<Tensor>>>) {
        let mut ts = Vec::new();
        out.push(self.0.primals(&mut ts).then_some(ts));
        self.1.primals(out);
    }
    fn substitute(
        self,
        flags: &mut dyn Iterator<Item = bool>,
        next: &mut dyn Iterator<Item = Tensor>,
    ) -> Self {
        let head = self.0.substitute(flags.next().unwrap_or(false), next);
        (head, self.1.substitute(flags, next))
    }
}

/// What an attribute kernel's `value_and_grad_with` runs: the kernel
/// `name` (of module `module`, parameters `params`), traced with the
/// arguments `c` collected, its parameters bound by `bind` and the kernel
/// called by `call`; returns the loss and the gradients for each name of
/// `wrt`, in order: one for a tensor parameter, one per leaf, in path
/// order, for a tree parameter. A name that is not a tensor or tree
/// parameter is a kernel error naming the parameters. Compiled once per
/// `wrt`, specs, statics and config.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn kernel_value_and_grad<L, O>(
    name: &'static str,
    module: &'static str,
    params: &'static [&'static str],
    config: &KernelConfig,
    device: &Device,
    wrt: &[&str],
    c: &ArgCollector<'_>,
    bind: impl Fn(&[Tensor]) -> L,
    call: impl Fn(L) -> O,
) -> Result<(HostTensor, Vec<HostTensor>)>
where
    L: ParamList,
    O: Outputs,
{
    let key = format!("{module}::{name}::value_and_grad[{}]", wrt.join(","));
    let body = |t: &[Tensor]| -> Vec<Tensor> {
        let args = bind(t);
        let mut each = Vec::with_capacity(params.len());
        args.primals(&mut each);
        // The chosen parameters, each with the range of its tensors in `primals`.
        let (mut chosen, mut primals) = (Vec::new(), Vec::new());
        for (p, ts) in params.iter().zip(each) {
            if let (true, Some(ts)) = (wrt.contains(p), ts) {
                chosen.push((*p, primals.len()..primals.len() + ts.len()));
                primals.extend(ts);
            }
        }
        if let Some(w) = wrt.iter().find(|w| !chosen.iter().any(|(n, _)| n == *w)) {
            let message = format!(
                "`{w}` is not a tensor or tree parameter of `{name}` (parameters: {})",
                params.join(", ")
            );
            return vec![trace_error("value_and_grad", &primals, message)];
        }
        let flags: Vec<bool> = params
            .iter()
            .map(|p| chosen.iter().any(|(n, _)| n == p))
            .collect();
        let (v, g) = value_and_grad(
            |x: Vec<Tensor>| {
                let args = args.substitute(&mut flags.iter().copied(), &mut x.into_iter());
                single_output(name, call(args))
            },
            primals,
        );
        let mut out = vec![v];
        for w in wrt {
            if let Some((_, range)) = chosen.iter().find(|(n, _)| n == w) {
                out.extend_from_slice(&g[range.clone()]);
            }
        }
        out
    };
    let mut outs = Kernel::new(format!("{name}_value_and_grad"), body)
        .param_names(c.names.clone())
        .config(*config)
        .statics(c.statics.clone())
        .cache_key(key)
        .run(device, &c.hosts)?
        .into_iter();
    let value = outs.next().ok_or_else(|| {
        Error::from(DeviceError::NoResult {
            call: "value_and_grad",
            what: "loss",
        })
    })?;
    Ok((value, outs.collect()))
}
