//! Literals and index generators: constants, `zeros`/`ones`/`full`, `iota`.

use crate::dtype::DType;
use crate::error::Location;
use crate::host::HostTensor;
use crate::ops::Op;
use crate::shape::{Shape, TensorSpec};
use crate::trace::build;
use crate::trace::tensor::Tensor;

/// A constant of `dtype` and `shape` whose every element is `value`.
pub(crate) fn full_at(shape: Shape, value: f64, dtype: DType, loc: Location) -> Tensor {
    let spec = TensorSpec::new(shape, dtype);
    build("constant", &[], loc, 1, move |_| {
        check_representable(value, dtype)?;
        Ok((
            Op::Constant {
                data: dtype.encode_f64(value),
            },
            vec![spec],
        ))
    })[0]
}

/// Whether `value` survives conversion to `dtype` (integers must be whole
/// and in range; floats may round).
pub(crate) fn check_representable(value: f64, dtype: DType) -> Result<(), String> {
    if dtype.is_float() || dtype.is_pred() {
        return Ok(());
    }
    let (lo, hi) = match dtype {
        DType::S8 => (i8::MIN as f64, i8::MAX as f64),
        DType::S16 => (i16::MIN as f64, i16::MAX as f64),
        DType::S32 => (i32::MIN as f64, i32::MAX as f64),
        DType::S64 => (i64::MIN as f64, i64::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::U64 => (0.0, u64::MAX as f64),
        _ => (f64::MIN, f64::MAX),
    };
    if value.fract() != 0.0 || !(lo..=hi).contains(&value) {
        return Err(format!(
            "the scalar {value} cannot be represented in {dtype}; cast the tensor to a float type first"
        ));
    }
    Ok(())
}

impl Tensor {
    /// A tensor of `shape` filled with `value` (rounded to `dtype`).
    #[track_caller]
    pub fn full(shape: impl Into<Shape>, value: f64, dtype: DType) -> Tensor {
        full_at(shape.into(), value, dtype, Location::caller())
    }

    /// A tensor of zeros.
    #[track_caller]
    pub fn zeros(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        full_at(shape.into(), 0.0, dtype, Location::caller())
    }

    /// A tensor of ones.
    #[track_caller]
    pub fn ones(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        full_at(shape.into(), 1.0, dtype, Location::caller())
    }

    /// A rank-0 tensor.
    #[track_caller]
    pub fn scalar(value: f64, dtype: DType) -> Tensor {
        full_at(Vec::new(), value, dtype, Location::caller())
    }

    /// A tensor of zeros with this tensor's shape and dtype.
    #[track_caller]
    pub fn zeros_like(self) -> Tensor {
        let s = self.spec();
        full_at(s.shape, 0.0, s.dtype, Location::caller())
    }

    /// A tensor of ones with this tensor's shape and dtype.
    #[track_caller]
    pub fn ones_like(self) -> Tensor {
        let s = self.spec();
        full_at(s.shape, 1.0, s.dtype, Location::caller())
    }

    /// A constant holding a host tensor's data.
    #[track_caller]
    pub fn constant(value: &HostTensor) -> Tensor {
        let spec = value.spec().clone();
        let data = value.as_bytes().to_vec();
        build("constant", &[], Location::caller(), 1, move |_| {
            Ok((Op::Constant { data }, vec![spec]))
        })[0]
    }

    /// `0, 1, 2, ...` counting along axis `dim` of `shape`.
    #[track_caller]
    pub fn iota(shape: impl Into<Shape>, dim: usize, dtype: DType) -> Tensor {
        let spec = TensorSpec::new(shape, dtype);
        build("iota", &[], Location::caller(), 1, move |_| {
            if dim >= spec.rank() {
                return Err(format!("iota axis {dim} is out of range for {spec}"));
            }
            if dtype.is_pred() {
                return Err("iota needs a numeric dtype, not pred".into());
            }
            Ok((Op::Iota { dim }, vec![spec]))
        })[0]
    }

    /// `0, 1, ..., n-1` as a vector.
    #[track_caller]
    pub fn arange(n: usize, dtype: DType) -> Tensor {
        Tensor::iota(vec![n], 0, dtype)
    }
}
