//! The macro-free kernel path: a closure over [`Tensor`]s, traced for given
//! argument specs, lowered, compiled (cached per device) and run. The
//! attribute macros expand into this.

mod cache;
mod config;
mod params;
mod sharded;

use std::sync::Arc;

pub use cache::{CacheKey, CacheStats, CompileCache};
pub use config::{KernelConfig, Platform};
pub use params::{ArgCollector, KernelOutput, KernelParam, StaticArg};

use crate::error::{KernelError, Location, Result};
use crate::graph::Graph;
use crate::host::HostTensor;
use crate::lower::lower;
use crate::runtime::{Device, DeviceBuffer, Executable, Program};
use crate::shape::TensorSpec;
use crate::tensor::Tensor;
use crate::trace::{trace, Outputs};

/// A kernel built from a closure, with optional parameter names, config and
/// static-argument key.
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
    name: String,
    params: Vec<String>,
    config: KernelConfig,
    statics: String,
    key: Option<String>,
    body: F,
}

impl<F, O> Kernel<F>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    /// A kernel named `name` whose body is `body`.
    pub fn new(name: impl Into<String>, body: F) -> Self {
        Kernel {
            name: name.into(),
            params: Vec::new(),
            config: KernelConfig::default(),
            statics: String::new(),
            key: None,
            body,
        }
    }

    /// Names the parameters (for messages and program locations); also fixes their number.
    pub fn params<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.params = names.into_iter().map(Into::into).collect();
        self
    }

    /// Uses `config` instead of the default.
    pub fn config(mut self, config: KernelConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the static-argument part of the cache key (what the body captured
    /// that changes the program).
    pub fn statics(mut self, key: impl Into<String>) -> Self {
        self.statics = key.into();
        self
    }

    /// Sets the identity the compile cache files this kernel under (default:
    /// its name); the macros use the function's full path.
    pub fn cache_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.config.name.unwrap_or(&self.name)
    }

    fn check_arity(&self, n: usize, loc: Location) -> Result<()> {
        if !self.params.is_empty() && self.params.len() != n {
            return Err(KernelError {
                kernel: self.name().to_string(),
                op: "call".into(),
                operands: Vec::new(),
                message: format!(
                    "takes {} arguments ({}), got {n}",
                    self.params.len(),
                    self.params.join(", ")
                ),
                location: loc,
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
        self.check_arity(specs.len(), loc.clone())?;
        let params: Vec<(String, TensorSpec)> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = self
                    .params
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("arg{i}"));
                (n, s.clone())
            })
            .collect();
        let mut graph = trace(self.name(), &params, self.config, |a| (self.body)(a))?;
        let unmatched = graph.donate(self.config.donate);
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
            }
            .into());
        }
        Ok(graph)
    }

    /// The StableHLO text for arguments of `specs`.
    #[track_caller]
    pub fn lower(&self, specs: &[TensorSpec]) -> Result<String> {
        Ok(lower(&self.trace(specs)?))
    }

    /// The compiled executable for arguments of `specs`, from `device`'s cache
    /// when this kernel, specs, statics and config were compiled before.
    #[track_caller]
    pub fn compile(&self, device: &Device, specs: &[TensorSpec]) -> Result<Arc<Executable>> {
        let loc = Location::caller();
        let key = CacheKey {
            kernel: self.key.clone().unwrap_or_else(|| self.name().to_string()),
            statics: self.statics.clone(),
            specs: specs.to_vec(),
            config: self.config,
        };
        let cache = device.cache();
        if let Some(exe) = cache.get(&key) {
            return Ok(exe);
        }
        self.check_arity(specs.len(), loc)?;
        let graph = self.trace(specs)?;
        let text = lower(&graph);
        let program = Program {
            name: self.name().to_string(),
            mlir: text.clone(),
            inputs: graph.input_specs(),
            outputs: graph.output_specs(),
            num_partitions: 1,
            num_replicas: 1,
        };
        cache.insert_with(key, &text, || device.compile(&program))
    }

    /// Runs on host tensors: compile (cached), copy in, execute, copy out.
    #[track_caller]
    pub fn run(&self, device: &Device, args: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        let t = std::time::Instant::now();
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        let misses = device.cache().stats().misses;
        let out = self.compile(device, &specs)?.run(args)?;
        let compiled = device.cache().stats().misses != misses;
        crate::profile::record(self.name(), t.elapsed(), compiled);
        Ok(out)
    }

    /// Traces, compiles afresh (bypassing the cache) and times the kernel on
    /// `args`; see [`Profile`](crate::profile::Profile).
    #[track_caller]
    pub fn profile(
        &self,
        device: &Device,
        args: &[&HostTensor],
        options: crate::profile::ProfileOptions,
    ) -> Result<crate::profile::Profile> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        let loc = Location::caller();
        self.check_arity(specs.len(), loc)?;
        crate::profile::profile_graph(device, || self.trace(&specs), args, options)
    }

    /// Runs on device buffers, leaving the results on the device.
    #[track_caller]
    pub fn call(&self, device: &Device, args: &[&DeviceBuffer]) -> Result<Vec<DeviceBuffer>> {
        let t = std::time::Instant::now();
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        let misses = device.cache().stats().misses;
        let out = self.compile(device, &specs)?.execute(args)?;
        let compiled = device.cache().stats().misses != misses;
        crate::profile::record(self.name(), t.elapsed(), compiled);
        Ok(out)
    }
}
