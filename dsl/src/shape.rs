//! Shapes and tensor specs (shape + element type).

use std::fmt;

use crate::dtype::DType;

/// The static shape of a tensor: one extent per axis, row-major.
pub type Shape = Vec<usize>;

/// The type of a tensor: its element type and static shape.
///
/// ```
/// use tessel_dsl::{TensorSpec, F32};
/// let s = TensorSpec::new([2, 3], F32);
/// assert_eq!(s.to_string(), "f32[2,3]");
/// assert_eq!(s.mlir_type(), "tensor<2x3xf32>");
/// assert_eq!(s.num_elements(), 6);
/// assert_eq!(TensorSpec::parse("2x3:f32").unwrap(), s);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

    /// Number of elements (1 for a scalar).
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of a dense host buffer holding this tensor.
    pub fn size_in_bytes(&self) -> usize {
        self.num_elements() * self.dtype.size_in_bytes()
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
