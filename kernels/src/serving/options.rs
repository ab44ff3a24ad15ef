//! [`ServeOptions`]: the static parameters of the serving kernels.

use tessel::kernel::distinct_candidates;
use tessel::prelude::*;

/// Keys per step of the paged kernels when
/// [`pages_per_block`](ServeOptions::pages_per_block) is 0. On the 2-core
/// CPU machine a decode step (8 sequences of 4096 tokens, 8 key/value
/// heads of 128) took 22–23 ms at 512 keys per step, 29–30 ms at 256 and
/// 50 ms at 4096; 1024 and 2048 keys were no faster than 512. On another
/// (an Intel Xeon) 2048 keys were best, 41 ms against 49–54: autotuning
/// ([`ServeOptions`]'s `tuning_candidates`) picks the block per machine.
pub const AUTO_PAGED_KEYS: usize = 512;

/// The default of [`max_logits_bytes`](ServeOptions::max_logits_bytes):
/// 1 MiB holds the logits of 8 key/value heads of 4 query rows over 8192
/// keys in f32. A chunk's fill and softmax cost time in proportion to its
/// width whatever the sequence's length, so a short sequence in a wide
/// table pays for at most one chunk.
pub const DEFAULT_LOGITS_BYTES: usize = 1 << 20;

/// The default of [`max_dense_bytes`](ServeOptions::max_dense_bytes):
/// decode steps whose gathered keys, values and logits fit 16 MiB take the
/// loop-free form. On the 2-core CPU machine (f32, pages of 16) it was
/// 1.2–2.4× faster than the loops up to 17 MB (4 sequences of 1024 keys,
/// 8 heads of 64: 1.4 against 2.0 ms; 8 of 256 keys: 0.43 against 1.03
/// ms) and 1.35× slower at 34 MB (8 of 512 keys, 8 heads of 128), and its
/// program compiles without the loops (a 2-layer GPT's decode step: 0.61–0.68
/// s against 0.78–0.91).
pub const DEFAULT_DENSE_BYTES: usize = 16 << 20;

/// The static parameters of the decode and paged attention kernels. Part
/// of the compile key (a [`StaticArg`]); build it with the methods below.
///
/// Attention here is always causal: query `i` of a sequence sits at key
/// position `p_i` (the last query at `kv_len - 1`) and sees the keys
/// `j <= p_i` of its own sequence, and, with a sliding window of `left`,
/// only those with `j >= p_i - left`.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::serving::ServeOptions;
/// let o = ServeOptions::new().window(1024).soft_cap(50.0).pages_per_block(4);
/// assert_eq!(o.window, Some(1024));
/// assert_eq!(ServeOptions::default().scale_for(64), 0.125);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServeOptions {
    /// The logit scale; `None` is `1 / sqrt(D)`.
    pub sm_scale: Option<f64>,
    /// Sliding window: a query at position `p` sees keys `p - left ..= p`
    /// (`None`: every earlier key).
    pub window: Option<usize>,
    /// Logit soft-cap: scaled logits `s` become `cap * tanh(s / cap)`.
    pub soft_cap: Option<f64>,
    /// Pages read per step of the paged kernels (one gather of this many
    /// pages, then one block of logits over their keys); 0 (the default):
    /// enough pages for about [`AUTO_PAGED_KEYS`] keys, at most a block
    /// table's width.
    pub pages_per_block: usize,
    /// Keys per step of [`decode_attention`](fn@super::decode_attention)
    /// over a contiguous cache.
    pub block_kv: usize,
    /// Query rows per tile of
    /// [`ragged_paged_attention`](fn@super::ragged_paged_attention) (a
    /// sequence's queries are walked in tiles of this many rows).
    pub block_q: usize,
    /// The largest logits buffer (bytes, `Hkv × rows × keys` in the
    /// statistics' dtype) of the two-pass form, which a tile of at most 16
    /// query rows takes: the keys in chunks whose logits fit this buffer,
    /// and for each chunk every block's logits first, one softmax, then the
    /// weighted values, with no per-block rescaling (with the logits as one
    /// matrix-vector product per row, the benchmark's decode step went from
    /// 48–52 to 22 ms on the CPU plugin). Larger tiles, and buffers that
    /// cannot hold one block's logits (0, say), take the online softmax.
    pub max_logits_bytes: usize,
    /// The largest decode step (bytes: every sequence's keys and values
    /// over its whole block table, in the queries' dtype, and the logits
    /// `[B, Hq, keys]`) that [`paged_attention`](fn@super::paged_attention)
    /// computes in one loop-free form: all pages gathered at once, one
    /// masked softmax, as a dense decode over a contiguous cache does.
    /// Larger steps walk each sequence's blocks in traced loops bounded by
    /// its length (they read only the keys a sequence has). 0: always the
    /// loops.
    pub max_dense_bytes: usize,
    /// Skip the checks of the block tables, lengths and query offsets
    /// (default `false`: they are checked inside the program, and a bad
    /// entry is [`Error::Check`](tessel::Error::Check) after the call).
    /// For callers that validate their metadata elsewhere.
    pub unchecked: bool,
}

