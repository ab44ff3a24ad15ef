//! Attention masks computed lazily at block granularity (the "mask" layer of
//! splash attention).
//!
//! A [`Mask`] says which `(q, k)` positions of a `q_len × kv_len` attention
//! score matrix are allowed. Analytic masks (full, causal, sliding window,
//! chunked causal) store only their parameters; [`Mask::from_dense`] stores
//! the bits; `and`/`or`/`not` build a small expression tree. Nothing
//! materializes the whole matrix unless [`Mask::to_dense`] is called.
//!
//! * [`Mask::classify`] splits the matrix into `block_q × block_kv` blocks and
//!   labels each [`BlockKind::Empty`], [`BlockKind::Full`] or
//!   [`BlockKind::Partial`] (a [`BlockLayout`]), from which
//!   [`BlockLayout::mask_info`] builds the block tables a kernel with a
//!   dynamic block layout iterates over.
//! * [`Mask::block_mask`] traces the element mask of one block as a
//!   `pred[block_q, block_kv]` tensor, at a static or traced block index.
//! * [`MultiHeadMask`] holds one mask per head (or one shared by all heads).
//!
//! Conventions: `q` indexes rows, `k` columns, both from 0. Positions outside
//! the matrix (in the ragged last blocks) are never allowed.

mod classify;
mod multi;
mod trace;

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, HostError, Result};
use crate::host::HostTensor;

pub use classify::{BlockKind, BlockLayout, MaskInfo, MAX_CLASSIFIED_BLOCKS};
pub use multi::{MultiHeadLayout, MultiHeadMask};
pub use trace::BlockIndex;

/// Which `(q, k)` positions of a `q_len × kv_len` attention score matrix are
/// allowed.
///
/// A `Mask` is a cheap value (cloning shares it): analytic masks keep only
/// their parameters, dense masks their bits, and combinations a tree of the
/// masks they combine. Classifying blocks ([`Mask::classify`]) costs O(1)
/// per block for analytic masks, so an 8192 × 8192 causal mask never
/// allocates its 64M entries.
///
/// | constructor | `(q, k)` is allowed iff |
/// |---|---|
/// | [`full`](Mask::full) | always |
/// | [`causal`](Mask::causal) | `k <= q` |
/// | [`causal_offset`](Mask::causal_offset) | `k <= q + offset` |
/// | [`local`](Mask::local) | `q - left <= k <= q + right` (a missing bound is unbounded) |
/// | [`chunked_causal`](Mask::chunked_causal) | `q / chunk == k / chunk && k <= q` |
/// | [`from_dense`](Mask::from_dense) | `bits[q * kv_len + k]` |
///
/// ```
/// use tessel_dsl::tile::mask::{BlockKind, Mask};
/// use tessel_dsl::{kernel::KernelConfig, trace, TensorSpec, PRED};
///
/// // A causal sliding window of 3 keys, without the first key.
/// let mask = Mask::local(6, 6, Some(2), Some(0))
///     .and(&Mask::from_dense(6, 6, (0..36).map(|i| i % 6 != 0).collect())?)?;
/// assert!(mask.is_allowed(3, 2) && !mask.is_allowed(3, 0) && !mask.is_allowed(2, 3));
///
/// // Blocks: 512 × 512 causal in 128 × 128 blocks.
/// let layout = Mask::causal(512, 512).classify(128, 128)?;
/// assert_eq!((layout.num_empty(), layout.num_partial(), layout.num_full()), (6, 4, 6));
/// assert_eq!(layout.kind(1, 0), Some(BlockKind::Full));
/// let row: Vec<_> = layout.kv_blocks_for(1).collect();
/// assert_eq!(row, [(0, BlockKind::Full), (1, BlockKind::Partial)]);
///
/// // The element mask of one block, traced into a kernel.
/// let g = trace("k", &[], KernelConfig::default(), |_| {
///     Mask::causal(512, 512).block_mask(1, 1, 128, 128)
/// })?;
/// assert_eq!(g.output_specs()[0], TensorSpec::new([128, 128], PRED));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone)]
pub struct Mask {
    q_len: usize,
    kv_len: usize,
    node: Arc<Node>,
}

