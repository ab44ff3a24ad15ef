//! Serving: attention over paged and contiguous KV caches, and the cache
//! updates, with traced lengths (`s32` tensors as arguments).

use super::{bad, Entry, Opts};
use tessel::kernels::serving::{
    decode_attention, kv_cache_update, kv_cache_update_quantized, paged_attention,
    paged_attention_quantized, ragged_paged_attention, ragged_paged_attention_quantized,
    ServeOptions,
};
use tessel::{DType, Result};

const SERVE_OPTIONS: &[(&str, &str, &str)] = &[
    (
        "window",
        "none",
        "sliding window: keys at most this many positions before the query",
    ),
    ("soft_cap", "none", "logit soft-cap cap·tanh(s/cap)"),
    (
        "pages_per_block",
        "none",
        "pages gathered per step (default: about 512 keys, AUTO_PAGED_KEYS)",
    ),
    ("block_q", "none", "query rows per tile (ragged)"),
    ("block_kv", "none", "keys per step (contiguous cache)"),
    (
        "max_logits_bytes",
        "none",
        "largest logits buffer of a two-pass decode chunk (default 1 MiB; 0: online softmax)",
    ),
];

const KV_DTYPE: (&str, &str, &str) = (
    "kv_dtype",
    "int8",
    "the pages' dtype: int8 (s8) or fp8 (f8e4m3fn); checked against k_pages",
);

/// [`SERVE_OPTIONS`] but `block_kv` (no contiguous cache), and `kv_dtype`.
const QUANTIZED_OPTIONS: &[(&str, &str, &str)] = &[
    SERVE_OPTIONS[0],
    SERVE_OPTIONS[1],
    SERVE_OPTIONS[2],
    SERVE_OPTIONS[3],
    SERVE_OPTIONS[5],
    KV_DTYPE,
];

fn serve_opts(o: &Opts) -> Result<ServeOptions> {
    let mut s = ServeOptions::new();
    if let Some(w) = o.usize_opt("window")? {
        s = s.window(w);
    }
    match o.get("soft_cap") {
        "" | "none" => {}
        v => {
            let cap: f64 = v
                .parse()
                .map_err(|_| bad("soft_cap", format!("takes a number or none, got `{v}`")))?;
            s = s.soft_cap(cap);
        }
    }
    if let Some(p) = o.usize_opt("pages_per_block")? {
        s = s.pages_per_block(p);
    }
    if let Some(q) = o.usize_opt("block_q")? {
        s = s.block_q(q);
    }
    if let Some(k) = o.usize_opt("block_kv")? {
        s = s.block_kv(k);
    }
    if let Some(b) = o.usize_opt("max_logits_bytes")? {
        s = s.max_logits_bytes(b);
    }
    Ok(s)
}

/// Checks that `pages` (the dtype of `k_pages`) is the one `kv_dtype` names.
fn check_kv_dtype(o: &Opts, pages: DType) -> Result<()> {
    let want = match o.get("kv_dtype") {
        "int8" | "s8" => DType::S8,
        "fp8" | "f8e4m3fn" => DType::F8E4M3FN,
        v => return Err(bad("kv_dtype", format!("takes int8 or fp8, got `{v}`"))),
    };
    if pages != want {
        return Err(bad(
            "kv_dtype",
            format!(
                "is {want} but k_pages holds {pages}; pass pages of that dtype or change kv_dtype"
            ),
        ));
    }
    Ok(())
}

