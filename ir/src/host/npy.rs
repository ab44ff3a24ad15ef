//! `.npy` files (NumPy's array format, versions 1 to 3) in and out.
//!
//! Element types map to NumPy's: `bool`, `int8/16/32/64`,
//! `uint8/16/32/64`, `float16/32/64`. NumPy has no bfloat16 or fp8; tessel
//! reads and writes them the way `numpy.save` stores JAX's `ml_dtypes`
//! arrays: bf16 as descriptor `<V2` and fp8 e4m3fn as `|V1` (NumPy loads
//! both as raw bytes: `.view(ml_dtypes.bfloat16)` or
//! `.view(jnp.float8_e4m3fn)` gives them back), and it reads ml_dtypes'
//! `<f1` as fp8 e5m2. NumPy itself cannot load `<f1`, so e5m2 tensors are
//! written as `uint8` bit patterns (read back as u8; reinterpret them with
//! [`HostTensor::bitcast`]). A `uint16` file is u16 data: bf16 saved as its
//! `uint16` bit patterns reads as u16, and `.bitcast(DType::BF16)` gives
//! the bf16 values back.

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, HostError, Result};
use crate::host::HostTensor;
use crate::shape::TensorSpec;

const MAGIC: &[u8] = b"\x93NUMPY";

fn npy_err(path: Option<&Path>, message: impl Into<String>) -> Error {
    HostError::Npy {
        path: path.map(Path::to_path_buf),
        message: message.into(),
    }
    .into()
}

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Pred => "|b1",
        DType::S8 => "|i1",
        DType::S16 => "<i2",
        DType::S32 => "<i4",
        DType::S64 => "<i8",
        DType::U8 | DType::F8E5M2 => "|u1",
        DType::F8E4M3FN => "|V1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::BF16 => "<V2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// (dtype, whether the data is big-endian) of a NumPy type string.
fn parse_descr(d: &str) -> Option<(DType, bool)> {
    // The byte-order character, then the type code (split at a character
    // boundary: the header is user data and may hold any text).
    let order = d.chars().next()?;
    let code = &d[order.len_utf8()..];
    let big = match order {
        '>' => true,
        '<' | '|' | '=' => false,
        _ => return None,
    };
    let dtype = match code {
        "b1" => DType::Pred,
        "i1" => DType::S8,
        "i2" => DType::S16,
        "i4" => DType::S32,
        "i8" => DType::S64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "V2" => DType::BF16,
        "V1" => DType::F8E4M3FN,
        "f1" => DType::F8E5M2,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        _ => return None,
    };
    Some((dtype, big))
}

/// The value of `'key': value` in a header dict, as raw text.
fn field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat = format!("'{key}':");
    let start = header.find(&pat)? + pat.len();
    let rest = header[start..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

impl HostTensor {
    /// Encodes this tensor as `.npy` bytes (format version 1.0, C order).
    pub fn to_npy_bytes(&self) -> Vec<u8> {
        let shape = match self.shape().len() {
            0 => "()".to_string(),
            1 => format!("({},)", self.shape()[0]),
            _ => format!(
                "({})",
                self.shape()
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut header = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
            descr(self.dtype())
        );
        let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + self.as_bytes().len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(self.as_bytes());
        out
    }

    /// Decodes `.npy` bytes.
    pub fn from_npy_bytes(bytes: &[u8]) -> Result<HostTensor> {
        parse(bytes, None)
    }

    /// Writes this tensor to a `.npy` file.
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_npy_bytes()).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a `.npy` file.
    ///
    /// ```
    /// use tessel_ir::HostTensor;
    /// let t = HostTensor::from_vec(vec![1i32, 2, 3], [3])?;
    /// let back = HostTensor::from_npy_bytes(&t.to_npy_bytes())?;
    /// assert_eq!(back, t);
    /// assert!(HostTensor::from_npy_bytes(b"not an npy file").is_err());
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn read_npy(path: impl AsRef<Path>) -> Result<HostTensor> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        parse(&bytes, Some(path))
    }

    /// The same bytes reinterpreted as another dtype of the same element size
    /// (for example u8 data read from `.npy` as fp8, or u16 as bf16).
    ///
    /// ```
    /// use tessel_ir::{DType, HostTensor};
    /// // bf16 1.5 saved as its uint16 bit pattern.
    /// let bits = HostTensor::from_vec(vec![0x3fc0u16], [1])?;
    /// assert_eq!(bits.bitcast(DType::BF16)?.to_f64_vec(), vec![1.5]);
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn bitcast(self, dtype: DType) -> Result<HostTensor> {
        if dtype.size_in_bytes() != self.dtype().size_in_bytes() {
            return Err(HostError::Bitcast {
                from: self.spec().to_string(),
                to: dtype.to_string(),
            }
            .into());
        }
        let spec = TensorSpec::new(self.shape().to_vec(), dtype);
        HostTensor::from_bytes(spec, self.into_bytes())
    }
}

