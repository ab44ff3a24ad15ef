//! tessel's error type: kernel errors found while tracing, device errors
//! from the PJRT plugin, and host-side data errors.

use std::fmt;
use std::path::PathBuf;

/// A source location inside a user's kernel (recorded with `#[track_caller]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The source file, as the compiler names it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Location {
    /// The caller's location (call this from a `#[track_caller]` function).
    #[track_caller]
    pub fn caller() -> Location {
        let l = std::panic::Location::caller();
        Location {
            file: l.file().to_string(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// An error found while tracing a kernel: bad shapes or dtypes, a bad static
/// argument, an unsupported op. It names the kernel, the op, the operand
/// types and the user's source line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "kernel `{kernel}`: {op}({operands}) at {location}{called}: {message}",
    operands = .operands.join(", "),
    called = CalledAt(.location, .called_at.as_ref())
)]
pub struct KernelError {
    /// The kernel being traced.
    pub kernel: String,
    /// The op that failed (`add`, `matmul`, `reshape`, ...).
    pub op: String,
    /// The operand types, as `f32[2,3]`.
    pub operands: Vec<String>,
    /// What is wrong and, where possible, what to do.
    pub message: String,
    /// Where in the user's code the op was called.
    pub location: Location,
    /// The call that traced the kernel (`name::run`, `call`, `lower`, ...,
    /// or a `tessel::kernel::Kernel`'s method), when the error
    /// comes from tracing a kernel a program called. For a kernel of a
    /// library, `location` is a line of the library and this is the
    /// caller's; it is shown when it is another line.
    pub called_at: Option<Location>,
}

/// A `tessel::check` that failed while a program ran: raised on
/// the host after the run, naming the kernel, the check's line and its
/// message with the reported values filled in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}`: check failed at {location}: {message}")]
pub struct CheckError {
    /// The kernel whose program failed the check.
    pub kernel: String,
    /// The check's message, each `{}` replaced by a reported value.
    pub message: String,
    /// Where the check was written.
    pub location: Location,
    /// The reported values, as the message shows them.
    pub values: Vec<String>,
}

/// `, called at FILE:LINE:COL` when the call is on another line than the
/// op.
struct CalledAt<'a>(&'a Location, Option<&'a Location>);

impl fmt::Display for CalledAt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(c) if (&c.file, c.line) != (&self.0.file, self.0.line) => {
                write!(f, ", called at {c}")
            }
            _ => Ok(()),
        }
    }
}

/// `"s"` unless `n` is 1, for messages.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

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

