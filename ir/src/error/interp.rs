//! The errors of the interpreter (raised by tessel-lower).

use super::{plural, Location};

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
