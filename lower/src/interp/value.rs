//! The interpreter's tensors: a dtype, a shape and the elements, floats as
//! `f64` (already rounded to their dtype) and integers and `pred` as `i64`
//! (already wrapped to their width; u64 as its two's complement bit
//! pattern, so values from 2^63 up are held as negative numbers and the ops
//! that order, divide or convert them read them through [`int_key`] and
//! [`int_to_f64`]), with the conversions from and to [`HostTensor`] and the
//! row-major index helpers the ops share.

use std::cmp::Ordering;

use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::TensorSpec;

/// The elements of a tensor, in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    /// Float elements, each exactly representable in the tensor's dtype.
    F(Vec<f64>),
    /// Integer elements within the dtype's range (u64 as its bit pattern);
    /// `pred` as 0 or 1.
    I(Vec<i64>),
}

impl Data {
    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F(v) => v.len(),
            Data::I(v) => v.len(),
        }
    }

    /// The elements at `positions`, in that order.
    pub(crate) fn pick(&self, positions: impl Iterator<Item = usize>) -> Data {
        match self {
            Data::F(v) => Data::F(positions.map(|p| v[p]).collect()),
            Data::I(v) => Data::I(positions.map(|p| v[p]).collect()),
        }
    }

    /// The elements at `positions`, or `fill`'s single element where a position is `None`.
    pub(crate) fn pick_or(
        &self,
        positions: impl Iterator<Item = Option<usize>>,
        fill: &Data,
    ) -> Data {
        match (self, fill) {
            (Data::F(v), Data::F(f)) => {
                let f = f.first().copied().unwrap_or(0.0);
                Data::F(positions.map(|p| p.map_or(f, |p| v[p])).collect())
            }
            (Data::I(v), Data::I(f)) => {
                let f = f.first().copied().unwrap_or(0);
                Data::I(positions.map(|p| p.map_or(f, |p| v[p])).collect())
            }
            (d, _) => d.pick(positions.map(|p| p.unwrap_or(0))),
        }
    }

    /// An empty buffer of the same kind with room for `n` elements.
    pub(crate) fn with_capacity_like(&self, n: usize) -> Data {
        match self {
            Data::F(_) => Data::F(Vec::with_capacity(n)),
            Data::I(_) => Data::I(Vec::with_capacity(n)),
        }
    }

    /// Appends `other[range]` (both of one kind; a kind mismatch appends nothing).
    pub(crate) fn extend_from(&mut self, other: &Data, range: std::ops::Range<usize>) {
        match (self, other) {
            (Data::F(a), Data::F(b)) => a.extend_from_slice(&b[range]),
            (Data::I(a), Data::I(b)) => a.extend_from_slice(&b[range]),
            _ => {}
        }
    }

    /// Copies element `src` of `from` to element `dst` of `self`.
    pub(crate) fn copy_elem(&mut self, dst: usize, from: &Data, src: usize) {
        match (self, from) {
            (Data::F(a), Data::F(b)) => a[dst] = b[src],
            (Data::I(a), Data::I(b)) => a[dst] = b[src],
            _ => {}
        }
    }
}

/// A tensor value during interpretation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Val {
    /// Element type.
    pub dtype: DType,
    /// Extents.
    pub shape: Vec<usize>,
    /// Elements (floats for float dtypes, integers otherwise).
    pub data: Data,
}

