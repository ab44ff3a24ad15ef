//! [`FlashOptions`]: the static parameters every attention kernel here takes,
//! and the band (causal / sliding-window) mask they describe.

use tessel::kernel::distinct_candidates;
use tessel::prelude::*;

/// The static parameters of the attention kernels: masking, scaling,
/// soft-capping, dropout and block sizes. Part of the compile key (it is a
/// [`StaticArg`]); build it with the methods below.
///
/// Masking is a *band* around the diagonal: query `i` sits at key position
/// `i + q_offset`, and key `j` is visible iff
/// `-left <= j - (i + q_offset) <= right`, where `(left, right)` is
/// [`window`](FlashOptions::window) (`None` is unbounded) and `causal` forces
/// `right <= 0`. `q_offset = 0` aligns the first query with the first key
/// (as [`Mask::causal`] does); `q_offset = Skv - Sq` aligns the last query
/// with the last key (decoding against a cache).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::FlashOptions;
/// let o = FlashOptions::new()
///     .causal(true)
///     .window(Some(256), None)
///     .soft_cap(30.0)
///     .block_sizes(256, 512);
/// assert_eq!(o.band(), (Some(-256), Some(0)));
/// assert_eq!(FlashOptions::default().scale_for(64), 0.125);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashOptions {
    /// Keys after the query's position are hidden (`right` becomes at most 0).
    pub causal: bool,
    /// The logit scale; `None` is `1 / sqrt(D)`.
    pub sm_scale: Option<f64>,
    /// Sliding window `(left, right)`: keys at most `left` before and `right`
    /// after the query's position are visible; `None` leaves a side unbounded.
    pub window: (Option<usize>, Option<usize>),
    /// The key position of query 0 (see the type's documentation).
    pub q_offset: i64,
    /// Logit soft-cap: scaled logits `s` become `cap * tanh(s / cap)`.
    pub soft_cap: Option<f64>,
    /// Dropout probability on the attention probabilities (0 disables it);
    /// the seed is an input of the call (see
    /// [`AttentionInputs::dropout_seed`](super::AttentionInputs::dropout_seed)).
    pub dropout_rate: f64,
    /// Query rows per block.
    pub block_q: usize,
    /// Keys per block.
    pub block_kv: usize,
    /// Skip the in-program checks of a dynamic layout's tables
    /// ([`block_sparse_attention_dynamic`](fn@super::block_sparse_attention_dynamic);
    /// default `false`: a count, block id or kind out of range, or a key
    /// block listed twice for one query block, is
    /// [`Error::Check`](tessel::Error::Check) after the call).
    pub unchecked: bool,
}

impl Default for FlashOptions {
    /// Not causal, no window, `1 / sqrt(D)` scale, no soft-cap or dropout,
    /// blocks of 256 queries × 256 keys. (Causal attention at B=1, H=8,
    /// D=64 on a 2-core AVX-512 machine, against 512 × 256: 13% faster at
    /// S=2048 and 10% at S=8192 on `lammps-jax-pjrt-cpu` 0.11.2, 0–10% on the
    /// official plugin and ZML's build; 128-row blocks are slower on all
    /// three. A band's whole query blocks run as one traced loop, so the
    /// smaller blocks do not lengthen the compile.)
    fn default() -> Self {
        FlashOptions {
            causal: false,
            sm_scale: None,
            window: (None, None),
            q_offset: 0,
            soft_cap: None,
            dropout_rate: 0.0,
            block_q: 256,
            block_kv: 256,
            unchecked: false,
        }
    }
}

impl StaticArg for FlashOptions {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.causal)
            .push(&self.sm_scale)
            .push(&self.window)
            .push(&self.q_offset)
            .push(&self.soft_cap)
            .push(&self.dropout_rate)
            .push(&self.block_q)
            .push(&self.block_kv)
            .push(&self.unchecked);
    }

    /// Autotuning times query and key blocks of 128, 256 and 512 (cut to
    /// the sequence lengths, rounded up to 8), besides the value given;
    /// `inputs` start with `q [B, Hq, Sq, D]` and `k [B, Hkv, Skv, D]`.
    fn tuning_candidates(&self, inputs: &[TensorSpec]) -> Vec<Self> {
        let (Some(q), Some(k)) = (inputs.first(), inputs.get(1)) else {
            return Vec::new();
        };
        if q.rank() != 4 || k.rank() != 4 {
            return Vec::new();
        }
        let fit = |b: usize, s: usize| b.min(s.next_multiple_of(8).max(8));
        let variants = [128, 256, 512].into_iter().flat_map(|block_q| {
            [128, 256, 512].map(|block_kv| FlashOptions {
                block_q: fit(block_q, q.shape[2]),
                block_kv: fit(block_kv, k.shape[2]),
                ..*self
            })
        });
        distinct_candidates(*self, variants)
    }

    fn tuning_label(&self) -> String {
        format!("block_q = {}, block_kv = {}", self.block_q, self.block_kv)
    }
}