impl Default for ServeOptions {
    /// No window or soft-cap, `1 / sqrt(D)` scale, about
    /// [`AUTO_PAGED_KEYS`] keys per step of the paged kernels, 128 keys per
    /// step over a contiguous cache, query tiles of 32 rows, the two-pass
    /// form up to [`DEFAULT_LOGITS_BYTES`] of logits, the loop-free decode
    /// up to [`DEFAULT_DENSE_BYTES`].
    fn default() -> Self {
        ServeOptions {
            sm_scale: None,
            window: None,
            soft_cap: None,
            pages_per_block: 0,
            block_kv: 128,
            block_q: 32,
            max_logits_bytes: DEFAULT_LOGITS_BYTES,
            max_dense_bytes: DEFAULT_DENSE_BYTES,
            unchecked: false,
        }
    }
}

impl StaticArg for ServeOptions {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.sm_scale)
            .push(&self.window)
            .push(&self.soft_cap)
            .push(&self.pages_per_block)
            .push(&self.block_kv)
            .push(&self.block_q)
            .push(&self.max_logits_bytes)
            .push(&self.max_dense_bytes)
            .push(&self.unchecked);
    }

    /// Autotuning times the paged kernels with enough pages per step for
    /// about 256, 512, 1024, 2048 and 4096 keys (at most a block table's
    /// width), and [`decode_attention`](fn@super::decode_attention) with
    /// `block_kv` of 64 to 1024 keys (at most the cache's length), besides
    /// the value given. The best block differs by machine: a decode step
    /// of 8 sequences of 4096 keys was fastest at 512 keys on one 2-core
    /// machine and at 2048 on another.
    ///
    /// `inputs` start with `q` and the keys; a paged kernel's `q` has rank
    /// 3 and its block tables are its first `s32` matrix, decode's `q` has
    /// rank 4. With the default `pages_per_block` (0), the value given is
    /// the page count it stands for, so it is not measured twice.
    fn tuning_candidates(&self, inputs: &[TensorSpec]) -> Vec<Self> {
        let (Some(q), Some(k)) = (inputs.first(), inputs.get(1)) else {
            return Vec::new();
        };
        if k.rank() != 4 {
            return Vec::new();
        }
        let (given, variants): (Self, Vec<Self>) = match q.rank() {
            3 => {
                let page = k.shape[1].max(1);
                let Some(width) = inputs
                    .iter()
                    .find(|s| s.dtype == S32 && s.rank() == 2)
                    .map(|s| s.shape[1].max(1))
                else {
                    return Vec::new();
                };
                let with_pages = |pages: usize| ServeOptions {
                    pages_per_block: pages,
                    ..*self
                };
                let variants = [256, 512, 1024, 2048, 4096]
                    .iter()
                    .map(|keys: &usize| with_pages(keys.div_ceil(page).min(width)))
                    .collect();
                (with_pages(self.pages_for(page, width)), variants)
            }
            4 => {
                let len = k.shape[2].max(1);
                let variants = [64, 128, 256, 512, 1024]
                    .iter()
                    .map(|&keys: &usize| ServeOptions {
                        block_kv: keys.min(len),
                        ..*self
                    })
                    .collect();
                (*self, variants)
            }
            _ => return Vec::new(),
        };
        distinct_candidates(given, variants)
    }

    fn tuning_label(&self) -> String {
        format!(
            "pages_per_block = {}, block_kv = {}",
            self.pages_per_block, self.block_kv
        )
    }
}