/// An error in host-side data: a tensor whose data disagrees with its shape,
/// a conversion to the wrong host type, a bad `.npy` file.
///
/// New variants may be added; match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Data length and shape/dtype disagree.
    #[error("host tensor of {spec} needs {expected} bytes, got {actual}")]
    DataLength {
        /// The spec, as `f32[2,3]`.
        spec: String,
        /// Bytes the spec needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A read asked for a host type that is not the tensor's dtype.
    #[error("tensor holds {actual} elements, asked for {requested}")]
    DTypeMismatch {
        /// The tensor's dtype.
        actual: String,
        /// The requested dtype.
        requested: String,
    },
    /// A malformed or unsupported `.npy` file.
    #[error("bad .npy data{}: {message}", .path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    Npy {
        /// The file, when reading one.
        path: Option<PathBuf>,
        /// What is wrong.
        message: String,
    },
    /// A reshape to a shape with another element count.
    #[error("cannot reshape {from} to {to}: element counts differ")]
    Reshape {
        /// The tensor's type, as `f32[2,3]`.
        from: String,
        /// The type asked for.
        to: String,
    },
    /// A bitcast to a dtype with another element size.
    #[error("cannot bitcast {from} to {to}: element sizes differ")]
    Bitcast {
        /// The tensor's type, as `u8[4]`.
        from: String,
        /// The dtype asked for.
        to: String,
    },
    /// A host tensor that cannot become a value of another library's type.
    #[error("cannot convert to {target}: {message}")]
    Conversion {
        /// The type converted to (`ndarray::ArrayD`, ...).
        target: &'static str,
        /// Why not.
        message: String,
    },
    /// A host-side value (a block-sparse matrix, a mask, a table) built from
    /// inconsistent parameters or data.
    #[error("{what}: {message}")]
    InvalidInput {
        /// What was being built (`block-sparse matrix`, `mask`, `RopeTable`).
        what: &'static str,
        /// What is wrong with the input.
        message: String,
    },
    /// A tree of tensors (parameters, optimizer state, results) whose
    /// structure or leaves do not fit what was asked of it; `path` names the
    /// leaf or node (`layers.3.attn.wq`).
    #[error("{path}: {message}")]
    Tree {
        /// Where in the tree (`<root>` for the whole tree).
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// A named option (a kernel option given on the command line) with a
    /// value it does not accept.
    #[error("option {option}: {message}")]
    InvalidOption {
        /// The option's name.
        option: String,
        /// What it accepts, and what it got.
        message: String,
    },
    /// A shape beyond tessel's size limits: an extent above
    /// [`MAX_EXTENT`](crate::shape::MAX_EXTENT) or more than
    /// [`MAX_BYTES`](crate::shape::MAX_BYTES) bytes (see
    /// `tessel::TensorSpec::check_size`).
    #[error("{spec} is too large: {reason}")]
    TooLarge {
        /// The spec, as `f32[2,3]`.
        spec: String,
        /// Which limit it exceeds.
        reason: String,
    },
}

/// An error while interpreting a traced graph on the host
/// (`tessel::interp::evaluate`): arguments that do not
/// match the graph's parameters, or an op it cannot evaluate.
///
/// New variants may be added; match with a wildcard arm.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InterpError {
    /// The arguments do not match the graph's parameters.
    #[error("bad arguments for `{kernel}`: {message}")]
    Arguments {
        /// The kernel.
        kernel: String,
        /// Which argument and why.
        message: String,
    },
    /// An op the interpreter cannot evaluate: unsupported, or malformed.
    #[error("kernel `{kernel}`: {op} at {location}: {message}")]
    Op {
        /// The kernel.
        kernel: String,
        /// The op, by its StableHLO name.
        op: String,
        /// Where in the user's code the op was made.
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// The checks of an interpreter device that fails on findings
    /// (`OnFinding::Error`) found something in this run. The findings
    /// themselves are also kept by the executable
    /// (`Executable::findings`).
    #[error("kernel `{kernel}`: the interpreter's checks found {} problem{}: {}", findings.len(), plural(findings.len()), findings.join("; "))]
    Findings {
        /// The kernel.
        kernel: String,
        /// What was found, in the order first seen, each as one line
        /// naming the op and the user's source line.
        findings: Vec<String>,
    },
}

/// Every error tessel returns.
///
/// New variants may be added; match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Found while tracing a kernel.
    #[error(transparent)]
    Kernel(Box<KernelError>),
    /// From the plugin, the device or the runtime.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// In host data.
    #[error(transparent)]
    Host(#[from] HostError),
    /// While interpreting a graph on the host.
    #[error(transparent)]
    Interp(Box<InterpError>),
    /// A check inside a program failed (see `tessel::check`).
    #[error(transparent)]
    Check(Box<CheckError>),
    /// An I/O error, with the path involved.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl From<KernelError> for Error {
    fn from(e: KernelError) -> Self {
        Error::Kernel(Box::new(e))
    }
}

impl From<CheckError> for Error {
    fn from(e: CheckError) -> Self {
        Error::Check(Box::new(e))
    }
}

impl From<InterpError> for Error {
    fn from(e: InterpError) -> Self {
        Error::Interp(Box::new(e))
    }
}

impl Error {
    /// The kernel error, if this is one.
    pub fn as_kernel_error(&self) -> Option<&KernelError> {
        match self {
            Error::Kernel(k) => Some(k),
            _ => None,
        }
    }