impl FlashOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Causal masking on or off.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// The logit scale (instead of `1 / sqrt(D)`).
    pub fn sm_scale(mut self, scale: f64) -> Self {
        self.sm_scale = Some(scale);
        self
    }

    /// A sliding window of `left` keys before and `right` keys after each
    /// query's position (`None`: unbounded on that side).
    pub fn window(mut self, left: Option<usize>, right: Option<usize>) -> Self {
        self.window = (left, right);
        self
    }

    /// The key position of query 0.
    pub fn q_offset(mut self, offset: i64) -> Self {
        self.q_offset = offset;
        self
    }

    /// Logit soft-cap `cap * tanh(s / cap)`.
    pub fn soft_cap(mut self, cap: f64) -> Self {
        self.soft_cap = Some(cap);
        self
    }

    /// Dropout with probability `rate` on the attention probabilities.
    pub fn dropout(mut self, rate: f64) -> Self {
        self.dropout_rate = rate;
        self
    }

    /// Block sizes: `block_q` query rows × `block_kv` keys.
    pub fn block_sizes(mut self, block_q: usize, block_kv: usize) -> Self {
        self.block_q = block_q;
        self.block_kv = block_kv;
        self
    }

    /// Skips the in-program checks of a dynamic layout's tables (see
    /// [`unchecked`](Self::unchecked)).
    pub fn unchecked(mut self) -> Self {
        self.unchecked = true;
        self
    }

    /// The logit scale for head dimension `d`.
    pub fn scale_for(&self, d: usize) -> f64 {
        self.sm_scale
            .unwrap_or_else(|| 1.0 / (d.max(1) as f64).sqrt())
    }

    /// The visible band as inclusive bounds on `key - query` (`None`:
    /// unbounded), with the offset, window and causality folded in.
    pub fn band(&self) -> (Option<i64>, Option<i64>) {
        let off = self.q_offset;
        let lo = self.window.0.map(|l| off.saturating_sub(to_i64(l)));
        let right = match (self.window.1, self.causal) {
            (Some(r), true) => Some(to_i64(r).min(0)),
            (None, true) => Some(0),
            (r, false) => r.map(to_i64),
        };
        (lo, right.map(|r| off.saturating_add(r)))
    }

    /// Whether some key is hidden from some query by the band.
    pub fn has_band(&self) -> bool {
        self.band() != (None, None)
    }

    /// The band as a [`Mask`] of `q_len × kv_len` (`None` when nothing is
    /// masked), for [`block_sparse_attention`](fn@super::block_sparse_attention)
    /// or to compare against a dense reference.
    pub fn band_mask(&self, q_len: usize, kv_len: usize) -> Option<Mask> {
        let (lo, hi) = self.band();
        let upper = hi.map(|h| Mask::causal_offset(q_len, kv_len, h));
        // k - q >= lo  <=>  !(k - q <= lo - 1)
        let lower = lo.map(|l| Mask::causal_offset(q_len, kv_len, l.saturating_sub(1)).not());
        match (upper, lower) {
            (Some(u), Some(l)) => u.and(&l).ok(),
            (u, l) => u.or(l),
        }
    }

    /// Whether key `k` is visible from query `q` under the band.
    pub fn allows(&self, q: usize, k: usize) -> bool {
        let d = to_i64(k) - to_i64(q);
        let (lo, hi) = self.band();
        lo.is_none_or(|lo| d >= lo) && hi.is_none_or(|hi| d <= hi)
    }
}

/// `x` as `i64`, saturating.
pub(crate) fn to_i64(x: usize) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// How the band covers a block of the score matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    /// Nothing visible: the block is skipped.
    Empty,
    /// Everything visible: no element mask.
    Full,
    /// Mixed: the element mask is applied.
    Partial,
}

/// Inclusive bounds on `k - q`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Band {
    pub(crate) lo: Option<i64>,
    pub(crate) hi: Option<i64>,
}

impl Band {
    pub(crate) fn of(o: &FlashOptions) -> Band {
        let (lo, hi) = o.band();
        Band { lo, hi }
    }

    /// The cover of the (non-empty, in-matrix) rectangle `[q0, q1) × [k0, k1)`.
    pub(crate) fn cover(&self, q0: usize, q1: usize, k0: usize, k1: usize) -> Cover {
        let dmin = to_i64(k0) - to_i64(q1 - 1);
        let dmax = to_i64(k1 - 1) - to_i64(q0);
        let lo = self.lo.unwrap_or(i64::MIN);
        let hi = self.hi.unwrap_or(i64::MAX);
        if dmax < lo || dmin > hi {
            Cover::Empty
        } else if lo <= dmin && dmax <= hi {
            Cover::Full
        } else {
            Cover::Partial
        }
    }

    /// The element mask of a block whose rows are at `q_pos` and columns at
    /// `k_pos` (s32 tensors broadcasting to the block), or `None` if the
    /// band is unbounded.
    pub(crate) fn element_mask(&self, q_pos: Tensor, k_pos: Tensor) -> Option<Tensor> {
        let d = k_pos - q_pos;
        let fit = |x: i64| x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let lo = self.lo.map(|lo| d.ge(fit(lo)));
        let hi = self.hi.map(|hi| d.le(fit(hi)));
        match (lo, hi) {
            (Some(a), Some(b)) => Some(a & b),
            (a, b) => a.or(b),
        }
    }
}