/// What a mask is made of.
enum Node {
    Full,
    Causal {
        offset: i64,
    },
    Local {
        left: Option<usize>,
        right: Option<usize>,
    },
    ChunkedCausal {
        chunk: usize,
    },
    Dense(Vec<bool>),
    And(Mask, Mask),
    Or(Mask, Mask),
    Not(Mask),
}

/// Inclusive bounds on `k - q` (`None` is unbounded).
type Band = (Option<i64>, Option<i64>);

impl Node {
    /// The band `lo <= k - q <= hi` that full, causal and local masks are.
    fn band(&self) -> Option<Band> {
        match *self {
            Node::Full => Some((None, None)),
            Node::Causal { offset } => Some((None, Some(offset))),
            Node::Local { left, right } => Some((left.map(|l| -to_i64(l)), right.map(to_i64))),
            _ => None,
        }
    }
}

/// `x` as `i64`, saturating.
fn to_i64(x: usize) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// The error every mask operation returns for bad input.
pub(crate) fn mask_error(message: impl fmt::Display) -> Error {
    HostError::InvalidInput {
        what: "mask",
        message: message.to_string(),
    }
    .into()
}

impl Mask {
    fn new(q_len: usize, kv_len: usize, node: Node) -> Mask {
        Mask {
            q_len,
            kv_len,
            node: Arc::new(node),
        }
    }

    /// Every position allowed.
    pub fn full(q_len: usize, kv_len: usize) -> Mask {
        Mask::new(q_len, kv_len, Node::Full)
    }

    /// The standard causal mask: `(q, k)` is allowed iff `k <= q`.
    ///
    /// When `kv_len > q_len` this is *not* aligned to the end of the keys
    /// (the last query sees only the first `q_len` keys); use
    /// [`causal_offset`](Mask::causal_offset) with `offset = kv_len - q_len`
    /// for that.
    pub fn causal(q_len: usize, kv_len: usize) -> Mask {
        Mask::new(q_len, kv_len, Node::Causal { offset: 0 })
    }

    /// A shifted causal mask: `(q, k)` is allowed iff `k <= q + offset`
    /// (`offset` may be negative).
    pub fn causal_offset(q_len: usize, kv_len: usize, offset: i64) -> Mask {
        Mask::new(q_len, kv_len, Node::Causal { offset })
    }

    /// A sliding window: `(q, k)` is allowed iff `q - left <= k <= q + right`,
    /// where `None` leaves that side unbounded. `local(.., Some(w), Some(0))`
    /// is a causal window of `w + 1` keys; `local(.., None, None)` is full.
    pub fn local(q_len: usize, kv_len: usize, left: Option<usize>, right: Option<usize>) -> Mask {
        Mask::new(q_len, kv_len, Node::Local { left, right })
    }

    /// Chunked causal attention (as in Llama 4): `(q, k)` is allowed iff
    /// `q / chunk == k / chunk && k <= q`. A `chunk` of 0 is an error.
    pub fn chunked_causal(q_len: usize, kv_len: usize, chunk: usize) -> Result<Mask> {
        if chunk == 0 {
            return Err(mask_error(
                "the chunk size of a chunked causal mask must be positive",
            ));
        }
        Ok(Mask::new(q_len, kv_len, Node::ChunkedCausal { chunk }))
    }

    /// An arbitrary mask from row-major bits (`bits[q * kv_len + k]`); their
    /// number must be `q_len * kv_len`.
    pub fn from_dense(q_len: usize, kv_len: usize, bits: Vec<bool>) -> Result<Mask> {
        match q_len.checked_mul(kv_len) {
            Some(n) if n == bits.len() => Ok(Mask::new(q_len, kv_len, Node::Dense(bits))),
            _ => Err(mask_error(format!(
                "a dense {q_len} x {kv_len} mask needs {} bits, got {}",
                q_len as u128 * kv_len as u128,
                bits.len()
            ))),
        }
    }

