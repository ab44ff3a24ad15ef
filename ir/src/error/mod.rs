//! tessel's error type, [`Error`]: one type every layer returns, so that a
//! user writes `tessel::Result` and `?` across them all. Each layer's own
//! errors are declared in a file of their own here: kernel errors found
//! while tracing and failed checks ([`kernel`], raised by tessel-dsl),
//! device errors from the PJRT plugin and the runtime ([`device`],
//! tessel-pjrt), errors in host data ([`host`], this crate) and the
//! interpreter's ([`interp`], tessel-lower). They live in this, the lowest
//! crate, because `Error` names every one of them and every layer returns
//! it; the crates above construct them and nothing else.

pub mod device;
pub mod host;
pub mod interp;
pub mod kernel;
mod location;

use std::path::PathBuf;

pub use device::{DeviceError, MAX_CPU_DEVICES};
pub use host::HostError;
pub use interp::InterpError;
pub use kernel::{CheckError, KernelError};
pub use location::Location;

/// `"s"` unless `n` is 1, for messages.
pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
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
