//! The macro-free kernel over a tree: a closure taking one tree argument
//! (a tensor, a tuple, a `#[derive(Tree)]` struct, ...) and returning a
//! tree, called with the host, device or spec form of the same tree.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use super::params::{ArgCollector, KernelOutput};
use super::static_key::{StaticArg, StaticKey};
use super::trees::{bind_tree, collect_leaves, ArgLeaf};
use super::Kernel;
use crate::config::KernelConfig;
use crate::error::{Location, Result};
use crate::host::HostTensor;
use crate::ir::tree::TreeValue;
use crate::lower::lower;
use crate::ops::carry::Carry;
use crate::runtime::{Device, DeviceBuffer, Executable};
use crate::trace::tensor::Tensor;

/// A kernel whose body takes one tree of tensors: `run`, `call`, `lower`
/// and `compile` take the same tree with host tensors, device buffers or
/// specs (any of them, for `lower` and `compile`: example arguments are
/// enough) as leaves, and results come back in the structure the body
/// returned. The leaves are the program's parameters, named by their
/// paths (`0.layers.1.wq` for the first element of a tuple argument); the
/// structure (lengths, variants, static fields) is part of the compile key.
///
/// ```no_run
/// # extern crate tessel_dsl as tessel;
/// use tessel::{kernel::TreeKernel, runtime::Device, tree, HostTensor, Tensor, Tree};
///
/// #[derive(Tree)]
/// struct Linear<T = Tensor> {
///     w: T,
///     b: T,
/// }
///
/// let step = TreeKernel::new("sgd", |(p, g): (Linear, Linear)| Linear {
///     w: p.w - g.w * 0.1,
///     b: p.b - g.b * 0.1,
/// })
/// .donate(["0"]);
/// let dev = Device::cpu()?;
/// let v = |x: f32| HostTensor::from_vec(vec![x; 4], [4]);
/// let args = tree::to_device(&dev, &(Linear { w: v(1.0)?, b: v(0.0)? }, Linear { w: v(1.0)?, b: v(2.0)? }))?;
/// let exe = step.compile(&dev, &args)?; // specs read from the buffers
/// assert_eq!(exe.outputs().len(), 2);
/// let next = step.call(&dev, &args)?; // the compiled program, from the cache
/// assert!(args.0.w.is_deleted()?); // donated
/// assert_eq!(next.b.to_host()?.to_vec::<f32>()?, vec![-0.2; 4]);
/// # Ok::<(), tessel::Error>(())
/// ```
pub struct TreeKernel<A, F> {
    name: String,
    config: KernelConfig,
    statics: StaticKey,
    key: String,
    donated: Vec<Cow<'static, str>>,
    body: F,
    arg: PhantomData<fn(A)>,
}

impl<A, F, O> TreeKernel<A, F>
where
    A: Carry,
    F: Fn(A) -> O,
    O: KernelOutput,
{
    /// A kernel named `name` whose body is `body`; its compile-cache
    /// identity is the name and where `new` was called (see [`Kernel`]).
    #[track_caller]
    pub fn new(name: impl Into<String>, body: F) -> Self {
        let name = name.into();
        let key = format!("{name}@{}", Location::caller());
        TreeKernel {
            name,
            config: KernelConfig::default(),
            statics: StaticKey::default(),
            key,
            donated: Vec::new(),
            body,
            arg: PhantomData,
        }
    }

    /// Uses `config` instead of the default.
    pub fn config(mut self, config: KernelConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds `value` to the static part of the cache key (what the body
    /// captured that changes the program; see [`Kernel::statics`]).
    pub fn statics(mut self, value: impl StaticArg) -> Self {
        self.statics.push(&value);
        self
    }

    /// Sets the identity the compile cache files this kernel under.
    pub fn cache_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Donates every leaf under the path prefixes `prefixes` (`"0"` for the
    /// first element of a tuple argument, `"state"` for a field): each
    /// one's buffer is reused for the first result of its type, and using
    /// it after the call is an error naming the kernel and the leaf's path.
    pub fn donate<I, S>(mut self, prefixes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.donated = prefixes.into_iter().map(Into::into).collect();
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The flat kernel for the argument tree `args` (whose leaves are
    /// collected into `c`).
    fn flat<'s, X>(
        &'s self,
        args: &'s X,
        c: &mut ArgCollector<'s>,
    ) -> Kernel<impl Fn(&[Tensor]) -> O + 's>
    where
        X: TreeValue<Tree = A>,
        X::Leaf: ArgLeaf,
    {
        let args = args.as_form();
        collect_leaves::<A, X::Leaf>(args, None, c);
        let mut statics = self.statics.clone();
        statics.extend(&std::mem::take(&mut c.statics));
        let body =
            move |t: &[Tensor]| (self.body)(bind_tree::<A, X::Leaf>(args, &mut t.iter().copied()));
        Kernel::new(self.name.clone(), body)
            .param_names(std::mem::take(&mut c.names))
            .config(self.config)
            .statics(statics)
            .cache_key(self.key.clone())
            .donate(self.donated.clone())
    }

    /// Runs on a tree of host tensors: compile (cached), copy in, execute,
    /// copy out.
    #[track_caller]
    pub fn run<X>(&self, device: &Device, args: &X) -> Result<O::Host>
    where
        X: TreeValue<Tree = A, Leaf = HostTensor>,
    {
        let mut c = ArgCollector::unnamed();
        if let Some(out) = self.flat(args, &mut c).run_cached(device, &mut c)? {
            return Ok(out);
        }
        let mut c = ArgCollector::default();
        let k = self.flat(args, &mut c);
        k.run_collected(device, &mut c)
    }

    /// Runs on a tree of device buffers, leaving the results on the device.
    #[track_caller]
    pub fn call<X>(&self, device: &Device, args: &X) -> Result<O::Buffer>
    where
        X: TreeValue<Tree = A, Leaf = DeviceBuffer>,
    {
        let mut c = ArgCollector::unnamed();
        if let Some(out) = self.flat(args, &mut c).call_cached(device, &mut c)? {
            return Ok(out);
        }
        let mut c = ArgCollector::default();
        let k = self.flat(args, &mut c);
        k.call_collected(device, &mut c)
    }

    /// The StableHLO text for arguments like `args`: a tree of specs, host
    /// tensors or device buffers (only their specs are read).
    #[track_caller]
    pub fn lower<X>(&self, args: &X) -> Result<String>
    where
        X: TreeValue<Tree = A>,
        X::Leaf: ArgLeaf,
    {
        let mut c = ArgCollector::default();
        let k = self.flat(args, &mut c);
        Ok(lower(&k.trace(&c.specs)?))
    }

    /// The compiled executable for arguments like `args` (specs, host
    /// tensors or device buffers), from `device`'s cache when compiled
    /// before: a later `run` or `call` with arguments of these specs
    /// reuses it.
    #[track_caller]
    pub fn compile<X>(&self, device: &Device, args: &X) -> Result<Arc<Executable>>
    where
        X: TreeValue<Tree = A>,
        X::Leaf: ArgLeaf,
    {
        let mut c = ArgCollector::default();
        let k = self.flat(args, &mut c);
        k.compile(device, &c.specs)
    }
}