impl Val {
    /// A value from its parts; the element count and kind must match the spec.
    pub(crate) fn new(dtype: DType, shape: Vec<usize>, data: Data) -> Result<Val, String> {
        let n = num_elements(&shape)?;
        if data.len() != n || matches!(data, Data::F(_)) != dtype.is_float() {
            return Err(format!(
                "internal: {} elements of the wrong kind or count for {}",
                data.len(),
                TensorSpec::new(shape, dtype)
            ));
        }
        Ok(Val { dtype, shape, data })
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// The value's type.
    pub(crate) fn spec(&self) -> TensorSpec {
        TensorSpec::new(self.shape.clone(), self.dtype)
    }

    /// Element `i` as `f64` (integers converted, u64 read unsigned).
    pub(crate) fn f64_at(&self, i: usize) -> f64 {
        match &self.data {
            Data::F(v) => v[i],
            Data::I(v) => int_to_f64(self.dtype, v[i]),
        }
    }

    /// Element `i` as an integer (floats truncated, saturating; u64 as its
    /// bit pattern).
    pub(crate) fn i64_at(&self, i: usize) -> i64 {
        match &self.data {
            Data::F(v) => v[i] as i64,
            Data::I(v) => v[i],
        }
    }

    /// Element `i` as an index: [`i64_at`](Self::i64_at), except that a u64
    /// from 2^63 up saturates to `i64::MAX` (it is past every extent, not
    /// before the start).
    pub(crate) fn index_at(&self, i: usize) -> i64 {
        let x = self.i64_at(i);
        if self.dtype == DType::U64 && x < 0 {
            i64::MAX
        } else {
            x
        }
    }

    /// The single element of a one-element tensor, as an index ([`index_at`](Self::index_at)).
    pub(crate) fn scalar_index(&self) -> Result<i64, String> {
        if self.len() != 1 {
            return Err(format!("expected a scalar, got {}", self.spec()));
        }
        Ok(self.index_at(0))
    }

    /// Decodes a host tensor.
    pub(crate) fn from_host(t: &HostTensor) -> Val {
        decode(
            t.dtype(),
            t.shape().to_vec(),
            t.as_bytes(),
            t.num_elements(),
        )
    }

    /// Encodes as a host tensor.
    pub(crate) fn to_host(&self) -> Result<HostTensor> {
        let size = self.dtype.size_in_bytes();
        let mut bytes = Vec::with_capacity(self.len().saturating_mul(size));
        match &self.data {
            Data::F(v) => {
                for &x in v {
                    bytes.extend_from_slice(&encode_float(self.dtype, x));
                }
            }
            Data::I(v) => {
                for &x in v {
                    let le = x.to_le_bytes();
                    bytes.extend_from_slice(&le[..size]);
                }
            }
        }
        HostTensor::from_bytes(self.spec(), bytes)
    }
}

/// Decodes `n` little-endian elements of `dtype` from `bytes` (one element
/// given for many means a splat, as constants store it).
pub(crate) fn decode(dtype: DType, shape: Vec<usize>, bytes: &[u8], n: usize) -> Val {
    let size = dtype.size_in_bytes();
    let splat = bytes.len() == size && n != 1;
    let elem = |i: usize| {
        let at = if splat { 0 } else { i * size };
        bytes.get(at..at + size).unwrap_or(&[])
    };
    let data = if dtype.is_float() {
        Data::F((0..n).map(|i| dtype.decode_f64(elem(i))).collect())
    } else {
        Data::I((0..n).map(|i| decode_int(dtype, elem(i))).collect())
    };
    Val { dtype, shape, data }
}

fn decode_int(dtype: DType, b: &[u8]) -> i64 {
    let mut w = [0u8; 8];
    let k = b.len().min(8);
    w[..k].copy_from_slice(&b[..k]);
    let raw = i64::from_le_bytes(w);
    match dtype {
        DType::Pred => i64::from(raw & 0xff != 0),
        _ => wrap(dtype, raw),
    }
}

fn encode_float(dtype: DType, x: f64) -> Vec<u8> {
    match dtype {
        DType::F8E4M3FN if x.is_nan() => vec![if x.is_sign_negative() { 0xff } else { 0x7f }],
        DType::F8E5M2 if x.is_infinite() => vec![if x < 0.0 { 0xfc } else { 0x7c }],
        DType::F32 => (x as f32).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f32(x as f32).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f32(x as f32).to_le_bytes().to_vec(),
        d => d.encode_f64(x),
    }
}

/// Number of elements of `shape`, or an error if it overflows.
pub(crate) fn num_elements(shape: &[usize]) -> Result<usize, String> {
    TensorSpec::new(shape.to_vec(), DType::Pred)
        .checked_num_elements()
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))
}

/// `x` rounded to nearest-even in `dtype` (floats); other dtypes unchanged.
///
/// bf16 and f16 round through f32, as XLA computes them in f32; fp8
/// overflows to NaN (e4m3fn, which has no infinity) or to infinity (e5m2).
pub(crate) fn round(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => x as f32 as f64,
        DType::F16 => half::f16::from_f32(x as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(x as f32).to_f64(),
        DType::F8E4M3FN => {
            // Above 464 (the midpoint of 448 and the missing 480) is NaN.
            if x.is_nan() || x.abs() > 464.0 {
                f64::NAN
            } else {
                float8::F8E4M3::from_f64(x).to_f64()
            }
        }
        DType::F8E5M2 => {
            // From 61440 (the midpoint of 57344 and 65536) up is infinity.
            if x.is_nan() {
                f64::NAN
            } else if x.abs() >= 61440.0 {
                f64::INFINITY.copysign(x)
            } else {
                float8::F8E5M2::from_f64(x).to_f64()
            }
        }
        _ => x,
    }
}

/// The smallest normal f32, below which the CPU flushes f32 (and bf16) values.
const MIN_NORMAL_F32: f64 = 1.175_494_350_822_287_5e-38;

