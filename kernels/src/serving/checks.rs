//! Argument checks of the serving kernels: shapes and dtypes, reported as
//! kernel errors naming the op, the shapes and the caller's line.

use tessel::prelude::*;
use tessel::report;
use tessel::Tree;

use super::ServeOptions;

/// A paged KV cache: pages `[P, page, Hkv, D]` for keys and values, and
/// for quantized pages (int8 or fp8) their per-token, per-head f32 scales
/// `[P, page, Hkv]`. A `#[derive(Tree)]` type: `PagedKv` inside a kernel
/// (a kernel parameter or result, donated to update it in place),
/// `PagedKv<DeviceBuffer>` between calls, `PagedKv<HostTensor>` on the host
/// ([`PagedKv::zeros`]).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::serving::PagedKv;
/// use tessel::F32;
/// // 32 pages of 16 tokens, 4 key/value heads of 64 features.
/// let cache = PagedKv::zeros(32, 16, 4, 64, F32);
/// assert_eq!(cache.k_pages.spec().to_string(), "f32[32,16,4,64]");
/// assert!(cache.scales.is_none());
/// ```
#[derive(Tree, Clone, Copy, Debug)]
pub struct PagedKv<T = Tensor> {
    /// Key pages `[P, page, Hkv, D]`.
    pub k_pages: T,
    /// Value pages `[P, page, Hkv, Dv]`.
    pub v_pages: T,
    /// Key and value scales `[P, page, Hkv]` of quantized pages.
    pub scales: Option<(T, T)>,
}

impl PagedKv {
    /// Float pages.
    pub fn new(k_pages: Tensor, v_pages: Tensor) -> PagedKv {
        PagedKv {
            k_pages,
            v_pages,
            scales: None,
        }
    }

    /// Quantized pages with their scales.
    pub fn quantized(k_pages: Tensor, v_pages: Tensor, k_scales: Tensor, v_scales: Tensor) -> Self {
        PagedKv {
            k_pages,
            v_pages,
            scales: Some((k_scales, v_scales)),
        }
    }
}

impl PagedKv<HostTensor> {
    /// An empty cache of `num_pages` pages of `page_size` tokens,
    /// `kv_heads` heads of `head_dim` features, float pages of `dtype`
    /// (zeros; what is read is only what a step wrote).
    ///
    /// # Panics
    ///
    /// If the pages are beyond the size limits
    /// ([`TensorSpec::check_size`]), as [`HostTensor::zeros`].
    pub fn zeros(
        num_pages: usize,
        page_size: usize,
        kv_heads: usize,
        head_dim: usize,
        dtype: DType,
    ) -> Self {
        let spec = TensorSpec::new([num_pages, page_size, kv_heads, head_dim], dtype);
        PagedKv {
            k_pages: HostTensor::zeros(spec.clone()),
            v_pages: HostTensor::zeros(spec),
            scales: None,
        }
    }
}

/// The extents of a paged call, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PagedDims {
    pub(crate) b: usize,
    pub(crate) hq: usize,
    pub(crate) hkv: usize,
    pub(crate) g: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
    pub(crate) page: usize,
    /// Block-table width (pages per sequence at most).
    pub(crate) width: usize,
    /// The queries' dtype (and the output's).
    pub(crate) io: DType,
    /// The statistics' dtype.
    pub(crate) stat: DType,
}

/// The dtypes quantized pages may have.
fn is_quantized(dtype: DType) -> bool {
    matches!(dtype, DType::S8 | DType::F8E4M3FN | DType::F8E5M2)
}

fn spec(t: Tensor) -> String {
    t.spec().to_string()
}

