//! The errors of host-side data (raised by this crate): tensors, `.npy`
//! files, trees, options and size limits.

use std::path::PathBuf;

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
