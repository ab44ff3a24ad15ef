//! [`Device`]: a PJRT client on a loaded plugin, the entry point for
//! compiling programs and moving tensors.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use super::buffer::DeviceBuffer;
use super::cache::attachments::Attachments;
use super::cache::mappings;
use super::client::{Client, CreateOption};
use super::executable::{self, Executable, Program};
use super::interpreter_backend::{Interpreter, InterpreterOptions};
use super::pjrt::api::{self, AttributeValue};
use super::plugin;
use crate::error::{DeviceError, Result};
use crate::host::HostTensor;

/// A PJRT client: one plugin (CPU, CUDA, TPU, ...) and its addressable devices.
///
/// Cheap to clone (shared), `Send + Sync`. Two `Device`s are equal when they
/// are the same client. Executables and buffers keep their client alive.
///
/// ```no_run
/// use tessel_dsl::runtime::{Device, Program};
/// use tessel_dsl::{HostTensor, TensorSpec, F32};
///
/// let dev = Device::cpu()?;
/// let spec = TensorSpec::new([2], F32);
/// let exe = dev.compile(&Program::new(
///     "double",
///     "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n\
///        %0 = stablehlo.add %a, %a : tensor<2xf32>\n\
///        return %0 : tensor<2xf32>\n\
///      }",
///     vec![spec.clone()],
///     vec![spec],
/// ))?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
/// let y = exe.run(&[&x])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 4.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    backend: Backend,
    attachments: Arc<Attachments>,
}

/// What runs a device's programs.
#[derive(Clone)]
enum Backend {
    /// A PJRT client on a loaded plugin.
    Pjrt(Arc<Client>),
    /// tessel's own interpreter, on the host.
    Interpreter(Arc<Interpreter>),
}

/// The shared attachments in `slot`, or new ones left in it (weakly).
fn shared_attachments(slot: &Mutex<Weak<Attachments>>) -> Arc<Attachments> {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    match slot.upgrade() {
        Some(a) => a,
        None => {
            let a = Arc::new(Attachments::default());
            *slot = Arc::downgrade(&a);
            a
        }
    }
}

impl Device {
    /// A device over `client`, sharing the attachments (compile caches) of
    /// any other live `Device` over the same client.
    pub(crate) fn from_client(client: Arc<Client>) -> Device {
        let attachments = shared_attachments(&client.attachments);
        Device {
            backend: Backend::Pjrt(client),
            attachments,
        }
    }

    /// A device over `interpreter`, sharing its attachments likewise.
    pub(crate) fn from_interpreter(interpreter: Arc<Interpreter>) -> Device {
        let attachments = shared_attachments(&interpreter.attachments);
        Device {
            backend: Backend::Interpreter(interpreter),
            attachments,
        }
    }

    /// The PJRT client (`None` on the interpreter).
    pub(crate) fn client(&self) -> Option<&Arc<Client>> {
        match &self.backend {
            Backend::Pjrt(c) => Some(c),
            Backend::Interpreter(_) => None,
        }
    }

    /// The value of type `T` attached to this device's client, created with
    /// `T::default()` on first use and shared by every `Device` over the same
    /// client while one is alive. Layers above the runtime keep per-device
    /// state here (the kernel layer's compile cache, for one) without the
    /// runtime knowing their types.
    pub fn attachment<T: std::any::Any + Default + Send + Sync>(&self) -> Arc<T> {
        self.attachments.get_or_default::<T>()
    }

