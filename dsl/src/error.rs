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
#[error("kernel `{kernel}`: {op}({operands}) at {location}: {message}", operands = .operands.join(", "))]
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
}

/// An error from the PJRT plugin or the runtime around it.
#[derive(Debug, thiserror::Error)]
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
    /// Anything else the runtime refuses to do (with the reason).
    #[error("{0}")]
    Other(String),
}

/// An error in host-side data: a tensor whose data disagrees with its shape,
/// a conversion to the wrong host type, a bad `.npy` file.
#[derive(Debug, thiserror::Error)]
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
    /// A shape beyond tessel's size limits: an extent above
    /// [`MAX_EXTENT`](crate::shape::MAX_EXTENT) or more than
    /// [`MAX_BYTES`](crate::shape::MAX_BYTES) bytes (see
    /// [`TensorSpec::check_size`](crate::TensorSpec::check_size)).
    #[error("{spec} is too large: {reason}")]
    TooLarge {
        /// The spec, as `f32[2,3]`.
        spec: String,
        /// Which limit it exceeds.
        reason: String,
    },
    /// Anything else wrong with host data.
    #[error("{0}")]
    Other(String),
}

/// Every error tessel returns.
#[derive(Debug, thiserror::Error)]
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
}

/// `Result` with tessel's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