/// What is wrong with the pages of `kv`, if anything (the operands to
/// name and the message): both `[num_pages, page_size, Hkv, D]` with the
/// same first three extents; float pages of dtype `io` (`whose` dtype, for
/// the message), or int8/fp8 pages of one dtype with f32 scales
/// `[num_pages, page_size, Hkv]`.
pub(crate) fn pages_problem(kv: &PagedKv, io: DType, whose: &str) -> Option<(Vec<Tensor>, String)> {
    let (kp, vp) = (kv.k_pages, kv.v_pages);
    let (ks, vs) = (kp.shape(), vp.shape());
    if ks.len() != 4 || vs.len() != 4 || ks[..3] != vs[..3] {
        return Some((
            vec![kp, vp],
            format!(
                "k_pages and v_pages must be [num_pages, page_size, Hkv, D] with the same first three \
                 extents, got {} and {}",
                spec(kp),
                spec(vp)
            ),
        ));
    }
    match kv.scales {
        None if kp.dtype() != io || vp.dtype() != io => Some((
            vec![kp, vp],
            format!(
                "float pages must have {whose} dtype {io}, got {} and {}; int8/fp8 pages take scales \
                 (the *_quantized kernels)",
                kp.dtype(),
                vp.dtype()
            ),
        )),
        None => None,
        Some(_) if !is_quantized(kp.dtype()) || vp.dtype() != kp.dtype() => Some((
            vec![kp, vp],
            format!(
                "quantized pages must be s8, f8e4m3fn or f8e5m2 (one dtype), got {} and {}",
                kp.dtype(),
                vp.dtype()
            ),
        )),
        Some((kscale, vscale)) => {
            let want = [ks[0], ks[1], ks[2]];
            [("k_scales", kscale), ("v_scales", vscale)]
                .into_iter()
                .find(|(_, s)| s.dtype() != F32 || s.shape() != want)
                .map(|(name, s)| {
                    (
                        vec![kp, s],
                        format!(
                            "{name} must be f32 {want:?} (one scale per token and head), got {}",
                            spec(s)
                        ),
                    )
                })
        }
    }
}

/// Checks the queries (rank 3, `[.., Hq, D]`, described by `q_form` in
/// the message) against the pages, the block tables `s32 [B, M]` and the
/// per-sequence lengths `s32 [B]` (named `lens_name`).
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_paged(
    op: &str,
    q: Tensor,
    q_form: &str,
    kv: &PagedKv,
    block_tables: Tensor,
    lens: Tensor,
    lens_name: &str,
    opts: &ServeOptions,
) -> Option<PagedDims> {
    if let Some(m) = opts.problem() {
        return fail(op, &[q], m);
    }
    let qs = q.shape();
    if qs.len() != 3 {
        return fail(op, &[q], format!("q must be {q_form}, got {}", q.spec()));
    }
    let (q_heads, q_dim) = (qs[1], qs[2]);
    let (kp, vp) = (kv.k_pages, kv.v_pages);
    let io = q.dtype();
    if !io.is_float() {
        return fail(
            op,
            &[q],
            format!("q must be a float tensor, got {}", spec(q)),
        );
    }
    if let Some((operands, m)) = pages_problem(kv, io, "the queries'") {
        return fail(op, &operands, m);
    }
    let (ks, vs) = (kp.shape(), vp.shape());
    let (num_pages, page, hkv, d) = (ks[0], ks[1], ks[2], ks[3]);
    if page == 0 || hkv == 0 {
        return fail(
            op,
            &[kp],
            format!(
                "pages need at least one token and one head, got {}",
                spec(kp)
            ),
        );
    }
    if q_dim != d {
        return fail(
            op,
            &[q, kp],
            format!("the head dimension of q ({q_dim}) and the pages ({d}) must match"),
        );
    }
    if !q_heads.is_multiple_of(hkv) {
        return fail(op, &[q, kp],
            format!(
                "the query heads ({q_heads}) must be a multiple of the pages' key/value heads ({hkv})"
            ),
        );
    }
    let bt = block_tables.shape();
    if block_tables.dtype() != S32 || bt.len() != 2 {
        return fail(
            op,
            &[block_tables],
            format!(
                "block_tables must be s32 [B, max_pages], got {}",
                spec(block_tables)
            ),
        );
    }
    let b = bt[0];
    if lens.dtype() != S32 || lens.shape() != [b] {
        return fail(
            op,
            &[block_tables, lens],
            format!(
                "{lens_name} must be s32 [{b}] (one per sequence), got {}",
                spec(lens)
            ),
        );
    }
    if num_pages == 0 {
        return fail(
            op,
            &[kp],
            "k_pages: the page pool is empty (num_pages is 0)".to_string(),
        );
    }
    Some(PagedDims {
        b,
        hq: q_heads,
        hkv,
        g: q_heads / hkv,
        d,
        dv: vs[3],
        page,
        width: bt[1],
        io,
        stat: if io == F64 { F64 } else { F32 },
    })
}

/// Reports `message` for `op` over `operands`.
#[track_caller]
pub(crate) fn fail<T>(op: &str, operands: &[Tensor], message: String) -> Option<T> {
    report::fail(op, operands, message);
    None
}
