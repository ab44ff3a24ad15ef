//! Element types: the XLA primitive types tessel traces, lowers and moves
//! between host and device, and the host Rust types that carry them.

use std::fmt;

/// An element type of a tensor.
///
/// The names follow XLA's primitive types. Host values use `bool`, the Rust
/// integer types, [`half::f16`], [`half::bf16`], `f32`, `f64` and the
/// [`float8`] types.
///
/// ```
/// use tessel_ir::DType;
/// assert_eq!(DType::BF16.size_in_bytes(), 2);
/// assert_eq!(DType::F8E4M3FN.mlir_name(), "f8E4M3FN");
/// assert!(DType::F16.is_float());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum DType {
    /// Boolean (`i1` in StableHLO, one byte per element on the host).
    Pred,
    /// Signed 8-bit integer.
    S8,
    /// Signed 16-bit integer.
    S16,
    /// Signed 32-bit integer.
    S32,
    /// Signed 64-bit integer.
    S64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, finite only (OCP FP8 E4M3).
    F8E4M3FN,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits (OCP FP8 E5M2).
    F8E5M2,
}

/// Shorthand for [`DType::F32`].
pub const F32: DType = DType::F32;
/// Shorthand for [`DType::F64`].
pub const F64: DType = DType::F64;
/// Shorthand for [`DType::F16`].
pub const F16: DType = DType::F16;
/// Shorthand for [`DType::BF16`].
pub const BF16: DType = DType::BF16;
/// Shorthand for [`DType::S32`].
pub const S32: DType = DType::S32;
/// Shorthand for [`DType::S64`].
pub const S64: DType = DType::S64;
/// Shorthand for [`DType::S8`].
pub const S8: DType = DType::S8;
/// Shorthand for [`DType::S16`].
pub const S16: DType = DType::S16;
/// Shorthand for [`DType::U8`].
pub const U8: DType = DType::U8;
/// Shorthand for [`DType::U16`].
pub const U16: DType = DType::U16;
/// Shorthand for [`DType::U32`].
pub const U32: DType = DType::U32;
/// Shorthand for [`DType::U64`].
pub const U64: DType = DType::U64;
/// Shorthand for [`DType::Pred`].
pub const PRED: DType = DType::Pred;
/// Shorthand for [`DType::F8E4M3FN`].
pub const F8E4M3FN: DType = DType::F8E4M3FN;
/// Shorthand for [`DType::F8E5M2`].
pub const F8E5M2: DType = DType::F8E5M2;

impl DType {
    /// Every element type, in declaration order.
    pub const ALL: [DType; 15] = [
        DType::Pred,
        DType::S8,
        DType::S16,
        DType::S32,
        DType::S64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::F8E4M3FN,
        DType::F8E5M2,
    ];

