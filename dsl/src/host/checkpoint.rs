//! Checkpoints in the safetensors format (what the ecosystem reads: the
//! Hugging Face libraries, `safetensors.numpy.load_file`, candle): named
//! host tensors, every tessel dtype the format has (bf16, f16 and both fp8
//! kinds included), saved and loaded bit for bit.
//!
//! ```
//! use tessel_dsl::host::checkpoint::{self, Checkpoint};
//! use tessel_dsl::{HostTensor, TensorSpec, F32};
//! let dir = std::env::temp_dir().join(format!("tessel-ckpt-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("model.safetensors");
//! let w = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
//! let b = HostTensor::from_vec(vec![0.5f32, -0.5], [2])?;
//! checkpoint::save(&path, [("layers.0.w", &w), ("layers.0.b", &b)])?;
//! let mut ckpt = Checkpoint::load(&path)?;
//! let want = [
//!     ("layers.0.w".to_string(), TensorSpec::new([2, 2], F32)),
//!     ("layers.0.b".to_string(), TensorSpec::new([2], F32)),
//! ];
//! let loaded = ckpt.take_all(&want)?;
//! assert_eq!(loaded, vec![w, b]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), tessel_dsl::Error>(())
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};

use crate::dtype::DType;
use crate::error::{Error, HostError, Result};
use crate::host::HostTensor;
use crate::shape::TensorSpec;

/// The safetensors dtype of a tessel dtype (every tessel dtype has one).
fn to_format(d: DType) -> Dtype {
    match d {
        DType::Pred => Dtype::BOOL,
        DType::S8 => Dtype::I8,
        DType::S16 => Dtype::I16,
        DType::S32 => Dtype::I32,
        DType::S64 => Dtype::I64,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F8E4M3FN => Dtype::F8_E4M3,
        DType::F8E5M2 => Dtype::F8_E5M2,
    }
}

/// The tessel dtype of a safetensors dtype, if tessel has it.
fn from_format(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Pred,
        Dtype::I8 => DType::S8,
        Dtype::I16 => DType::S16,
        Dtype::I32 => DType::S32,
        Dtype::I64 => DType::S64,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F8_E4M3 => DType::F8E4M3FN,
        Dtype::F8_E5M2 => DType::F8E5M2,
        _ => return None,
    })
}

/// A host tensor as the serializer sees it.
struct Viewed<'a>(&'a HostTensor);

impl View for Viewed<'_> {
    fn dtype(&self) -> Dtype {
        to_format(self.0.dtype())
    }

    fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.0.as_bytes())
    }

    fn data_len(&self) -> usize {
        self.0.as_bytes().len()
    }
}

fn invalid(message: impl Into<String>) -> Error {
    HostError::InvalidInput {
        what: "checkpoint",
        message: message.into(),
    }
    .into()
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Saves `tensors` (name, tensor) to `path` as one safetensors file,
/// written whole to a temporary file beside it and then renamed, so a
/// crash never leaves half a checkpoint under `path`. Names must be
/// distinct and non-empty.
pub fn save<'a, S: AsRef<str>>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (S, &'a HostTensor)>,
) -> Result<()> {
    save_with_metadata(path, tensors, &BTreeMap::new())
}

/// [`save`], with string metadata in the file's header (`__metadata__`:
/// the step, the model's configuration, ...).
pub fn save_with_metadata<'a, S: AsRef<str>>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (S, &'a HostTensor)>,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let mut named: BTreeMap<String, Viewed<'a>> = BTreeMap::new();
    for (name, t) in tensors {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(invalid("a tensor has an empty name"));
        }
        if named.insert(name.to_string(), Viewed(t)).is_some() {
            return Err(invalid(format!("the name `{name}` is given twice")));
        }
    }
    let info: Option<HashMap<String, String>> =
        (!metadata.is_empty()).then(|| metadata.clone().into_iter().collect());
    let bytes = safetensors::tensor::serialize(named, info)
        .map_err(|e| invalid(format!("cannot serialize: {e}")))?;
    let file_name = path
        .file_name()
        .ok_or_else(|| invalid(format!("{} names no file", path.display())))?;
    let mut partial_name = std::ffi::OsString::from(".");
    partial_name.push(file_name);
    partial_name.push(format!(".{}.partial", std::process::id()));
    let partial = path.with_file_name(partial_name);
    std::fs::write(&partial, &bytes).map_err(|e| io(&partial, e))?;
    std::fs::rename(&partial, path).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        io(path, e)
    })
}

