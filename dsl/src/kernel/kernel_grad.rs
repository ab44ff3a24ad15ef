//! An attribute kernel's `value_and_grad` companion: the kernel's scalar
//! loss and its gradients with respect to the tensor parameters named at
//! the call. Generic over the kernel's parameters, which the expansion
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
    /// Each parameter's tensor, if it is one, in order.
    fn primals(&self, out: &mut Vec<Option<Tensor>>);
    /// The parameters with each tensor whose flag is set replaced by the
    /// next of `next`.
    fn substitute(
        self,
        flags: &mut dyn Iterator<Item = bool>,
        next: &mut dyn Iterator<Item = Tensor>,
    ) -> Self;
}

impl ParamList for () {
    fn primals(&self, _: &mut Vec<Option<Tensor>>) {}
    fn substitute(
        self,
        _: &mut dyn Iterator<Item = bool>,
        _: &mut dyn Iterator<Item = Tensor>,
    ) -> Self {
    }
}

impl<H: KernelParam, T: ParamList> ParamList for (H, T) {
    fn primals(&self, out: &mut Vec<Option<Tensor>>) {
        out.push(self.0.primal());
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
/// called by `call`; returns the loss and one gradient per name of `wrt`,
/// in order. A name that is not a tensor parameter is a kernel error
/// naming the parameters. Compiled once per `wrt`, specs, statics and
/// config.
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
        let (mut chosen, mut primals) = (Vec::new(), Vec::new());
        for (p, t) in params.iter().zip(each) {
            if let (true, Some(t)) = (wrt.contains(p), t) {
                chosen.push(*p);
                primals.push(t);
            }
        }
        if let Some(w) = wrt.iter().find(|w| !chosen.contains(w)) {
            let message = format!(
                "`{w}` is not a tensor parameter of `{name}` (parameters: {}); a tree parameter is \
                 differentiated inside a kernel with `value_and_grad`, whose gradients have its type",
                params.join(", ")
            );
            return vec![trace_error("value_and_grad", &primals, message)];
        }
        let flags: Vec<bool> = params.iter().map(|p| chosen.contains(p)).collect();
        let (v, g) = value_and_grad(
            |x: Vec<Tensor>| {
                let args = args.substitute(&mut flags.iter().copied(), &mut x.into_iter());
                single_output(name, call(args))
            },
            primals,
        );
        let mut out = vec![v];
        out.extend(
            wrt.iter()
                .filter_map(|w| chosen.iter().position(|n| n == w))
                .map(|i| g[i]),
        );
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
