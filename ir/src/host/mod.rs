//! Host tensors: a dense row-major buffer with a dtype and a shape.

mod ffi_registry;
#[cfg(feature = "ndarray")]
mod ndarray_conv;
mod npy;

use std::fmt;

pub use ffi_registry::{
    call_ffi, ffi_function, register_ffi, valid_ffi_name, FfiAttr, FfiCall, FfiFn, FFI_NAME_ATTR,
    FFI_TARGET,
};

use crate::dtype::{DType, Element};
use crate::error::{HostError, Result};
use crate::shape::{Shape, TensorSpec};

/// A tensor in host memory: dtype, shape and dense row-major little-endian bytes.
///
/// ```
/// use tessel_ir::HostTensor;
/// let t = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// assert!(HostTensor::from_vec(vec![1.0f32; 5], [2, 3]).is_err());
/// # Ok::<(), tessel_ir::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    spec: TensorSpec,
    data: Vec<u8>,
}

impl HostTensor {
    /// A tensor from raw little-endian bytes; the length must match the spec,
    /// and the spec must be within the size limits
    /// ([`TensorSpec::check_size`]).
    pub fn from_bytes(spec: TensorSpec, data: Vec<u8>) -> Result<Self> {
        let expected = spec.check_size()?;
        if data.len() != expected {
            return Err(HostError::DataLength {
                spec: spec.to_string(),
                expected,
                actual: data.len(),
            }
            .into());
        }
        Ok(HostTensor { spec, data })
    }

    /// A tensor from a vector of elements and a shape; their counts must agree.
    pub fn from_vec<T: Element>(values: Vec<T>, shape: impl Into<Shape>) -> Result<Self> {
        Self::from_slice(&values, shape)
    }

    /// A tensor from a slice of elements and a shape; their counts must agree.
    pub fn from_slice<T: Element>(values: &[T], shape: impl Into<Shape>) -> Result<Self> {
        let spec = TensorSpec::new(shape, T::DTYPE);
        let expected = spec.check_size()?;
        if values.len() != spec.num_elements() {
            return Err(HostError::DataLength {
                spec: spec.to_string(),
                expected,
                actual: values.len().saturating_mul(T::DTYPE.size_in_bytes()),
            }
            .into());
        }
        let mut data = Vec::with_capacity(expected);
        for v in values {
            v.write_le(&mut data);
        }
        Ok(HostTensor { spec, data })
    }

    /// A rank-0 tensor holding one value.
    pub fn scalar<T: Element>(value: T) -> Self {
        let mut data = Vec::new();
        value.write_le(&mut data);
        HostTensor {
            spec: TensorSpec::scalar(T::DTYPE),
            data,
        }
    }

    /// A tensor of zeros.
    ///
    /// # Panics
    ///
    /// If `spec` is beyond the size limits ([`TensorSpec::check_size`]):
    /// such a tensor cannot be allocated. [`try_zeros`](Self::try_zeros)
    /// returns the error instead (use it for shapes that come from input).
    pub fn zeros(spec: TensorSpec) -> Self {
        Self::try_zeros(spec).unwrap_or_else(|e| panic!("HostTensor::zeros: {e}"))
    }

    /// A tensor of zeros, or [`HostError::TooLarge`] if `spec` is beyond
    /// the size limits ([`TensorSpec::check_size`]).
    ///
    /// ```
    /// use tessel_ir::{HostTensor, TensorSpec, F32};
    /// assert_eq!(HostTensor::try_zeros(TensorSpec::new([2, 3], F32))?.num_elements(), 6);
    /// assert!(HostTensor::try_zeros(TensorSpec::new([1 << 62, 8], F32)).is_err());
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn try_zeros(spec: TensorSpec) -> Result<Self> {
        let data = vec![0u8; spec.check_size()?];
        Ok(HostTensor { spec, data })
    }

    /// A tensor whose elements are `f(i)` for the flat row-major index `i`,
    /// rounded to `spec.dtype`.
    ///
    /// # Panics
    ///
    /// If `spec` is beyond the size limits ([`TensorSpec::check_size`]);
    /// [`try_from_fn`](Self::try_from_fn) returns the error instead.
    pub fn from_fn(spec: TensorSpec, f: impl FnMut(usize) -> f64) -> Self {
        Self::try_from_fn(spec, f).unwrap_or_else(|e| panic!("HostTensor::from_fn: {e}"))
    }

    /// [`from_fn`](Self::from_fn), or [`HostError::TooLarge`] if `spec` is
    /// beyond the size limits ([`TensorSpec::check_size`]).
    pub fn try_from_fn(spec: TensorSpec, mut f: impl FnMut(usize) -> f64) -> Result<Self> {
        let bytes = spec.check_size()?;
        let mut data = Vec::with_capacity(bytes);
        for i in 0..spec.num_elements() {
            data.extend_from_slice(&spec.dtype.encode_f64(f(i)));
        }
        Ok(HostTensor { spec, data })
    }

    /// The elements as `f64`, whatever the dtype (for references and comparisons).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let n = self.spec.dtype.size_in_bytes();
        self.data
            .chunks_exact(n)
            .map(|c| self.spec.dtype.decode_f64(c))
            .collect()
    }

    /// This tensor converted to another dtype on the host (through `f64`).
    pub fn cast(&self, dtype: DType) -> HostTensor {
        let v = self.to_f64_vec();
        HostTensor::from_fn(TensorSpec::new(self.spec.shape.clone(), dtype), |i| v[i])
    }

    /// The elements as a vector of `T`; `T` must be the tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.spec.dtype {
            return Err(HostError::DTypeMismatch {
                actual: self.spec.dtype.to_string(),
                requested: T::DTYPE.to_string(),
            }
            .into());
        }
        let n = T::DTYPE.size_in_bytes();
        Ok(self.data.chunks_exact(n).map(T::read_le).collect())
    }

    /// The same data under another shape with the same element count.
    pub fn reshape(self, shape: impl Into<Shape>) -> Result<Self> {
        let spec = TensorSpec::new(shape, self.spec.dtype);
        spec.check_size()?;
        if spec.num_elements() != self.spec.num_elements() {
            return Err(HostError::Reshape {
                from: self.spec.to_string(),
                to: spec.to_string(),
            }
            .into());
        }
        Ok(HostTensor {
            spec,
            data: self.data,
        })
    }

    /// Dtype and shape.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The extents.
    pub fn shape(&self) -> &[usize] {
        &self.spec.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.spec.num_elements()
    }

    /// The raw little-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Takes the raw bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.data
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_f64_vec();
        let shown: Vec<String> = v.iter().take(16).map(|x| format!("{x}")).collect();
        write!(
            f,
            "HostTensor({}: [{}{}])",
            self.spec,
            shown.join(", "),
            if v.len() > 16 { ", ..." } else { "" }
        )
    }
}
