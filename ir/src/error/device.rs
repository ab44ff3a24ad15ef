//! The errors of the runtime's layer (raised by tessel-pjrt): the plugin,
//! its clients, buffers, executables and the coordinator.

use std::path::PathBuf;

use super::plural;

/// The most devices `Device::cpu_with_devices` creates. The CPU plugin
/// builds every device up front (a client of 100,000 devices grows without
/// end); 4096 is far past any mesh one machine can use.
pub const MAX_CPU_DEVICES: usize = 4096;

/// An error from the PJRT plugin or the runtime around it.
///
/// New variants may be added; match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No plugin could be found or fetched.
    #[error("no PJRT plugin found: {0}")]
    PluginNotFound(String),
    /// The plugin file exists but could not be loaded or is not a PJRT plugin.
    #[error("cannot load PJRT plugin {path}: {message}")]
    PluginLoad {
        /// The plugin's path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The plugin speaks a PJRT API this build cannot use.
    #[error("incompatible PJRT plugin {path}: {message}")]
    Incompatible {
        /// The plugin's path.
        path: PathBuf,
        /// What is incompatible.
        message: String,
    },
    /// A PJRT call returned an error.
    #[error("{call} failed ({code}): {message}")]
    Pjrt {
        /// The PJRT function that failed.
        call: &'static str,
        /// The status code name (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, ...).
        code: String,
        /// The plugin's message.
        message: String,
    },
    /// XLA rejected the program.
    #[error("XLA could not compile kernel `{kernel}`: {message}")]
    Compile {
        /// The kernel.
        kernel: String,
        /// XLA's message.
        message: String,
    },
    /// The process holds nearly as many memory mappings as the operating
    /// system allows (`tessel::runtime::REFUSE_PERCENT` of
    /// `vm.max_map_count`), so compiling another program could not map its
    /// code; see `tessel::runtime::mapping_usage`.
    #[error(
        "cannot compile kernel `{kernel}`: the process holds {in_use} of the {limit} memory mappings the \
         operating system allows (vm.max_map_count), and each compiled program holds some (about 100 for \
         flash attention); drop executables you keep, lower the compile cache's capacity \
         (TESSEL_COMPILE_CACHE_ENTRIES) or raise vm.max_map_count"
    )]
    TooManyMappings {
        /// The kernel.
        kernel: String,
        /// Mappings in use.
        in_use: usize,
        /// The limit.
        limit: usize,
    },
    /// The device ran out of memory.
    #[error("out of device memory in {call}: {message}")]
    OutOfMemory {
        /// The PJRT function that failed.
        call: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// The arguments given to a compiled executable do not match what it was compiled for.
    #[error("bad arguments for `{kernel}`: {message}")]
    Arguments {
        /// The kernel.
        kernel: String,
        /// Which argument and why.
        message: String,
    },
    /// A device mesh that cannot be built, or a sharding that does not fit
    /// its mesh or its tensor.
    #[error("sharding: {0}")]
    Sharding(String),
    /// A device index beyond the client's addressable devices.
    #[error(
        "device index {index} is out of range: the {platform} client has {count} addressable device{}",
        plural(*.count)
    )]
    DeviceIndex {
        /// The index asked for.
        index: usize,
        /// The client's platform (`cpu`, `cuda`, ...).
        platform: String,
        /// How many addressable devices the client has.
        count: usize,
    },
    /// A plugin create option given with a type the plugin does not take
    /// for it (the plugin would abort the process).
    #[error("plugin option `{name}` takes {expected}, got {got}")]
    CreateOptionType {
        /// The option.
        name: String,
        /// The type the plugins take for it.
        expected: &'static str,
        /// The type given.
        got: &'static str,
    },
    /// A CPU client asked for with no devices, or more than
    /// [`MAX_CPU_DEVICES`].
    #[error(
        "a CPU client needs at least 1 device (and at most {}), got {requested}",
        MAX_CPU_DEVICES
    )]
    DeviceCount {
        /// The number of devices asked for.
        requested: usize,
    },
    /// A question only a compiled (PJRT) executable can answer, asked of
    /// one that runs on the interpreter.
    #[error("kernel `{kernel}` runs on the interpreter, which compiles nothing: no {what}")]
    NotCompiled {
        /// The kernel.
        kernel: String,
        /// What was asked (`cost_analysis`, `memory_stats`).
        what: &'static str,
    },
    /// A device name (`TESSEL_DEVICE`, `Device::from_name`) that names no device.
    #[error("unknown device `{name}`: expected cpu, cpu:N (N devices), gpu, tpu or interpreter")]
    InvalidDevice {
        /// The name given.
        name: String,
    },
    /// A multi-process client that cannot be set up: bad process ids, or no
    /// coordinator to meet at.
    #[error("multi-process client: {0}")]
    Distributed(String),
    /// A tensor extent too large for PJRT, which describes shapes in `i64`.
    #[error("extent {extent} of {spec} does not fit in i64")]
    ExtentTooLarge {
        /// The tensor's type, as `f32[2,3]`.
        spec: String,
        /// The extent that does not fit.
        extent: usize,
    },
    /// The device holds data of an element type tessel has no [`DType`](crate::DType) for.
    #[error("the device returned a buffer of {element_type}, which tessel does not support")]
    UnsupportedElementType {
        /// The element type's name (`u16`, `c64`, ...).
        element_type: String,
    },
    /// A PJRT call reported success but returned no handle.
    #[error("{call} succeeded but returned no {what}")]
    NoResult {
        /// The PJRT function.
        call: &'static str,
        /// What it should have returned (`client`, `buffer`, ...).
        what: &'static str,
    },
    /// A PJRT call returned something that contradicts what was asked of it.
    #[error("unexpected result from {call}: {message}")]
    UnexpectedResult {
        /// The PJRT function.
        call: &'static str,
        /// What it returned and what was expected.
        message: String,
    },
    /// An executable returned a different number of outputs than its kernel declares.
    #[error("the executable returned {got} output{}, the kernel declares {expected}", plural(*.got))]
    OutputCount {
        /// Outputs the kernel declares.
        expected: usize,
        /// Outputs the executable returned.
        got: usize,
    },
}
