//! The macro-free kernel path: a closure over [`Tensor`]s, traced for given
//! argument specs, lowered, compiled (cached per device) and run. The
//! attribute macros expand into this.

pub mod autotune;
mod cache;
mod call_log;
pub(crate) mod kernel_grad;
mod key_hasher;
pub mod moe;
mod params;
mod shard_map;
mod sharded;
mod sparse_param;
mod static_key;
mod tree_checkpoint;
mod tree_kernel;
pub mod trees;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

pub use crate::config::{KernelConfig, Platform};
pub use cache::{CacheKey, CacheStats, CompileCache, DeviceCache, Lookup, DEFAULT_CAPACITY};
pub use call_log::{with_call_log, CallRecord};
pub use params::{single_output, ArgCollector, KernelOutput, KernelParam, ParamNames};
pub use sparse_param::{DeviceBlockSparse, ShardedBlockSparse};
pub use static_key::{distinct_candidates, StaticArg, StaticKey};
pub use tree_checkpoint::{
    load as load_tree, save as save_tree, save_with_metadata as save_tree_with_metadata,
};
pub use tree_kernel::TreeKernel;

use crate::error::{KernelError, Location, Result};
use crate::host::HostTensor;
use crate::ir::{Graph, MeshAxes, TreeDef};
use crate::lower::lower;
use crate::runtime::{Device, DeviceBuffer, Executable, Program};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::{trace, trace_on_mesh, Outputs};

/// A kernel built from a closure, with optional parameter names, config and
/// static-argument key.
///
/// **Cache identity.** A compiled program is reused for a later call with
/// the same identity, argument specs, static key and config. The identity is
/// the explicit [`cache_key`](Self::cache_key) when one is set (the macros
/// set the function's full path), else the name together with the source
/// location of `Kernel::new`: two closures written in different places never
/// share a program, even under one name. Values a closure *captures* are not
/// seen by the cache: a closure built in one place with different captured
/// values (a helper that returns `Kernel::new(.., move |a| a[0] * k)`) must
/// declare them with [`statics`](Self::statics), or it gets the program
/// traced for the first value.
///
/// ```no_run
/// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
/// let k = Kernel::new("axpy", |a: &[Tensor]| a[0] * 2.0 + a[1]).params(["x", "y"]);
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
/// let y = HostTensor::from_vec(vec![10.0f32, 20.0], [2])?;
/// let out = k.run(&dev, &[&x, &y])?;
/// assert_eq!(out[0].to_vec::<f32>()?, vec![12.0, 24.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub struct Kernel<F> {
    name: Cow<'static, str>,
    params: ParamNames,
    config: KernelConfig,
    statics: StaticKey,
    key: Option<Cow<'static, str>>,
    origin: Location,
    /// Arguments donated by index ([`donate_args`](Self::donate_args)).
    donated: Vec<usize>,
    /// Arguments donated by name or path prefix ([`donate`](Self::donate)).
    donated_paths: Vec<Cow<'static, str>>,
    /// The structure of the results of the program last compiled or
    /// fetched for a call ([`output_tree`](Self::output_tree)).
    last_tree: Mutex<Option<Arc<TreeDef>>>,
    body: F,
}