fn flush32(x: f64) -> f64 {
    if x.abs() < MIN_NORMAL_F32 {
        0.0f64.copysign(x)
    } else {
        x
    }
}

fn flush64(x: f64) -> f64 {
    if x.abs() < f64::MIN_POSITIVE {
        0.0f64.copysign(x)
    } else {
        x
    }
}

/// The rounding of an arithmetic result of `dtype`, for use in loops:
/// [`round`], then a subnormal f32, bf16 or f64 result flushed to a zero of
/// its sign, as the XLA CPU runtime computes (flush-to-zero). f16 and fp8
/// keep their subnormals (they are normal numbers in the f32 the CPU
/// computes them in).
pub(crate) fn rounder(dtype: DType) -> fn(f64) -> f64 {
    match dtype {
        DType::F64 => flush64,
        DType::F32 => |x| flush32(x as f32 as f64),
        DType::F16 => |x| round(DType::F16, x),
        DType::BF16 => |x| round(DType::BF16, flush32(x as f32 as f64)),
        DType::F8E4M3FN => |x| round(DType::F8E4M3FN, x),
        DType::F8E5M2 => |x| round(DType::F8E5M2, x),
        _ => |x| x,
    }
}

/// How an arithmetic op reads an operand of `dtype`, for use in loops: a
/// subnormal f32, bf16 or f64 reads as a zero of its sign, as the XLA CPU
/// runtime computes (denormals-are-zero); other values are unchanged.
pub(crate) fn daz(dtype: DType) -> fn(f64) -> f64 {
    match dtype {
        DType::F64 => flush64,
        DType::F32 | DType::BF16 => flush32,
        _ => |x| x,
    }
}

/// Number of bits of an integer dtype (1 for `pred`, 0 for floats).
pub(crate) fn bits(dtype: DType) -> u32 {
    match dtype {
        DType::Pred => 1,
        DType::S8 | DType::U8 => 8,
        DType::S16 | DType::U16 => 16,
        DType::S32 | DType::U32 => 32,
        DType::S64 | DType::U64 => 64,
        _ => 0,
    }
}

/// `x` wrapped to the width of an integer dtype (two's complement); `pred`
/// is `x & 1`; s64 and u64 (held as its bit pattern) are unchanged.
pub(crate) fn wrap(dtype: DType, x: i64) -> i64 {
    wrapper(dtype)(x)
}

/// The wrapping function of `dtype`, for use in loops.
pub(crate) fn wrapper(dtype: DType) -> fn(i64) -> i64 {
    match dtype {
        DType::S8 => |x| i64::from(x as i8),
        DType::S16 => |x| i64::from(x as i16),
        DType::S32 => |x| i64::from(x as i32),
        DType::U8 => |x| i64::from(x as u8),
        DType::U16 => |x| i64::from(x as u16),
        DType::U32 => |x| i64::from(x as u32),
        DType::Pred => |x| x & 1,
        _ => |x| x,
    }
}

/// A key that orders the held integers of `dtype` as their values order:
/// u64 bit patterns with the top bit flipped (so 2^63 and up sort above
/// `i64::MAX`), every other integer type unchanged.
pub(crate) fn int_key(dtype: DType) -> fn(i64) -> i64 {
    if dtype == DType::U64 {
        |x| x ^ i64::MIN
    } else {
        |x| x
    }
}

/// How two held integers of `dtype` compare as values ([`int_key`]).
pub(crate) fn int_cmp(dtype: DType) -> impl Fn(&i64, &i64) -> Ordering {
    let key = int_key(dtype);
    move |a, b| key(*a).cmp(&key(*b))
}

/// A held integer of `dtype` as `f64` (u64 read unsigned), rounded to nearest.
pub(crate) fn int_to_f64(dtype: DType, x: i64) -> f64 {
    if dtype == DType::U64 {
        x as u64 as f64
    } else {
        x as f64
    }
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// A row-major multi-index that steps through a shape.
pub(crate) struct Counter {
    /// The current index.
    pub idx: Vec<usize>,
    shape: Vec<usize>,
}

impl Counter {
    /// Starts at all zeros.
    pub(crate) fn new(shape: &[usize]) -> Counter {
        Counter {
            idx: vec![0; shape.len()],
            shape: shape.to_vec(),
        }
    }

    /// Steps to the next index (wrapping to zeros after the last).
    pub(crate) fn step(&mut self) {
        for a in (0..self.shape.len()).rev() {
            self.idx[a] += 1;
            if self.idx[a] < self.shape[a] {
                return;
            }
            self.idx[a] = 0;
        }
    }
}