impl ServeOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The logit scale (instead of `1 / sqrt(D)`).
    pub fn sm_scale(mut self, scale: f64) -> Self {
        self.sm_scale = Some(scale);
        self
    }

    /// A sliding window of `left` keys before each query's position.
    pub fn window(mut self, left: usize) -> Self {
        self.window = Some(left);
        self
    }

    /// Logit soft-cap `cap * tanh(s / cap)`.
    pub fn soft_cap(mut self, cap: f64) -> Self {
        self.soft_cap = Some(cap);
        self
    }

    /// Pages gathered per step of the paged kernels (0, the default:
    /// enough pages for about [`AUTO_PAGED_KEYS`] keys).
    pub fn pages_per_block(mut self, pages: usize) -> Self {
        self.pages_per_block = pages;
        self
    }

    /// Keys per step over a contiguous cache.
    pub fn block_kv(mut self, keys: usize) -> Self {
        self.block_kv = keys;
        self
    }

    /// Query rows per tile of the ragged kernel.
    pub fn block_q(mut self, rows: usize) -> Self {
        self.block_q = rows;
        self
    }

    /// The largest logits buffer of the two-pass form's chunks (0: always
    /// the online softmax).
    pub fn max_logits_bytes(mut self, bytes: usize) -> Self {
        self.max_logits_bytes = bytes;
        self
    }

    /// The largest decode step [`paged_attention`](fn@super::paged_attention)
    /// computes without loops (see [`max_dense_bytes`](Self::max_dense_bytes);
    /// 0: always the looped forms).
    pub fn max_dense_bytes(mut self, bytes: usize) -> Self {
        self.max_dense_bytes = bytes;
        self
    }

    /// Skips the in-program checks of the metadata (see
    /// [`unchecked`](Self::unchecked)): for callers that validate block
    /// tables, lengths and offsets elsewhere.
    pub fn unchecked(mut self) -> Self {
        self.unchecked = true;
        self
    }

    /// The logit scale for head dimension `d`.
    pub fn scale_for(&self, d: usize) -> f64 {
        self.sm_scale
            .unwrap_or_else(|| 1.0 / (d.max(1) as f64).sqrt())
    }

    /// The pages per step for pages of `page_size` tokens and block tables
    /// of `width` pages.
    pub fn pages_for(&self, page_size: usize, width: usize) -> usize {
        if self.pages_per_block > 0 {
            self.pages_per_block
        } else {
            AUTO_PAGED_KEYS.div_ceil(page_size.max(1)).min(width).max(1)
        }
    }

    /// A message for options no kernel can use, or `None`.
    pub(crate) fn problem(&self) -> Option<String> {
        if let Some(cap) = self.soft_cap {
            if !(cap.is_finite() && cap > 0.0) {
                return Some(format!("the soft-cap must be positive, got {cap}"));
            }
        }
        if let Some(s) = self.sm_scale {
            if !s.is_finite() {
                return Some(format!("the logit scale must be finite, got {s}"));
            }
        }
        if self.block_kv == 0 || self.block_q == 0 {
            return Some(format!(
                "block_kv and block_q must be positive, got {} and {}",
                self.block_kv, self.block_q
            ));
        }
        if self.pages_per_block > 1 << 16 || self.block_kv > 1 << 20 || self.block_q > 1 << 16 {
            return Some(format!(
                "block sizes too large: pages_per_block {} (at most 65536), block_kv {} (at most 2^20), \
                 block_q {} (at most 65536)",
                self.pages_per_block, self.block_kv, self.block_q
            ));
        }
        None
    }
}
