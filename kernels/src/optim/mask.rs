//! Which parameters a transform applies to, chosen by their tree paths
//! (weight decay on matrices, not on norms and biases).

use tessel::prelude::*;

/// Leaves chosen by path patterns. A pattern matches a whole path
/// (`layers.0.attn.wq`); `*` stands for any run of characters, dots
/// included.
///
/// ```
/// use tessel_kernels::optim::PathMask;
/// let no_norms = PathMask::except(["*norm*", "*.b", "*bias"]);
/// assert!(no_norms.matches("layers.0.attn.wq"));
/// assert!(!no_norms.matches("layers.0.norm1.g"));
/// assert!(!no_norms.matches("head.b"));
/// assert!(PathMask::only(["embed"]).matches("embed"));
/// assert!(!PathMask::only(["embed"]).matches("embed_pos"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum PathMask {
    /// Every leaf.
    #[default]
    All,
    /// The leaves matching one of the patterns.
    Only(Vec<String>),
    /// The leaves matching none of the patterns.
    Except(Vec<String>),
}

impl PathMask {
    /// The leaves matching one of `patterns`.
    pub fn only<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        PathMask::Only(patterns.into_iter().map(Into::into).collect())
    }

    /// The leaves matching none of `patterns`.
    pub fn except<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        PathMask::Except(patterns.into_iter().map(Into::into).collect())
    }

    /// Whether the leaf at `path` is chosen.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathMask::All => true,
            PathMask::Only(p) => p.iter().any(|p| glob(p, path)),
            PathMask::Except(p) => !p.iter().any(|p| glob(p, path)),
        }
    }

    pub(crate) fn write_key(&self, key: &mut StaticKey) {
        key.push_hash(self);
    }
}

/// Whether `pattern` (with `*` for any run of characters) matches all of `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return text.is_empty(),
    };
    let Some(mut tail) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}