impl<F, O> Kernel<F>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    /// A kernel named `name` whose body is `body`.
    #[track_caller]
    pub fn new(name: impl Into<Cow<'static, str>>, body: F) -> Self {
        Kernel {
            name: name.into(),
            params: ParamNames::default(),
            config: KernelConfig::default(),
            statics: StaticKey::default(),
            key: None,
            origin: Location::caller(),
            donated: Vec::new(),
            donated_paths: Vec::new(),
            last_tree: Mutex::new(None),
            body,
        }
    }

    /// Names the parameters (for messages and program locations); also fixes their number.
    pub fn params<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.params = names.into_iter().map(Into::into).collect();
        self
    }

    /// [`params`](Self::params), from names already collected.
    pub fn param_names(mut self, names: ParamNames) -> Self {
        self.params = names;
        self
    }

    /// Uses `config` instead of the default.
    pub fn config(mut self, config: KernelConfig) -> Self {
        self.config = config;
        self
    }

    /// Donates the arguments at `indices` (JAX's `donate_argnums`): each
    /// one's buffer may be reused for the first result of its type, so a
    /// state passed in and returned is updated in place. Names built at
    /// run time need no `'static` strings here. After a call the donated
    /// buffers are consumed; passing one again is
    /// [`DeviceError::Arguments`](crate::DeviceError::Arguments) naming the
    /// kernel and the argument. An index past the arguments, or one with
    /// no result of its type, is a kernel error when the kernel is traced.
    ///
    /// ```
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let step = Kernel::new("step", |a: &[Tensor]| a[0] + a[1]).donate_args([0]);
    /// let dev = Device::cpu()?;
    /// let state = dev.to_device(&HostTensor::from_vec(vec![1.0f32, 2.0], [2])?)?;
    /// let delta = dev.to_device(&HostTensor::from_vec(vec![0.5f32, 0.5], [2])?)?;
    /// let next = step.call(&dev, &[&state, &delta])?;
    /// assert!(state.is_deleted()?);
    /// assert_eq!(next[0].to_host()?.to_vec::<f32>()?, vec![1.5, 2.5]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn donate_args(mut self, indices: impl IntoIterator<Item = usize>) -> Self {
        self.donated = indices.into_iter().collect();
        self.donated.sort_unstable();
        self.donated.dedup();
        self
    }

    /// Donates the arguments named `prefixes` (see [`params`](Self::params))
    /// and every argument under one of them as a path prefix: donating
    /// `state` donates `state`, `state.w` and `state.layers.0.wq`, not
    /// `stateful`. Like [`donate_args`](Self::donate_args) otherwise; a
    /// prefix that names no argument with a result of its type is a kernel
    /// error when the kernel is traced.
    ///
    /// ```
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let step = Kernel::new("step", |a: &[Tensor]| (a[0] + a[2], a[1] * 2.0))
    ///     .params(["state.w", "state.b", "delta"])
    ///     .donate(["state"]);
    /// let dev = Device::cpu()?;
    /// let h = |v: f32| HostTensor::from_vec(vec![v, v], [2]);
    /// let (w, b, d) = (dev.to_device(&h(1.0)?)?, dev.to_device(&h(2.0)?)?, dev.to_device(&h(0.5)?)?);
    /// let next = step.call(&dev, &[&w, &b, &d])?;
    /// assert!(w.is_deleted()? && b.is_deleted()? && !d.is_deleted()?);
    /// assert_eq!(next[1].to_host()?.to_vec::<f32>()?, vec![4.0, 4.0]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn donate<I, S>(mut self, prefixes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.donated_paths = prefixes.into_iter().map(Into::into).collect();
        self
    }

    /// Adds `value` to the static-argument part of the cache key: declare
    /// here, by value, what the body captured that changes the program.
    pub fn statics(mut self, value: impl StaticArg) -> Self {
        self.statics.push(&value);
        self
    }

    /// Sets the identity the compile cache files this kernel under (default:
    /// its name and where `Kernel::new` was called); the macros use the
    /// function's full path.
    pub fn cache_key(mut self, key: impl Into<Cow<'static, str>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Whether any argument is donated (by the config, index or prefix).
    pub(crate) fn donates(&self) -> bool {
        !(self.config.donate.is_empty() && self.donated.is_empty() && self.donated_paths.is_empty())
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.config.name.unwrap_or(&self.name)
    }

    pub(crate) fn check_arity(&self, n: usize, loc: Location) -> Result<()> {
        if !self.params.is_empty() && self.params.len() != n {
            return Err(KernelError {
                kernel: self.name().to_string(),
                op: "call".into(),
                operands: Vec::new(),
                message: format!(
                    "takes {} arguments ({}), got {n}",
                    self.params.len(),
                    self.params.iter().collect::<Vec<_>>().join(", ")
                ),
                location: loc,
                called_at: None,
            }
            .into());
        }
        Ok(())
    }

    /// Traces the body for arguments of `specs`.
    #[track_caller]
    pub fn trace(&self, specs: &[TensorSpec]) -> Result<Graph> {
        self.trace_at(specs, Location::caller())
    }

    /// [`trace`](Self::trace), with errors of the call itself (arity,
    /// donation) located at `loc`.
    pub(crate) fn trace_at(&self, specs: &[TensorSpec], loc: Location) -> Result<Graph> {
        self.trace_on(specs, None, loc)
    }

    /// [`trace_at`](Self::trace_at), as a per-device kernel on `mesh` when
    /// one is given (see [`run_shard_map`](Self::run_shard_map)).
    pub(crate) fn trace_on(
        &self,
        specs: &[TensorSpec],
        mesh: Option<MeshAxes>,
        loc: Location,
    ) -> Result<Graph> {
        self.check_arity(specs.len(), loc.clone())?;
        let params: Vec<(String, TensorSpec)> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = self
                    .params
                    .get(i)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| format!("arg{i}"));
                (n, s.clone())
            })
            .collect();
        let traced = match mesh {
            None => trace(self.name(), &params, self.config, |a| (self.body)(a)),
            Some(mesh) => {
                trace_on_mesh(self.name(), &params, self.config, mesh, |a| (self.body)(a))
            }
        };
        let mut graph = traced.map_err(|e| e.called_at(&loc))?;
        if let Some(&i) = graph.donate_indices(&self.donated).first() {
            return Err(KernelError {
                kernel: self.name().to_string(),
                op: "donate".into(),
                operands: graph.input_specs().iter().map(|s| s.to_string()).collect(),
                message: format!(
                    "argument {i} is donated but the kernel takes {} arguments, or no result has its \
                     type; a donated buffer is reused for a result of the same shape and dtype",
                    specs.len()
                ),
                location: loc,
                called_at: None,
            }
            .into());
        }
        let mut names: Vec<&str> = self.config.donate.to_vec();
        names.extend(self.donated_paths.iter().map(|p| &**p));
        let unmatched = graph.donate(&names);
        if let Some(name) = unmatched.first() {
            return Err(KernelError {
                kernel: self.name().to_string(),
                op: "donate".into(),
                operands: graph.input_specs().iter().map(|s| s.to_string()).collect(),
                message: format!(
                    "`{name}` is donated but no result has its type (or it is not a tensor parameter); \
                     a donated buffer is reused for a result of the same shape and dtype"
                ),
                location: loc,
                called_at: None,
            }
            .into());
        }
        Ok(graph)
    }

    /// The StableHLO text for arguments of `specs`, as traced (a CPU device
    /// compiles it with its long row reductions split, see
    /// [`Program::for_device`]).
    #[track_caller]
    pub fn lower(&self, specs: &[TensorSpec]) -> Result<String> {
        Ok(lower(&self.trace(specs)?))
    }

    /// The compiled executable for arguments of `specs`, from `device`'s cache
    /// when this kernel, specs, statics and config were compiled before.
    #[track_caller]
    pub fn compile(&self, device: &Device, specs: &[TensorSpec]) -> Result<Arc<Executable>> {
        Ok(self.compile_at(device, specs, Location::caller())?.0)
    }

    /// The cache key of a call with `specs` and extra static parts `extra`.
    pub(crate) fn cache_key_for(
        &self,
        specs: &[TensorSpec],
        extra: Option<&StaticKey>,
    ) -> CacheKey {
        self.cache_key_owned(specs.to_vec(), extra)
    }

    /// [`cache_key_for`](Self::cache_key_for), taking the specs.
    fn cache_key_owned(&self, specs: Vec<TensorSpec>, extra: Option<&StaticKey>) -> CacheKey {
        let mut statics = self.statics.clone();
        if !self.donated.is_empty() {
            // Donation changes the program (its aliases).
            statics.push(&("donate_args", self.donated.clone()));
        }
        if !self.donated_paths.is_empty() {
            statics.push(&"donate").push(&self.donated_paths.len());
            for p in &self.donated_paths {
                statics.push_bytes(p.as_bytes());
            }
        }
        if let Some(extra) = extra {
            statics.extend(extra);
        }
        CacheKey {
            kernel: match &self.key {
                Some(k) => k.clone(),
                None => Cow::Owned(format!("{}@{}", self.name(), self.origin)),
            },
            statics,
            specs,
            config: self.config,
        }
    }

    /// [`compile`](Self::compile), also telling whether the cache had it.
    /// A kernel configured to [`interpret`](KernelConfig::interpret) is
    /// compiled for the interpreter whatever `device` is.
    pub(crate) fn compile_at(
        &self,
        device: &Device,
        specs: &[TensorSpec],
        loc: Location,
    ) -> Result<(Arc<Executable>, Lookup)> {
        self.compile_owned(device, specs.to_vec(), loc)
    }

    /// [`compile_at`](Self::compile_at), taking the specs (a cached call
    /// copies none).
    fn compile_owned(
        &self,
        device: &Device,
        specs: Vec<TensorSpec>,
        loc: Location,
    ) -> Result<(Arc<Executable>, Lookup)> {
        let device = &self.target(device);
        let key = self.cache_key_owned(specs, None);
        let (exe, lookup) = device.cache().get_or_compile(key, |key| {
            let program = Program::for_device(self.trace_at(&key.specs, loc)?, device);
            Ok((program.mlir.clone(), move || device.compile(&program)))
        })?;
        self.note_outputs(&exe);
        Ok((exe, lookup))
    }

    /// Remembers the structure of `exe`'s results for
    /// [`output_tree`](Self::output_tree).
    pub(crate) fn note_outputs(&self, exe: &Executable) {
        if let Ok(mut t) = self.last_tree.lock() {
            *t = exe.output_tree().cloned();
        }
    }

    /// The structure of the results of the program this kernel last
    /// compiled or fetched from the cache for a call (`None` before the
    /// first): what [`KernelOutput`] rebuilds a flat result list into.
    pub fn output_tree(&self) -> Option<Arc<TreeDef>> {
        self.last_tree.lock().ok().and_then(|t| t.clone())
    }

    /// The device this kernel runs on when given `device`.
    pub(crate) fn target(&self, device: &Device) -> Device {
        if self.config.interpret && !device.is_interpreter() {
            Device::interpreter()
        } else {
            device.clone()
        }
    }

    /// Runs on host tensors: compile (cached), copy in, execute, copy out.
    #[track_caller]
    pub fn run(&self, device: &Device, args: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        Ok(self.run_at(device, args, Location::caller())?.0)
    }

    /// [`run`](Self::run), also giving the executable that ran.
    fn run_at(
        &self,
        device: &Device,
        args: &[&HostTensor],
        loc: Location,
    ) -> Result<(Vec<HostTensor>, Arc<Executable>)> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.run_specs_at(device, args, specs, loc)
    }

    /// [`run_at`](Self::run_at) with the arguments' specs already made.
    fn run_specs_at(
        &self,
        device: &Device,
        args: &[&HostTensor],
        specs: Vec<TensorSpec>,
        loc: Location,
    ) -> Result<(Vec<HostTensor>, Arc<Executable>)> {
        let t = std::time::Instant::now();
        let (exe, lookup) = self.compile_owned(device, specs, loc)?;
        let out = exe.run(args)?;
        call_log::record(self.name(), t.elapsed(), lookup == Lookup::Miss);
        Ok((out, exe))
    }

    /// [`run`](Self::run), with the results in the structure the body
    /// returned them: a `(Tensor, Tensor)` body gives `(HostTensor,
    /// HostTensor)`, a `#[derive(Tree)]` struct the same struct over host
    /// tensors.
    ///
    /// ```no_run
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let k = Kernel::new("split", |a: &[Tensor]| (a[0] * 2.0, vec![a[0] + 1.0]));
    /// let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
    /// let (twice, plus) = k.run_typed(&Device::cpu()?, &[&x])?;
    /// assert_eq!(plus[0].to_vec::<f32>()?, vec![2.0, 3.0]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    #[track_caller]
    pub fn run_typed(&self, device: &Device, args: &[&HostTensor]) -> Result<O::Host>
    where
        O: KernelOutput,
    {
        let (outs, exe) = self.run_at(device, args, Location::caller())?;
        O::from_host(outs, exe.output_tree().map(|t| &**t))
    }

    /// [`run_typed`](Self::run_typed) on the arguments `c` collected (its
    /// host tensors and their specs): what generated companions call.
    #[doc(hidden)]
    #[track_caller]
    pub fn run_collected(&self, device: &Device, c: &mut ArgCollector<'_>) -> Result<O::Host>
    where
        O: KernelOutput,
    {
        let specs = std::mem::take(&mut c.specs);
        let (outs, exe) = self.run_specs_at(device, &c.hosts, specs, Location::caller())?;
        O::from_host(outs, exe.output_tree().map(|t| &**t))
    }

    /// [`call_typed`](Self::call_typed) on the arguments `c` collected (its
    /// device buffers and their specs): what generated companions call.
    #[doc(hidden)]
    #[track_caller]
    pub fn call_collected(&self, device: &Device, c: &mut ArgCollector<'_>) -> Result<O::Buffer>
    where
        O: KernelOutput,
    {
        let specs = std::mem::take(&mut c.specs);
        let (outs, exe) = self.call_specs_at(device, &c.buffers, specs, Location::caller())?;
        O::from_buffers(outs, exe.output_tree().map(|t| &**t))
    }

    /// [`call`](Self::call), with the results in the structure the body
    /// returned them (device buffers as leaves).
    #[track_caller]
    pub fn call_typed(&self, device: &Device, args: &[&DeviceBuffer]) -> Result<O::Buffer>
    where
        O: KernelOutput,
    {
        let (outs, exe) = self.call_at(device, args, Location::caller())?;
        O::from_buffers(outs, exe.output_tree().map(|t| &**t))
    }

    /// Runs on device buffers, leaving the results on the device. A kernel
    /// configured to [`interpret`](KernelConfig::interpret) reads its
    /// arguments back to the host and puts its results on `device`.
    #[track_caller]
    pub fn call(&self, device: &Device, args: &[&DeviceBuffer]) -> Result<Vec<DeviceBuffer>> {
        Ok(self.call_at(device, args, Location::caller())?.0)
    }

    /// [`call`](Self::call), also giving the executable that ran.
    fn call_at(
        &self,
        device: &Device,
        args: &[&DeviceBuffer],
        loc: Location,
    ) -> Result<(Vec<DeviceBuffer>, Arc<Executable>)> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.call_specs_at(device, args, specs, loc)
    }

    /// [`call_at`](Self::call_at) with the arguments' specs already made.
    fn call_specs_at(
        &self,
        device: &Device,
        args: &[&DeviceBuffer],
        specs: Vec<TensorSpec>,
        loc: Location,
    ) -> Result<(Vec<DeviceBuffer>, Arc<Executable>)> {
        let t = std::time::Instant::now();
        let (exe, lookup) = self.compile_owned(device, specs, loc)?;
        let out = execute_on(&exe, device, args)?;
        call_log::record(self.name(), t.elapsed(), lookup == Lookup::Miss);
        Ok((out, exe))
    }

    /// The executable for a call with the arguments `c` collected, if the
    /// cache holds it compiled (nothing is traced or compiled).
    fn cached(&self, device: &Device, c: &mut ArgCollector<'_>) -> Option<Arc<Executable>> {
        let key = self.cache_key_owned(std::mem::take(&mut c.specs), None);
        let exe = self.target(device).cache().find(&key)?;
        self.note_outputs(&exe);
        Some(exe)
    }

    /// [`call_collected`](Self::call_collected) when the program is
    /// cached: `Ok(None)` (and nothing run) when it is not, and the caller
    /// collects the arguments again with their names and makes the full
    /// call. What generated companions try first: a cached call needs no
    /// parameter names.
    #[doc(hidden)]
    pub fn call_cached(
        &self,
        device: &Device,
        c: &mut ArgCollector<'_>,
    ) -> Result<Option<O::Buffer>>
    where
        O: KernelOutput,
    {
        let t = std::time::Instant::now();
        let Some(exe) = self.cached(device, c) else {
            return Ok(None);
        };
        let outs = execute_on(&exe, device, &c.buffers)?;
        call_log::record(self.name(), t.elapsed(), false);
        O::from_buffers(outs, exe.output_tree().map(|t| &**t)).map(Some)
    }

    /// [`run_collected`](Self::run_collected) when the program is cached
    /// (see [`call_cached`](Self::call_cached)).
    #[doc(hidden)]
    pub fn run_cached(&self, device: &Device, c: &mut ArgCollector<'_>) -> Result<Option<O::Host>>
    where
        O: KernelOutput,
    {
        let t = std::time::Instant::now();
        let Some(exe) = self.cached(device, c) else {
            return Ok(None);
        };
        let outs = exe.run(&c.hosts)?;
        call_log::record(self.name(), t.elapsed(), false);
        O::from_host(outs, exe.output_tree().map(|t| &**t)).map(Some)
    }
}

/// Runs `exe` on `args`, on `device`; a program compiled for the
/// interpreter reads its arguments back to the host and puts its results on
/// `device`.
fn execute_on(
    exe: &Executable,
    device: &Device,
    args: &[&DeviceBuffer],
) -> Result<Vec<DeviceBuffer>> {
    if exe.is_interpreted() && !device.is_interpreter() {
        let hosts = args
            .iter()
            .map(|a| a.to_host())
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&HostTensor> = hosts.iter().collect();
        exe.run(&refs)?
            .iter()
            .map(|h| device.to_device(h))
            .collect()
    } else {
        exe.execute(args)
    }
}