    /// Positions allowed by both masks; their shapes must match.
    pub fn and(&self, other: &Mask) -> Result<Mask> {
        self.check_same_shape("and", other)?;
        Ok(Mask::new(
            self.q_len,
            self.kv_len,
            Node::And(self.clone(), other.clone()),
        ))
    }

    /// Positions allowed by either mask; their shapes must match.
    pub fn or(&self, other: &Mask) -> Result<Mask> {
        self.check_same_shape("or", other)?;
        Ok(Mask::new(
            self.q_len,
            self.kv_len,
            Node::Or(self.clone(), other.clone()),
        ))
    }

    /// The positions of the matrix this mask does not allow.
    pub fn not(&self) -> Mask {
        Mask::new(self.q_len, self.kv_len, Node::Not(self.clone()))
    }

    fn check_same_shape(&self, op: &str, other: &Mask) -> Result<()> {
        if self.shape() != other.shape() {
            return Err(mask_error(format!(
                "cannot {op} a {} x {} mask with a {} x {} mask",
                self.q_len, self.kv_len, other.q_len, other.kv_len
            )));
        }
        Ok(())
    }

    /// Number of query positions (rows).
    pub fn q_len(&self) -> usize {
        self.q_len
    }

    /// Number of key positions (columns).
    pub fn kv_len(&self) -> usize {
        self.kv_len
    }

    /// `(q_len, kv_len)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.q_len, self.kv_len)
    }

    /// Whether `(q, k)` is allowed (`false` outside the matrix).
    pub fn is_allowed(&self, q: usize, k: usize) -> bool {
        q < self.q_len && k < self.kv_len && self.eval(q, k)
    }

    /// `(q, k)` inside the matrix.
    fn eval(&self, q: usize, k: usize) -> bool {
        if let Some((lo, hi)) = self.node.band() {
            let d = to_i64(k) - to_i64(q);
            return lo.is_none_or(|lo| d >= lo) && hi.is_none_or(|hi| d <= hi);
        }
        match &*self.node {
            Node::ChunkedCausal { chunk } => q / chunk == k / chunk && k <= q,
            Node::Dense(bits) => bits[q * self.kv_len + k],
            Node::And(a, b) => a.eval(q, k) && b.eval(q, k),
            Node::Or(a, b) => a.eval(q, k) || b.eval(q, k),
            Node::Not(a) => !a.eval(q, k),
            Node::Full | Node::Causal { .. } | Node::Local { .. } => unreachable!("bands"),
        }
    }

    /// The whole mask as row-major bits (`q_len * kv_len` of them).
    pub fn to_dense(&self) -> Vec<bool> {
        let mut out = vec![false; self.q_len * self.kv_len];
        self.write_dense(&mut out);
        out
    }

    /// Sets the allowed positions of `out` (`q_len × kv_len`, all false).
    fn write_dense(&self, out: &mut [bool]) {
        for q in 0..self.q_len {
            let row = &mut out[q * self.kv_len..(q + 1) * self.kv_len];
            for (a, b) in self.row_runs(q, 0, self.kv_len) {
                row[a..b].fill(true);
            }
        }
    }

    /// The whole mask as a `pred[q_len, kv_len]` host tensor.
    pub fn to_host_tensor(&self) -> Result<HostTensor> {
        let spec =
            crate::shape::TensorSpec::new([self.q_len, self.kv_len], crate::dtype::DType::Pred);
        let n = spec.check_size()?;
        let mut bits: Vec<bool> = Vec::new();
        bits.try_reserve_exact(n).map_err(|_| HostError::TooLarge {
            spec: spec.to_string(),
            reason: format!("{n} bytes could not be allocated"),
        })?;
        bits.resize(n, false);
        self.write_dense(&mut bits);
        HostTensor::from_vec(bits, [self.q_len, self.kv_len])
    }

    /// Whether any part of this mask stores explicit bits.
    pub fn has_dense_part(&self) -> bool {
        match &*self.node {
            Node::Dense(_) => true,
            Node::And(a, b) | Node::Or(a, b) => a.has_dense_part() || b.has_dense_part(),
            Node::Not(a) => a.has_dense_part(),
            _ => false,
        }
    }

    /// The allowed keys of row `q` within `k0..k1`, as sorted, disjoint,
    /// non-empty half-open runs. Requires `q < q_len` and `k0 <= k1 <= kv_len`.
    fn row_runs(&self, q: usize, k0: usize, k1: usize) -> Vec<(usize, usize)> {
        if k0 >= k1 {
            return Vec::new();
        }
        // A run [a, b) clipped to [k0, k1), computed in i64.
        let clip = |a: i64, b: i64| {
            let a = a.max(to_i64(k0));
            let b = b.min(to_i64(k1));
            if a < b {
                vec![(a as usize, b as usize)]
            } else {
                Vec::new()
            }
        };
        if let Some((lo, hi)) = self.node.band() {
            let q = to_i64(q);
            let a = lo.map_or(i64::MIN, |lo| q.saturating_add(lo));
            let b = hi.map_or(i64::MAX, |hi| q.saturating_add(hi).saturating_add(1));
            return clip(a, b);
        }
        match &*self.node {
            Node::ChunkedCausal { chunk } => clip(to_i64(q / chunk * chunk), to_i64(q) + 1),
            Node::Dense(bits) => {
                let row = &bits[q * self.kv_len..(q + 1) * self.kv_len];
                let mut runs = Vec::new();
                let mut k = k0;
                while k < k1 {
                    if row[k] {
                        let start = k;
                        while k < k1 && row[k] {
                            k += 1;
                        }
                        runs.push((start, k));
                    } else {
                        k += 1;
                    }
                }
                runs
            }
            Node::And(a, b) => intersect(&a.row_runs(q, k0, k1), &b.row_runs(q, k0, k1)),
            Node::Or(a, b) => union(&a.row_runs(q, k0, k1), &b.row_runs(q, k0, k1)),
            Node::Not(a) => complement(&a.row_runs(q, k0, k1), k0, k1),
            Node::Full | Node::Causal { .. } | Node::Local { .. } => unreachable!("bands"),
        }
    }
}