    /// Bytes one element takes in a dense host buffer.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::Pred | DType::S8 | DType::U8 | DType::F8E4M3FN | DType::F8E5M2 => 1,
            DType::S16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::S32 | DType::U32 | DType::F32 => 4,
            DType::S64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The element type's spelling in MLIR (`f32`, `bf16`, `i1`, `ui8`, `f8E4M3FN`, ...).
    pub const fn mlir_name(self) -> &'static str {
        match self {
            DType::Pred => "i1",
            DType::S8 => "i8",
            DType::S16 => "i16",
            DType::S32 => "i32",
            DType::S64 => "i64",
            DType::U8 => "ui8",
            DType::U16 => "ui16",
            DType::U32 => "ui32",
            DType::U64 => "ui64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3FN => "f8E4M3FN",
            DType::F8E5M2 => "f8E5M2",
        }
    }

    /// The short name used in messages, shape strings and the CLI (`f32`, `bf16`, `pred`, `s32`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Pred => "pred",
            DType::S8 => "s8",
            DType::S16 => "s16",
            DType::S32 => "s32",
            DType::S64 => "s64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E5M2 => "f8e5m2",
        }
    }

    /// Parses a short name as printed by [`DType::name`]; also accepts `bool`,
    /// `i8`/`i16`/`i32`/`i64`, `ui16`-style (MLIR) and `float32`/`uint16`-style
    /// (NumPy) spellings.
    ///
    /// ```
    /// use tessel_ir::DType;
    /// assert_eq!(DType::parse("bf16"), Some(DType::BF16));
    /// assert_eq!(DType::parse("i32"), Some(DType::S32));
    /// assert_eq!(DType::parse("int16"), Some(DType::S16));
    /// assert_eq!(DType::parse("uint16"), Some(DType::U16));
    /// assert_eq!(DType::parse("u64"), Some(DType::U64));
    /// assert_eq!(DType::parse("complex"), None);
    /// ```
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.trim().to_ascii_lowercase();
        Some(match s.as_str() {
            "pred" | "bool" | "i1" => DType::Pred,
            "s8" | "i8" | "int8" => DType::S8,
            "s16" | "i16" | "int16" => DType::S16,
            "s32" | "i32" | "int32" => DType::S32,
            "s64" | "i64" | "int64" => DType::S64,
            "u8" | "ui8" | "uint8" => DType::U8,
            "u16" | "ui16" | "uint16" => DType::U16,
            "u32" | "ui32" | "uint32" => DType::U32,
            "u64" | "ui64" | "uint64" => DType::U64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "f8e4m3fn" | "f8e4m3" | "float8_e4m3fn" => DType::F8E4M3FN,
            "f8e5m2" | "float8_e5m2" => DType::F8E5M2,
            _ => return None,
        })
    }

    /// Whether this is a floating-point type (including bf16 and the fp8 types).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::F8E4M3FN | DType::F8E5M2
        )
    }

    /// Whether this is a signed or unsigned integer type (not `Pred`).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DType::S8
                | DType::S16
                | DType::S32
                | DType::S64
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }

    /// Whether this is an unsigned integer type.
    pub const fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Whether this is the boolean type.
    pub const fn is_pred(self) -> bool {
        matches!(self, DType::Pred)
    }

    /// The `compare_type` StableHLO uses for comparisons of this type.
    pub const fn comparison_type(self) -> &'static str {
        if self.is_float() {
            "FLOAT"
        } else if self.is_unsigned() || self.is_pred() {
            "UNSIGNED"
        } else {
            "SIGNED"
        }
    }

    /// Encodes `value` as one element of this type, little-endian, rounding
    /// floats to nearest and saturating integers.
    pub fn encode_f64(self, value: f64) -> Vec<u8> {
        match self {
            DType::Pred => vec![u8::from(value != 0.0)],
            DType::S8 => (value as i8).to_le_bytes().to_vec(),
            DType::S16 => (value as i16).to_le_bytes().to_vec(),
            DType::S32 => (value as i32).to_le_bytes().to_vec(),
            DType::S64 => (value as i64).to_le_bytes().to_vec(),
            DType::U8 => (value as u8).to_le_bytes().to_vec(),
            DType::U16 => (value as u16).to_le_bytes().to_vec(),
            DType::U32 => (value as u32).to_le_bytes().to_vec(),
            DType::U64 => (value as u64).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(value).to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(value).to_le_bytes().to_vec(),
            DType::F32 => (value as f32).to_le_bytes().to_vec(),
            DType::F64 => value.to_le_bytes().to_vec(),
            DType::F8E4M3FN => vec![float8::F8E4M3::from_f64(value).to_bits()],
            DType::F8E5M2 => vec![float8::F8E5M2::from_f64(value).to_bits()],
        }
    }

    /// Decodes one little-endian element of this type to `f64` (64-bit
    /// integers beyond 2^53 round to the nearest `f64`).
    ///
    /// `bytes` must hold at least [`DType::size_in_bytes`] bytes; missing bytes read as zero.
    pub fn decode_f64(self, bytes: &[u8]) -> f64 {
        let mut b = [0u8; 8];
        let n = self.size_in_bytes().min(bytes.len());
        b[..n].copy_from_slice(&bytes[..n]);
        match self {
            DType::Pred => f64::from(u8::from(b[0] != 0)),
            DType::S8 => f64::from(b[0] as i8),
            DType::S16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
            DType::S32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::S64 => i64::from_le_bytes(b) as f64,
            DType::U8 => f64::from(b[0]),
            DType::U16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
            DType::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::U64 => u64::from_le_bytes(b) as f64,
            DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::F64 => f64::from_le_bytes(b),
            DType::F8E4M3FN => float8::F8E4M3::from_bits(b[0]).to_f64(),
            DType::F8E5M2 => float8::F8E5M2::from_bits(b[0]).to_f64(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A host Rust type that holds one element of a [`DType`].
///
/// Implemented for `bool`, `i8`, `i16`, `i32`, `i64`, `u8`, `u16`, `u32`,
/// `u64`, [`half::f16`],
/// [`half::bf16`], `f32`, `f64`, [`float8::F8E4M3`] and [`float8::F8E5M2`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor element type",
    label = "tessel has no element type for `{Self}`",
    note = "element types are bool, i8, i16, i32, i64, u8, u16, u32, u64, half::f16, half::bf16, f32, f64, float8::F8E4M3 and float8::F8E5M2"
)]
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The element type this host type carries.
    const DTYPE: DType;
    /// Appends the little-endian bytes of `self` to `out`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one value from exactly [`DType::size_in_bytes`] little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($t:ty, $d:expr, $n:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}

element!(i8, DType::S8, 1);
element!(i16, DType::S16, 2);
element!(i32, DType::S32, 4);
element!(i64, DType::S64, 8);
element!(u8, DType::U8, 1);
element!(u16, DType::U16, 2);
element!(u32, DType::U32, 4);
element!(u64, DType::U64, 8);
element!(f32, DType::F32, 4);
element!(f64, DType::F64, 8);
element!(half::f16, DType::F16, 2);
element!(half::bf16, DType::BF16, 2);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Pred;
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

macro_rules! element_f8 {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.push(self.to_bits());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_bits(bytes[0])
            }
        }
    };
}