    /// Whether this error was found while tracing (the kernel or its arguments are wrong).
    pub fn is_kernel_error(&self) -> bool {
        matches!(self, Error::Kernel(_))
    }

    /// Whether this error came from the plugin or the device.
    pub fn is_device_error(&self) -> bool {
        matches!(self, Error::Device(_))
    }

    /// A kernel error without a call site gets `call` as its
    /// [`called_at`](KernelError::called_at); any other error is unchanged.
    pub fn called_at(mut self, call: &Location) -> Self {
        if let Error::Kernel(k) = &mut self {
            k.called_at.get_or_insert_with(|| call.clone());
        }
        self
    }
}

/// `Result` with tessel's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_single_readable_lines() {
        let cases: Vec<(Error, &str)> = vec![
            (
                DeviceError::DeviceIndex {
                    index: 2,
                    platform: "cpu".into(),
                    count: 1,
                }
                .into(),
                "device index 2 is out of range: the cpu client has 1 addressable device",
            ),
            (
                DeviceError::DeviceCount { requested: 0 }.into(),
                "a CPU client needs at least 1 device (and at most 4096), got 0",
            ),
            (
                DeviceError::ExtentTooLarge {
                    spec: "f32[2]".into(),
                    extent: usize::MAX,
                }
                .into(),
                "does not fit in i64",
            ),
            (
                DeviceError::UnsupportedElementType {
                    element_type: "c64".into(),
                }
                .into(),
                "buffer of c64, which tessel does not support",
            ),
            (
                DeviceError::NoResult {
                    call: "PJRT_Client_Create",
                    what: "client",
                }
                .into(),
                "PJRT_Client_Create succeeded but returned no client",
            ),
            (
                DeviceError::UnexpectedResult {
                    call: "PJRT_Buffer_Dimensions",
                    message: "a buffer of shape [-1]".into(),
                }
                .into(),
                "unexpected result from PJRT_Buffer_Dimensions: a buffer of shape [-1]",
            ),
            (
                DeviceError::OutputCount {
                    expected: 2,
                    got: 1,
                }
                .into(),
                "the executable returned 1 output, the kernel declares 2",
            ),
            (
                HostError::Reshape {
                    from: "f32[2]".into(),
                    to: "f32[3]".into(),
                }
                .into(),
                "cannot reshape f32[2] to f32[3]: element counts differ",
            ),
            (
                HostError::Bitcast {
                    from: "u8[2]".into(),
                    to: "f16".into(),
                }
                .into(),
                "cannot bitcast u8[2] to f16: element sizes differ",
            ),
            (
                HostError::Conversion {
                    target: "ndarray::ArrayD",
                    message: "bad shape".into(),
                }
                .into(),
                "cannot convert to ndarray::ArrayD: bad shape",
            ),
            (
                HostError::InvalidInput {
                    what: "mask",
                    message: "too many blocks".into(),
                }
                .into(),
                "mask: too many blocks",
            ),
            (
                HostError::InvalidOption {
                    option: "seed".into(),
                    message: "takes an integer, got `x`".into(),
                }
                .into(),
                "option seed: takes an integer, got `x`",
            ),
            (
                InterpError::Arguments {
                    kernel: "k".into(),
                    message: "the graph takes 2 arguments, got 1".into(),
                }
                .into(),
                "bad arguments for `k`: the graph takes 2 arguments, got 1",
            ),
            (
                InterpError::Op {
                    kernel: "k".into(),
                    op: "while".into(),
                    location: Location {
                        file: "src/k.rs".into(),
                        line: 3,
                        column: 9,
                    },
                    message: "needs 2 regions, has 1".into(),
                }
                .into(),
                "kernel `k`: while at src/k.rs:3:9: needs 2 regions, has 1",
            ),
        ];
        for (error, expected) in cases {
            let text = error.to_string();
            assert!(!text.contains('\n'), "{text:?}");
            assert!(text.contains(expected), "{text:?} lacks {expected:?}");
        }
    }
}
