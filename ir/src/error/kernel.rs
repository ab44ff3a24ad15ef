//! The errors of the DSL's layer (raised by tessel-dsl): a kernel that
//! does not trace, and a `tessel::check` that failed while its program ran.

use std::fmt;

use super::Location;

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
