//! Shapes and tensor specs (shape + element type).

use std::fmt;

use crate::dtype::DType;
use crate::error::{HostError, Result};

/// The static shape of a tensor: one extent per axis, row-major.
pub type Shape = Vec<usize>;

/// Whether `axes` are distinct and each below `rank` (a permutation of
/// `0..rank` when there are `rank` of them).
pub fn distinct_axes(axes: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    axes.iter()
        .all(|&a| a < rank && !std::mem::replace(&mut seen[a], true))
}

/// The largest extent of one axis: `isize::MAX` (`i64::MAX` on the 64-bit
/// hosts tessel runs on), the widest extent XLA and PJRT represent (they
/// take extents as int64).
pub const MAX_EXTENT: usize = isize::MAX as usize;

/// The largest tensor, in bytes (elements × element size): `isize::MAX`.
/// XLA computes byte sizes in int64 and aborts the process on a program
/// whose tensors overflow it (`f32[2^31, 2^31]` is 2^64 bytes), and no Rust
/// allocation can be larger. Specs are checked against it
/// ([`TensorSpec::check_size`]) where they enter tessel: host tensor
/// constructors, `.npy` reading, kernel arguments and every op's result
/// while tracing, and programs before they are compiled.
pub const MAX_BYTES: usize = isize::MAX as usize;

/// The largest product of the extents before the first 0 of an empty
/// tensor (one with an extent of 0): 2^20. XLA folds empty tensors into
/// constants and its compiler then visits every index of those leading
/// extents (`f32[2^30, 2^30, 0]` never finished compiling); it also
/// multiplies them by the element size in int64 and aborts the process on
/// an overflow (`f32[2^61, 0]`). Extents after the first 0 are not limited
/// beyond [`MAX_EXTENT`].
pub const MAX_EMPTY_PREFIX: usize = 1 << 20;

/// The type of a tensor: its element type and static shape.
///
/// ```
/// use tessel_ir::{TensorSpec, F32};
/// let s = TensorSpec::new([2, 3], F32);
/// assert_eq!(s.to_string(), "f32[2,3]");
/// assert_eq!(s.mlir_type(), "tensor<2x3xf32>");
/// assert_eq!(s.num_elements(), 6);
/// assert_eq!(TensorSpec::parse("2x3:f32").unwrap(), s);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TensorSpec {
    /// Extents, outermost first.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
}

impl TensorSpec {
    /// A spec from any list of extents and an element type.
    pub fn new(shape: impl Into<Shape>, dtype: DType) -> Self {
        TensorSpec {
            shape: shape.into(),
            dtype,
        }
    }

    /// A rank-0 (scalar) spec.
    pub fn scalar(dtype: DType) -> Self {
        TensorSpec {
            shape: Vec::new(),
            dtype,
        }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a scalar), saturating at `usize::MAX` when
    /// the product of the extents overflows (such a spec fails
    /// [`check_size`](Self::check_size)); see
    /// [`checked_num_elements`](Self::checked_num_elements).
    pub fn num_elements(&self) -> usize {
        self.checked_num_elements().unwrap_or(usize::MAX)
    }

    /// Bytes of a dense host buffer holding this tensor, saturating at
    /// `usize::MAX` on overflow (such a spec fails
    /// [`check_size`](Self::check_size)); see
    /// [`checked_size_in_bytes`](Self::checked_size_in_bytes).
    pub fn size_in_bytes(&self) -> usize {
        self.checked_size_in_bytes().unwrap_or(usize::MAX)
    }

    /// Number of elements, or `None` if it does not fit in `usize` (a zero
    /// extent makes it 0 whatever the others are).
    ///
    /// ```
    /// use tessel_ir::{TensorSpec, F32};
    /// assert_eq!(TensorSpec::new([1 << 40, 1 << 40], F32).checked_num_elements(), None);
    /// assert_eq!(TensorSpec::new([1 << 40, 1 << 40, 0], F32).checked_num_elements(), Some(0));
    /// ```
    pub fn checked_num_elements(&self) -> Option<usize> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Bytes of a dense buffer, or `None` if they do not fit in `usize`.
    pub fn checked_size_in_bytes(&self) -> Option<usize> {
        self.checked_num_elements()?
            .checked_mul(self.dtype.size_in_bytes())
    }

    /// Checks the spec against tessel's size limits — every extent at most
    /// [`MAX_EXTENT`], at most [`MAX_BYTES`] bytes in all, and for an empty
    /// tensor the extents before its first 0 multiplying to at most
    /// [`MAX_EMPTY_PREFIX`] — and returns its size in bytes;
    /// [`HostError::TooLarge`] otherwise.
    ///
    /// ```
    /// use tessel_ir::{TensorSpec, F32};
    /// assert_eq!(TensorSpec::new([2, 3], F32).check_size()?, 24);
    /// let e = TensorSpec::new([1 << 31, 1 << 31], F32).check_size().unwrap_err();
    /// assert!(e.to_string().contains("isize::MAX"), "{e}");
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn check_size(&self) -> Result<usize> {
        let too_large = |reason: String| -> crate::error::Error {
            HostError::TooLarge {
                spec: self.to_string(),
                reason,
            }
            .into()
        };
        if let Some((axis, d)) = self.shape.iter().enumerate().find(|(_, &d)| d > MAX_EXTENT) {
            return Err(too_large(format!(
                "extent {d} of axis {axis} is above the limit of {MAX_EXTENT} (isize::MAX) per axis"
            )));
        }
        if let Some(zero) = self.shape.iter().position(|&d| d == 0) {
            let prefix = &self.shape[..zero];
            let count = prefix.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            return match count {
                Some(n) if n <= MAX_EMPTY_PREFIX => Ok(0),
                _ => Err(too_large(format!(
                    "it is empty, and the extents before its first 0 multiply to {}, above the \
                     limit of {MAX_EMPTY_PREFIX} (2^20) for an empty tensor",
                    count.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
                ))),
            };
        }
        match self.checked_size_in_bytes() {
            Some(bytes) if bytes <= MAX_BYTES => Ok(bytes),
            Some(bytes) => Err(too_large(format!(
                "{bytes} bytes are above the limit of {MAX_BYTES} bytes (isize::MAX) per tensor"
            ))),
            None => Err(too_large(format!(
                "its size in bytes overflows; the limit is {MAX_BYTES} bytes (isize::MAX) per tensor"
            ))),
        }
    }

    /// The MLIR ranked tensor type, for example `tensor<2x3xf32>` or `tensor<f32>`.
    pub fn mlir_type(&self) -> String {
        let mut s = String::from("tensor<");
        for d in &self.shape {
            s.push_str(&d.to_string());
            s.push('x');
        }
        s.push_str(self.dtype.mlir_name());
        s.push('>');
        s
    }

    /// Parses `2x128x64:f32` (extents joined by `x`, then `:` and a dtype name;
    /// `:f32` alone or `scalar:f32` is a scalar). The dtype defaults to `f32`.
    pub fn parse(s: &str) -> Option<TensorSpec> {
        let (dims, dtype) = match s.split_once(':') {
            Some((d, t)) => (d.trim(), DType::parse(t)?),
            None => (s.trim(), DType::F32),
        };
        let shape = if dims.is_empty() || dims == "scalar" {
            Vec::new()
        } else {
            dims.split('x')
                .map(|d| d.trim().parse::<usize>().ok())
                .collect::<Option<Vec<_>>>()?
        };
        Some(TensorSpec { shape, dtype })
    }
}

impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