/// A loaded checkpoint: its tensors by name, and its metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// The tensors not taken yet, by name.
    pub tensors: BTreeMap<String, HostTensor>,
    /// The header's `__metadata__`.
    pub metadata: BTreeMap<String, String>,
}

/// The most bytes a checkpoint file may have: a file larger than memory
/// is refused before it is read.
const MAX_FILE_BYTES: u64 = isize::MAX as u64;

impl Checkpoint {
    /// Reads the safetensors file at `path`. A file that is not one (a
    /// bad header, offsets past its end, a dtype tessel does not have) is
    /// a [`HostError::InvalidInput`] naming what is wrong.
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| io(path, e))?;
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            return Err(invalid(format!(
                "{} is not a regular file of a size that can be read",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| io(path, e))?;
        Self::from_bytes(&bytes).map_err(|e| match e {
            Error::Host(HostError::InvalidInput { message, .. }) => {
                invalid(format!("{}: {message}", path.display()))
            }
            other => other,
        })
    }

    /// Parses a safetensors file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Checkpoint> {
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| invalid(format!("not a safetensors file: {e}")))?;
        let parsed = SafeTensors::deserialize(bytes)
            .map_err(|e| invalid(format!("not a safetensors file: {e}")))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in parsed.tensors() {
            let dtype = from_format(view.dtype()).ok_or_else(|| {
                invalid(format!(
                    "`{name}` has dtype {:?}, which tessel does not have",
                    view.dtype()
                ))
            })?;
            let spec = TensorSpec::new(view.shape().to_vec(), dtype);
            let t = HostTensor::from_bytes(spec, view.data().to_vec())?;
            tensors.insert(name, t);
        }
        let metadata = header
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(Checkpoint { tensors, metadata })
    }

    /// Renames every tensor whose name starts with a `from` prefix of
    /// `map` to start with its `to` instead (the first prefix that
    /// matches), to load parameters saved under other names (a Hugging
    /// Face file's `model.layers.` as `layers.`, say).
    pub fn rename_prefixes(&mut self, map: &[(&str, &str)]) {
        let old = std::mem::take(&mut self.tensors);
        for (name, t) in old {
            let renamed = map
                .iter()
                .find_map(|(from, to)| name.strip_prefix(from).map(|rest| format!("{to}{rest}")))
                .unwrap_or(name);
            self.tensors.insert(renamed, t);
        }
    }

    /// Takes the tensors named in `want`, in its order, checking each one's
    /// dtype and shape, and leaves the others in the checkpoint (the
    /// optimizer's state beside the parameters, say). Every missing name
    /// and every type that differs is listed in one error; on error
    /// nothing is taken.
    pub fn take(&mut self, want: &[(String, TensorSpec)]) -> Result<Vec<HostTensor>> {
        let problems = self.problems(want);
        self.take_unless(want, problems)
    }

    /// The tensors of `want`, taken, unless there are `problems`.
    fn take_unless(
        &mut self,
        want: &[(String, TensorSpec)],
        problems: Vec<String>,
    ) -> Result<Vec<HostTensor>> {
        if !problems.is_empty() {
            return Err(invalid(problems.join("; ")));
        }
        Ok(want
            .iter()
            .filter_map(|(name, _)| self.tensors.remove(name))
            .collect())
    }

    /// What is missing or of another type among `want`.
    fn problems(&self, want: &[(String, TensorSpec)]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut missing = Vec::new();
        for (name, spec) in want {
            match self.tensors.get(name) {
                None => missing.push(name.as_str()),
                Some(t) if t.spec() != spec => {
                    problems.push(format!("{name}: expected {spec}, got {}", t.spec()))
                }
                Some(_) => {}
            }
        }
        if !missing.is_empty() {
            problems.push(format!("missing keys: {}", missing.join(", ")));
        }
        problems
    }

    /// [`take`](Self::take), and the checkpoint must hold nothing else:
    /// the names of the checkpoint that `want` does not ask for are listed
    /// as unexpected keys, with the missing ones and the types that differ
    /// (`layers.3.attn.wq: expected f32[256,256], got f32[256,128]`).
    pub fn take_all(&mut self, want: &[(String, TensorSpec)]) -> Result<Vec<HostTensor>> {
        let mut problems = self.problems(want);
        let asked: std::collections::BTreeSet<&str> =
            want.iter().map(|(n, _)| n.as_str()).collect();
        let unexpected: Vec<&str> = self
            .tensors
            .keys()
            .map(String::as_str)
            .filter(|n| !asked.contains(n))
            .collect();
        if !unexpected.is_empty() {
            problems.push(format!("unexpected keys: {}", unexpected.join(", ")));
        }
        self.take_unless(want, problems)
    }
}