/// The serving kernels.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: "decode_attention",
            about: "newest token(s) q [B, Hq, Sq, D] against a contiguous cache [B, Hkv, S_max, D], the first at positions s32 [B]",
            args: &["q", "k_cache", "v_cache", "positions"],
            options: SERVE_OPTIONS,
            run: |d, a, o| {
                Ok(vec![decode_attention::run(d, a[0], a[1], a[2], a[3], serve_opts(o)?)?])
            },
            lower: |s, o| decode_attention::lower(&s[0], &s[1], &s[2], &s[3], serve_opts(o)?),
        },
        Entry {
            name: "paged_attention",
            about: "one query per sequence q [B, Hq, D] against pages [P, page, Hkv, D] via block_tables s32 [B, M] and lengths s32 [B]",
            args: &["q", "k_pages", "v_pages", "block_tables", "lengths"],
            options: SERVE_OPTIONS,
            run: |d, a, o| {
                let out = paged_attention::run(d, a[0], a[1], a[2], a[3], a[4], serve_opts(o)?)?;
                Ok(vec![out])
            },
            lower: |s, o| paged_attention::lower(&s[0], &s[1], &s[2], &s[3], &s[4], serve_opts(o)?),
        },
        Entry {
            name: "paged_attention_quantized",
            about: "paged_attention over int8/fp8 pages with f32 scales [P, page, Hkv]",
            args: &["q", "k_pages", "v_pages", "k_scales", "v_scales", "block_tables", "lengths"],
            options: QUANTIZED_OPTIONS,
            run: |d, a, o| {
                check_kv_dtype(o, a[1].spec().dtype)?;
                let out = paged_attention_quantized::run(
                    d, a[0], a[1], a[2], a[3], a[4], a[5], a[6], serve_opts(o)?,
                )?;
                Ok(vec![out])
            },
            lower: |s, o| {
                check_kv_dtype(o, s[1].dtype)?;
                paged_attention_quantized::lower(
                    &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], serve_opts(o)?,
                )
            },
        },
        Entry {
            name: "ragged_paged_attention",
            about: "packed queries q [T, Hq, D] of prefill and decode sequences (rows cu_q_lens[b]..cu_q_lens[b+1], s32 [B+1]) against pages, kv_lens s32 [B]",
            args: &["q", "k_pages", "v_pages", "block_tables", "kv_lens", "cu_q_lens"],
            options: SERVE_OPTIONS,
            run: |d, a, o| {
                let out = ragged_paged_attention::run(
                    d, a[0], a[1], a[2], a[3], a[4], a[5], serve_opts(o)?,
                )?;
                Ok(vec![out])
            },
            lower: |s, o| {
                ragged_paged_attention::lower(&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], serve_opts(o)?)
            },
        },
        Entry {
            name: "ragged_paged_attention_quantized",
            about: "ragged_paged_attention over int8/fp8 pages with f32 scales [P, page, Hkv]",
            args: &[
                "q", "k_pages", "v_pages", "k_scales", "v_scales", "block_tables", "kv_lens", "cu_q_lens",
            ],
            options: QUANTIZED_OPTIONS,
            run: |d, a, o| {
                check_kv_dtype(o, a[1].spec().dtype)?;
                let out = ragged_paged_attention_quantized::run(
                    d, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], serve_opts(o)?,
                )?;
                Ok(vec![out])
            },
            lower: |s, o| {
                check_kv_dtype(o, s[1].dtype)?;
                ragged_paged_attention_quantized::lower(
                    &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], serve_opts(o)?,
                )
            },
        },
        Entry {
            name: "kv_cache_update",
            about: "writes new k/v [T, Hkv, D] (packed as ragged_paged_attention's queries) into their pages' slots (outputs: k_pages, v_pages)",
            args: &["k_pages", "v_pages", "k", "v", "block_tables", "kv_lens", "cu_q_lens"],
            options: &[],
            run: |d, a, _| {
                let (k, v) = kv_cache_update::run(d, a[0], a[1], a[2], a[3], a[4], a[5], a[6])?;
                Ok(vec![k, v])
            },
            lower: |s, _| kv_cache_update::lower(&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6]),
        },
        Entry {
            name: "kv_cache_update_quantized",
            about: "kv_cache_update into int8/fp8 pages, quantizing per token and head (outputs: k_pages, v_pages, k_scales, v_scales)",
            args: &[
                "k_pages", "v_pages", "k_scales", "v_scales", "k", "v", "block_tables", "kv_lens", "cu_q_lens",
            ],
            options: &[KV_DTYPE],
            run: |d, a, o| {
                check_kv_dtype(o, a[0].spec().dtype)?;
                let (k, v, ks, vs) = kv_cache_update_quantized::run(
                    d, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                )?;
                Ok(vec![k, v, ks, vs])
            },
            lower: |s, o| {
                check_kv_dtype(o, s[0].dtype)?;
                kv_cache_update_quantized::lower(
                    &s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], &s[8],
                )
            },
        },
    ]
}
