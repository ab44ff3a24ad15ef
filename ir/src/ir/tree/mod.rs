//! Trees of tensors: one structure (a model's parameters, an optimizer's
//! state, a batch) written once, generic over its leaf type, and used with
//! traced `tessel::Tensor` leaves inside a kernel, `DeviceBuffer`
//! leaves between calls, `HostTensor` leaves on the host and `TensorSpec`
//! leaves to compile. JAX calls these pytrees.
//!
//! This module holds a tree's data: its structure ([`TreeDef`]), the paths
//! of its leaves ([`TreePath`]) and the [`Leaf`] types. The traits that
//! relate the forms of one structure (`Tree`, `TreeValue`) are tessel-dsl's,
//! beside the traced `Tensor` they are written over.
//!
//! Paths name leaves the way checkpoints and errors show them: fields by
//! name, elements by index, joined with `.` (`layers.3.attn.wq`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::HostError;
use crate::host::HostTensor;
use crate::shape::TensorSpec;

/// A leaf type of trees: a traced tensor, a host tensor, a device buffer, a
/// sharded buffer or a spec.
pub trait Leaf: Sized + 'static {}

impl Leaf for HostTensor {}
impl Leaf for TensorSpec {}

/// One step of a [`TreePath`]: a field by name or an element by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A named field (or a kernel parameter's name).
    Field(&'static str),
    /// An element of a sequence, or a tuple field.
    Index(usize),
}

/// Where a leaf sits in a tree: its segments from the root. Shown joined
/// with `.` (`layers.3.attn.wq`); the root shows as `<root>`.
///
/// ```
/// use tessel_ir::ir::tree::{PathSegment, TreePath};
/// let mut p = TreePath::default();
/// p.push(PathSegment::Field("layers"));
/// p.push(PathSegment::Index(3));
/// p.push(PathSegment::Field("wq"));
/// assert_eq!(p.to_string(), "layers.3.wq");
/// ```
#[derive(Clone, Debug, Default)]
pub struct TreePath {
    segments: Vec<PathSegment>,
    /// The path as shown, kept up to date by `push` and `pop` (so naming
    /// every leaf of a large tree costs one copy per leaf); empty for an
    /// [`unnamed`](TreePath::unnamed) path.
    text: String,
    /// The length of `text` before each segment.
    ends: Vec<usize>,
    /// Whether only the segments are kept (the text is made when shown).
    unnamed: bool,
    /// Whether nothing is kept ([`silent`](TreePath::silent)).
    silent: bool,
}

impl PartialEq for TreePath {
    fn eq(&self, other: &Self) -> bool {
        self.segments == other.segments
    }
}

impl Eq for TreePath {}

impl std::hash::Hash for TreePath {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.segments.hash(state);
    }
}

impl TreePath {
    /// A path starting at the field (or parameter) `name`.
    pub fn field(name: &'static str) -> Self {
        let mut p = TreePath::default();
        p.push(PathSegment::Field(name));
        p
    }

    /// A root path that keeps only its segments, for walks that name a
    /// path only in an error (rebuilding a kernel's results): its
    /// [`as_str`](Self::as_str) is empty, its `Display` and
    /// [`error`](Self::error) show it in full.
    pub fn unnamed() -> Self {
        TreePath {
            unnamed: true,
            ..TreePath::default()
        }
    }

    /// A root path that keeps nothing: `push` and `pop` do no work, and it
    /// shows as `<root>` wherever it is. For the walks of a kernel call
    /// that either cannot fail (collecting its arguments) or, when they do,
    /// walk again with an [`unnamed`](Self::unnamed) path to say where.
    ///
    /// ```
    /// use tessel_ir::ir::tree::{PathSegment, TreePath};
    /// let mut p = TreePath::silent();
    /// p.push(PathSegment::Field("layers"));
    /// assert!(p.segments().is_empty());
    /// assert_eq!(p.to_string(), "<root>");
    /// ```
    pub fn silent() -> Self {
        TreePath {
            silent: true,
            ..TreePath::default()
        }
    }

    /// Descends one step.
    #[inline]
    pub fn push(&mut self, segment: PathSegment) {
        if self.silent {
            return;
        }
        self.push_segment(segment);
    }

    /// [`push`](Self::push) on a path that keeps its segments.
    fn push_segment(&mut self, segment: PathSegment) {
        if self.unnamed {
            self.segments.push(segment);
            return;
        }
        self.ends.push(self.text.len());
        if !self.segments.is_empty() {
            self.text.push('.');
        }
        match segment {
            PathSegment::Field(n) => self.text.push_str(n),
            PathSegment::Index(i) => {
                // Decimal digits without the formatting machinery (a
                // kernel call names every leaf of its tree arguments).
                let mut digits = [0u8; 20];
                let (mut at, mut rest) = (digits.len(), i);
                loop {
                    at -= 1;
                    digits[at] = b'0' + (rest % 10) as u8;
                    rest /= 10;
                    if rest == 0 {
                        break;
                    }
                }
                self.text
                    .extend(digits[at..].iter().map(|&d| char::from(d)));
            }
        }
        self.segments.push(segment);
    }

    /// Goes back up one step.
    #[inline]
    pub fn pop(&mut self) {
        if self.silent {
            return;
        }
        if let Some(end) = self.ends.pop() {
            self.text.truncate(end);
        }
        self.segments.pop();
    }

    /// The segments, root first.
    pub fn segments(&self) -> &[PathSegment] {
        &self.segments
    }