fn parse(bytes: &[u8], path: Option<&Path>) -> Result<HostTensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(npy_err(
            path,
            "missing the \\x93NUMPY magic: not an .npy file",
        ));
    }
    let major = bytes[6];
    let (hlen, hstart) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(npy_err(path, "truncated header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(npy_err(path, format!("unsupported format version {v}"))),
    };
    let Some(header) = bytes.get(hstart..hstart.saturating_add(hlen)) else {
        return Err(npy_err(path, "truncated header"));
    };
    let header = std::str::from_utf8(header).map_err(|_| npy_err(path, "header is not text"))?;
    let d = field(header, "descr")
        .map(|d| d.trim_matches(|c| c == '\'' || c == '"'))
        .ok_or_else(|| npy_err(path, "header has no 'descr'"))?;
    let (dtype, big) = parse_descr(d).ok_or_else(|| {
        npy_err(
            path,
            format!(
                "unsupported dtype '{d}' (supported: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, and \
                 ml_dtypes' bfloat16 '<V2', float8_e4m3fn '<V1' and float8_e5m2 '<f1')"
            ),
        )
    })?;
    let fortran = match field(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        _ => return Err(npy_err(path, "header has no valid 'fortran_order'")),
    };
    let shape_text =
        field(header, "shape").ok_or_else(|| npy_err(path, "header has no 'shape'"))?;
    let shape = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| npy_err(path, format!("bad shape {shape_text}")))?;
    let spec = TensorSpec::new(shape, dtype);
    let data = &bytes[hstart + hlen..];
    let n = spec
        .check_size()
        .map_err(|e| npy_err(path, e.to_string()))?;
    if data.len() != n {
        return Err(npy_err(
            path,
            format!("{spec} needs {n} data bytes, the file has {}", data.len()),
        ));
    }
    let mut data = data.to_vec();
    let w = dtype.size_in_bytes();
    if big && w > 1 {
        data.chunks_exact_mut(w).for_each(|c| c.reverse());
    }
    if fortran && spec.rank() > 1 {
        data = fortran_to_c(&data, &spec.shape, w);
    }
    HostTensor::from_bytes(spec, data)
}

/// Reorders column-major element data to row-major.
fn fortran_to_c(data: &[u8], shape: &[usize], w: usize) -> Vec<u8> {
    // `data` holds exactly the elements of `shape` (checked by the caller).
    let n = data.len() / w.max(1);
    let mut out = vec![0u8; data.len()];
    let mut idx = vec![0usize; shape.len()];
    for c_pos in 0..n {
        // Column-major offset of the row-major multi-index `idx`.
        let mut f_pos = 0;
        let mut stride = 1;
        for (i, &d) in shape.iter().enumerate() {
            f_pos += idx[i] * stride;
            stride *= d;
        }
        out[c_pos * w..(c_pos + 1) * w].copy_from_slice(&data[f_pos * w..(f_pos + 1) * w]);
        for i in (0..shape.len()).rev() {
            idx[i] += 1;
            if idx[i] < shape[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    out
}