element_f8!(float8::F8E4M3, DType::F8E4M3FN);
element_f8!(float8::F8E5M2, DType::F8E5M2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trips() {
        for d in DType::ALL {
            let v = if d.is_pred() { 1.0 } else { 3.0 };
            let bytes = d.encode_f64(v);
            assert_eq!(bytes.len(), d.size_in_bytes(), "{d}");
            assert_eq!(d.decode_f64(&bytes), v, "{d}");
            assert_eq!(DType::parse(d.name()), Some(d));
            assert_eq!(DType::parse(d.mlir_name()), Some(d), "{d}");
        }
    }

    #[test]
    fn sixteen_and_sixty_four_bit_integers() {
        assert_eq!(
            (S16.name(), S16.mlir_name(), S16.size_in_bytes()),
            ("s16", "i16", 2)
        );
        assert_eq!(
            (U16.name(), U16.mlir_name(), U16.size_in_bytes()),
            ("u16", "ui16", 2)
        );
        assert_eq!(
            (U64.name(), U64.mlir_name(), U64.size_in_bytes()),
            ("u64", "ui64", 8)
        );
        for (s, d) in [
            ("int16", S16),
            ("i16", S16),
            ("uint16", U16),
            ("uint64", U64),
        ] {
            assert_eq!(DType::parse(s), Some(d), "{s}");
        }
        assert!(U16.is_unsigned() && U64.is_unsigned() && !S16.is_unsigned());
        assert!(S16.is_integer() && U16.is_integer() && U64.is_integer());
        assert_eq!(U64.comparison_type(), "UNSIGNED");
        assert_eq!(S16.comparison_type(), "SIGNED");
        // Extremes encode to their bits; out-of-range values saturate.
        assert_eq!(U16.encode_f64(65535.0), vec![0xff, 0xff]);
        assert_eq!(U16.encode_f64(70000.0), vec![0xff, 0xff]);
        assert_eq!(S16.encode_f64(-32768.0), vec![0x00, 0x80]);
        assert_eq!(S16.decode_f64(&[0x00, 0x80]), -32768.0);
        assert_eq!(U64.encode_f64(-1.0), vec![0; 8]);
        assert_eq!(U64.decode_f64(&[0xff; 8]), u64::MAX as f64);
        let mut out = Vec::new();
        (u64::MAX - 1).write_le(&mut out);
        assert_eq!(u64::read_le(&out), u64::MAX - 1);
        assert_eq!(<i16 as Element>::DTYPE, S16);
        assert_eq!(<u16 as Element>::DTYPE, U16);
        assert_eq!(<u64 as Element>::DTYPE, U64);
    }
}