    /// The path joined with `.` (empty at the root, and for an
    /// [`unnamed`](Self::unnamed) path).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A [`HostError::Tree`] at this path.
    pub fn error(&self, message: impl Into<String>) -> HostError {
        HostError::Tree {
            path: self.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for TreePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.segments.is_empty() {
            f.write_str("<root>")
        } else if self.unnamed {
            for (i, s) in self.segments.iter().enumerate() {
                let dot = if i == 0 { "" } else { "." };
                match s {
                    PathSegment::Field(n) => write!(f, "{dot}{n}")?,
                    PathSegment::Index(k) => write!(f, "{dot}{k}")?,
                }
            }
            Ok(())
        } else {
            f.write_str(&self.text)
        }
    }
}

/// A static (non-tensor) field of a tree: its value, for rebuilding a tree
/// returned by a kernel, and its compile-cache key bytes, since it may
/// change the traced program.
#[derive(Clone)]
pub struct StaticValue {
    key: Vec<u8>,
    shown: String,
    value: Arc<dyn Any + Send + Sync>,
}

impl StaticValue {
    /// A static value with its key bytes (from
    /// `tessel::kernel::StaticKey`) and how it is shown.
    pub fn new<T: Any + Send + Sync>(value: T, key: Vec<u8>, shown: String) -> Self {
        StaticValue {
            key,
            shown,
            value: Arc::new(value),
        }
    }

    /// The value, when it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.value.downcast_ref()
    }

    /// How the value is shown (its `Debug` text).
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

impl fmt::Debug for StaticValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// The structure of one tree value without its leaves: what a flat list of
/// leaves needs to become that tree again (sequence lengths, which options
/// are present, which enum variant, the static fields' values). A kernel's
/// program keeps the structure of what its body returned.
#[derive(Clone, Debug)]
pub enum TreeDef {
    /// One leaf.
    Leaf,
    /// The children of a struct, tuple, array or `Vec` (or of `Some`), in order.
    Node(Vec<TreeDef>),
    /// An enum value: its variant's index and fields.
    Variant(usize, Vec<TreeDef>),
    /// `None`.
    Absent,
    /// A static field.
    Static(StaticValue),
}

impl TreeDef {
    /// How many leaves a tree of this structure has.
    pub fn num_leaves(&self) -> usize {
        match self {
            TreeDef::Leaf => 1,
            TreeDef::Node(c) | TreeDef::Variant(_, c) => c.iter().map(TreeDef::num_leaves).sum(),
            TreeDef::Absent | TreeDef::Static(_) => 0,
        }
    }

    /// Writes the structure's identity (lengths, variants, static values'
    /// keys) as bytes: two structures over the same leaf specs trace the
    /// same program exactly when these agree.
    pub fn write_key(&self, out: &mut Vec<u8>) {
        match self {
            TreeDef::Leaf => TreeDef::key_leaf(out),
            TreeDef::Node(c) => {
                TreeDef::key_node(out, c.len());
                c.iter().for_each(|d| d.write_key(out));
            }
            TreeDef::Variant(v, c) => {
                TreeDef::key_variant(out, *v, c.len());
                c.iter().for_each(|d| d.write_key(out));
            }
            TreeDef::Absent => TreeDef::key_absent(out),
            TreeDef::Static(s) => TreeDef::key_static(out, &s.key),
        }
    }

    /// The key of a [`Leaf`](TreeDef::Leaf) (for `Tree::write_key`
    /// written without building the structure).
    pub fn key_leaf(out: &mut Vec<u8>) {
        out.push(0);
    }

    /// The key of a [`Node`](TreeDef::Node) of `len` children, before theirs.
    pub fn key_node(out: &mut Vec<u8>, len: usize) {
        out.push(1);
        out.extend_from_slice(&(len as u64).to_le_bytes());
    }

    /// The key of a [`Variant`](TreeDef::Variant) `index` of `len` fields,
    /// before theirs.
    pub fn key_variant(out: &mut Vec<u8>, index: usize, len: usize) {
        out.push(2);
        out.extend_from_slice(&(index as u64).to_le_bytes());
        out.extend_from_slice(&(len as u64).to_le_bytes());
    }

    /// The key of [`Absent`](TreeDef::Absent).
    pub fn key_absent(out: &mut Vec<u8>) {
        out.push(3);
    }

    /// The key of a [`Static`](TreeDef::Static) field whose value's own
    /// key is `key`.
    pub fn key_static(out: &mut Vec<u8>, key: &[u8]) {
        out.push(4);
        out.extend_from_slice(&(key.len() as u64).to_le_bytes());
        out.extend_from_slice(key);
    }

    /// The children of a node, or an error at `path` naming what was
    /// expected (`what`: "a struct of 3 fields", ...).
    pub fn children(
        &self,
        path: &TreePath,
        count: Option<usize>,
        what: &str,
    ) -> Result<&[TreeDef], HostError> {
        match self {
            TreeDef::Node(c) if count.is_none_or(|n| n == c.len()) => Ok(c),
            other => Err(path.error(format!("expected {what}, found {}", other.describe()))),
        }
    }

    /// A short description, for errors.
    pub fn describe(&self) -> String {
        match self {
            TreeDef::Leaf => "a tensor".into(),
            TreeDef::Node(c) => format!("a node of {} children", c.len()),
            TreeDef::Variant(v, _) => format!("enum variant {v}"),
            TreeDef::Absent => "`None`".into(),
            TreeDef::Static(s) => format!("the static value {}", s.shown),
        }
    }
}