/// The intersection of two sorted lists of disjoint runs.
fn intersect(a: &[(usize, usize)], b: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo < hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The union of two sorted lists of disjoint runs, with touching runs merged.
fn union(a: &[(usize, usize)], b: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut all: Vec<(usize, usize)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The complement of sorted disjoint runs within `[k0, k1)`.
fn complement(a: &[(usize, usize)], k0: usize, k1: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = k0;
    for &(s, e) in a {
        if s > at {
            out.push((at, s));
        }
        at = e;
    }
    if at < k1 {
        out.push((at, k1));
    }
    out
}

impl fmt::Debug for Mask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mask[{}x{}](", self.q_len, self.kv_len)?;
        self.fmt_node(f)?;
        f.write_str(")")
    }
}

impl Mask {
    fn fmt_node(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.node {
            Node::Full => f.write_str("full"),
            Node::Causal { offset: 0 } => f.write_str("causal"),
            Node::Causal { offset } => write!(f, "causal_offset({offset})"),
            Node::Local { left, right } => write!(f, "local({left:?}, {right:?})"),
            Node::ChunkedCausal { chunk } => write!(f, "chunked_causal({chunk})"),
            Node::Dense(bits) => {
                write!(f, "dense({} allowed)", bits.iter().filter(|b| **b).count())
            }
            Node::And(a, b) => {
                f.write_str("and(")?;
                a.fmt_node(f)?;
                f.write_str(", ")?;
                b.fmt_node(f)?;
                f.write_str(")")
            }
            Node::Or(a, b) => {
                f.write_str("or(")?;
                a.fmt_node(f)?;
                f.write_str(", ")?;
                b.fmt_node(f)?;
                f.write_str(")")
            }
            Node::Not(a) => {
                f.write_str("not(")?;
                a.fmt_node(f)?;
                f.write_str(")")
            }
        }
    }
}