    /// The process-wide interpreter device: tessel's own evaluator of traced
    /// kernels ([`interp`](crate::interp)), on the host, with every
    /// [`Checks`](crate::interp::Checks) on and findings printed as
    /// warnings. No plugin is loaded, fetched or needed; kernels run with
    /// XLA's semantics, slowly (op by op), and report the first NaN an op
    /// makes from finite operands and every index XLA would clamp, naming
    /// the op, the kernel and the source line.
    ///
    /// It runs programs traced by tessel (kernels, `Kernel`s, profiles);
    /// a hand-written [`Program`] (StableHLO text only) is a compile error
    /// here. One device, one partition, one replica.
    ///
    /// ```
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let dev = Device::interpreter();
    /// let k = Kernel::new("axpy", |a: &[Tensor]| a[0] * 2.0 + a[1]);
    /// let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
    /// let y = HostTensor::from_vec(vec![10.0f32, 20.0], [2])?;
    /// assert_eq!(k.run(&dev, &[&x, &y])?[0].to_vec::<f32>()?, vec![12.0, 24.0]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn interpreter() -> Device {
        static DEFAULT: OnceLock<Arc<Interpreter>> = OnceLock::new();
        let interpreter = DEFAULT
            .get_or_init(|| Arc::new(Interpreter::new(InterpreterOptions::default())))
            .clone();
        Device::from_interpreter(interpreter)
    }

    /// A new interpreter device with its own options (and its own compile
    /// cache): for example [`OnFinding::Error`](super::OnFinding::Error) to
    /// fail a run on the first finding, or
    /// [`Checks::NONE`](crate::interp::Checks::NONE) to run unchecked.
    pub fn interpreter_with(options: InterpreterOptions) -> Device {
        Device::from_interpreter(Arc::new(Interpreter::new(options)))
    }

    /// Whether this device is the interpreter rather than a PJRT plugin.
    pub fn is_interpreter(&self) -> bool {
        matches!(self.backend, Backend::Interpreter(_))
    }

    /// The device named by the `TESSEL_DEVICE` environment variable:
    /// `cpu` (the default when it is unset or empty), `cpu:N` (a CPU client
    /// with N devices), `gpu`, `tpu`, or `interpreter`. Anything else is
    /// [`DeviceError::InvalidDevice`] listing the allowed values.
    ///
    /// ```no_run
    /// // TESSEL_DEVICE=interpreter cargo run --example quickstart
    /// let dev = tessel_dsl::runtime::Device::from_env()?;
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn from_env() -> Result<Device> {
        let value = std::env::var("TESSEL_DEVICE").unwrap_or_default();
        Device::from_name(&value)
    }

    /// The device a name stands for, as [`from_env`](Self::from_env) reads
    /// it: `cpu`, `cpu:N`, `gpu`, `tpu` or `interpreter` (`""` is `cpu`).
    pub fn from_name(name: &str) -> Result<Device> {
        let name = name.trim();
        let bad = || DeviceError::InvalidDevice {
            name: name.to_string(),
        };
        match name {
            "" | "cpu" => Device::cpu(),
            "gpu" | "cuda" => Device::gpu(),
            "tpu" => Device::tpu(),
            "interpreter" | "interpret" => Ok(Device::interpreter()),
            _ => match name.strip_prefix("cpu:") {
                Some(n) => Device::cpu_with_devices(n.parse().map_err(|_| bad())?),
                None => Err(bad().into()),
            },
        }
    }

    /// The process-wide default CPU device: the XLA CPU plugin (found or
    /// fetched as [`cpu_plugin_path`](super::cpu_plugin_path) describes) with
    /// **one** CPU device, which XLA runs multi-threaded. Created on first use
    /// and shared afterwards; a failure is returned and retried on the next call.
    ///
    /// For several CPU devices (sharding tests), use [`Device::cpu_with_devices`].
    pub fn cpu() -> Result<Device> {
        static DEFAULT: Mutex<Option<Device>> = Mutex::new(None);
        let mut default = DEFAULT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(device) = default.as_ref() {
            return Ok(device.clone());
        }
        let device = Device::cpu_with_devices(1)?;
        *default = Some(device.clone());
        Ok(device)
    }

    /// A new CPU client with `n` devices (`1 <= n <=`
    /// [`MAX_CPU_DEVICES`](crate::error::MAX_CPU_DEVICES)), on the same
    /// plugin as [`Device::cpu`].
    pub fn cpu_with_devices(n: usize) -> Result<Device> {
        let count = i64::try_from(n)
            .ok()
            .filter(|c| (1..=crate::error::MAX_CPU_DEVICES as i64).contains(c))
            .ok_or(DeviceError::DeviceCount { requested: n })?;
        let path = plugin::cpu_plugin_path()?;
        let options = [("cpu_device_count", CreateOption::Int64(count))];
        Device::from_plugin_with_options(&path, &options).map_err(|e| match e {
            crate::Error::Device(DeviceError::PluginLoad { path, message })
                if plugin::is_cached(&path) =>
            {
                let dir = path.parent().unwrap_or(&path).display().to_string();
                DeviceError::PluginLoad {
                    message: format!(
                        "{message} (this is tessel's cached copy: delete {dir} to fetch it again)"
                    ),
                    path,
                }
                .into()
            }
            other => other,
        })
    }

    /// A client on any PJRT plugin (`.so`), with default create options.
    pub fn from_plugin(path: impl AsRef<Path>) -> Result<Device> {
        Device::from_plugin_with_options(path, &[])
    }

    /// A client on any PJRT plugin with plugin-specific create options (for
    /// example the GPU plugin's `memory_fraction` as a [`CreateOption::Float`]).
    ///
    /// The plugin file is loaded once per process and never unloaded.
    pub fn from_plugin_with_options(
        path: impl AsRef<Path>,
        options: &[(&str, CreateOption)],
    ) -> Result<Device> {
        let api = api::load(path.as_ref())?;
        let client = Client::create(api, options)?;
        Ok(Device::from_client(Arc::new(client)))
    }

    /// A CUDA GPU client: the plugin from `TESSEL_PJRT_GPU_PLUGIN` or an
    /// installed `jax-cuda13-pjrt` / `jax-cuda12-pjrt` Python package (see
    /// [`gpu_plugin_path`](super::gpu_plugin_path)). Never fetched.
    ///
    /// NVIDIA's pip-installed libraries next to the plugin (`pip install
    /// "jax[cuda13]"` puts them in `site-packages/nvidia`) are loaded first,
    /// as JAX does (see [`preload_nvidia_libraries`](super::preload_nvidia_libraries)).
    pub fn gpu() -> Result<Device> {
        let path = plugin::gpu_plugin_path()?;
        super::plugin::nvidia::preload_nvidia_libraries(&path)?;
        Device::from_plugin(path)
    }

    /// A Cloud TPU client: libtpu from `TPU_LIBRARY_PATH` or the installed
    /// `libtpu` Python package (see [`tpu_plugin_path`](super::tpu_plugin_path)).
    /// Returns an error without loading anything when libtpu is not found.
    pub fn tpu() -> Result<Device> {
        Device::from_plugin(plugin::tpu_plugin_path()?)
    }

    /// The platform family of this device's plugin (`None` for the
    /// interpreter and for a plugin whose platform tessel does not know).
    pub fn platform(&self) -> Option<crate::config::Platform> {
        self.client()?.platform()
    }

    /// The plugin's platform name (`cpu`, `cuda`, `tpu`, ...), or
    /// `interpreter`.
    pub fn platform_name(&self) -> &str {
        match &self.backend {
            Backend::Pjrt(client) => client.platform_name(),
            Backend::Interpreter(_) => "interpreter",
        }
    }

    /// What this device's plugin is: its file and SHA-256, the PJRT API
    /// version, platform version, attributes and extensions, the build when
    /// tessel pins its hash, and so which [`Workaround`](super::Workaround)s
    /// apply to its programs. `None` for the interpreter. The first call
    /// for a plugin file tessel has not seen hashes it (about half a second
    /// for the CPU plugin's 250 MB); the hash is then recorded in the cache.
    ///
    /// ```no_run
    /// # use tessel_dsl::runtime::{Device, KnownPlugin};
    /// let dev = Device::cpu()?;
    /// let id = dev.plugin_identity().expect("a PJRT device");
    /// println!("{id}");
    /// assert_eq!(id.known, Some(KnownPlugin::XlaCpuPjrt001));
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn plugin_identity(&self) -> Option<&super::PluginIdentity> {
        Some(self.client()?.identity())
    }

    /// Number of addressable devices (1 for the interpreter).
    pub fn device_count(&self) -> usize {
        self.client().map_or(1, |c| c.devices().len())
    }

    /// The plugin file this client runs on (canonical path); `None` for the
    /// interpreter.
    pub fn plugin_path(&self) -> Option<&Path> {
        Some(self.client()?.api().path())
    }

    /// The PJRT C API version the plugin implements: (major, minor); `None`
    /// for the interpreter.
    pub fn api_version(&self) -> Option<(i32, i32)> {
        Some(self.client()?.api().version())
    }

    /// The plugin's `xla_version` attribute (XLA's version counter), if reported.
    pub fn xla_version(&self) -> Option<i64> {
        match self.client()?.api().attribute("xla_version")? {
            AttributeValue::Int64(v) => Some(*v),
            AttributeValue::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The newest StableHLO version the plugin accepts
    /// (`stablehlo_current_version`, for example `1.13.3`).
    pub fn stablehlo_version(&self) -> Option<String> {
        self.attribute_string("stablehlo_current_version")
    }

    /// The oldest StableHLO version the plugin accepts (`stablehlo_minimum_version`).
    pub fn stablehlo_minimum_version(&self) -> Option<String> {
        self.attribute_string("stablehlo_minimum_version")
    }

    fn attribute_string(&self, name: &str) -> Option<String> {
        self.client()?
            .api()
            .attribute(name)
            .map(ToString::to_string)
    }

    /// Every attribute the plugin reports (`PJRT_Plugin_Attributes`; none
    /// for the interpreter).
    pub fn plugin_attributes(&self) -> &[(String, AttributeValue)] {
        self.client().map_or(&[], |c| c.api().attributes())
    }

    /// Compiles a StableHLO program for this client.
    ///
    /// Checks that `num_partitions * num_replicas` devices exist and that
    /// the program's argument and result specs are within the size limits
    /// ([`TensorSpec::check_size`](crate::shape::TensorSpec::check_size)) first;
    /// that, and XLA's rejection, is [`DeviceError::Compile`] with the
    /// message.
    ///
    /// XLA's compiler recurses once per nested loop or branch, so it runs on
    /// a thread of its own with a large stack (reserved, touched only as
    /// deep as the program needs); a deeply nested kernel then compiles
    /// instead of overflowing the caller's stack.
    ///
    /// When the process holds more than [`REFUSE_PERCENT`](super::REFUSE_PERCENT)
    /// of the memory mappings the operating system allows, nothing is
    /// compiled: [`DeviceError::TooManyMappings`].
    ///
    /// On the [interpreter](Self::interpreter) nothing is compiled: the
    /// program's traced [`graph`](Program::graph) is kept for evaluation,
    /// and a program without one is a [`DeviceError::Compile`] error.
    pub fn compile(&self, program: &Program) -> Result<Executable> {
        const COMPILE_STACK: usize = 1 << 30;
        let client = match &self.backend {
            Backend::Pjrt(client) => client,
            Backend::Interpreter(interpreter) => {
                return executable::for_interpreter(interpreter, program)
            }
        };
        // A program that calls native functions needs tessel's FFI
        // handler registered with the plugin before XLA compiles it.
        let native = program.graph.as_ref().is_some_and(|g| {
            g.nodes
                .iter()
                .any(|n| matches!(n.op, tessel_ir::ir::Op::CustomCall { .. }))
        });
        if native {
            super::ffi_calls::ensure_registered(client.api())?;
        }
        // Past the mapping limit neither XLA nor a new thread can map
        // memory (see `mappings.rs`).
        if let Some(usage) = mappings::mapping_usage() {
            if usage.above(mappings::REFUSE_PERCENT) {
                return Err(DeviceError::TooManyMappings {
                    kernel: program.name.clone(),
                    in_use: usage.in_use,
                    limit: usage.limit,
                }
                .into());
            }
        }
        std::thread::scope(|scope| {
            match std::thread::Builder::new()
                .name("tessel-compile".into())
                .stack_size(COMPILE_STACK)
                .spawn_scoped(scope, || executable::compile(client, program))
            {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: compile here.
                Err(_) => executable::compile(client, program),
            }
        })
    }

    /// Copies a host tensor to addressable device 0.
    pub fn to_device(&self, host: &HostTensor) -> Result<DeviceBuffer> {
        self.to_device_on(host, 0)
    }

    /// Copies a host tensor to addressable device `device`.
    pub fn to_device_on(&self, host: &HostTensor, device: usize) -> Result<DeviceBuffer> {
        match &self.backend {
            Backend::Pjrt(client) => DeviceBuffer::from_host(client, host, device),
            Backend::Interpreter(interpreter) => {
                DeviceBuffer::on_interpreter(interpreter, host, device)
            }
        }
    }

    /// The address that identifies this device's client.
    fn identity(&self) -> *const () {
        match &self.backend {
            Backend::Pjrt(c) => Arc::as_ptr(c).cast(),
            Backend::Interpreter(i) => Arc::as_ptr(i).cast(),
        }
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        std::ptr::eq(self.identity(), other.identity())
    }
}

impl Eq for Device {}

impl Hash for Device {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.identity(), state);
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client = match &self.backend {
            Backend::Pjrt(client) => client,
            Backend::Interpreter(i) => return write!(f, "Device(interpreter, {:?})", i.options),
        };
        let (major, minor) = client.api().version();
        let count = client.devices().len();
        write!(
            f,
            "Device({}, {count} device{}, PJRT {major}.{minor}, {})",
            client.platform_name(),
            if count == 1 { "" } else { "s" },
            client.api().path().display()
        )
    }
}
