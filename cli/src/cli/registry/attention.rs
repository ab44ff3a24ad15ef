//! Attention: flash attention, the whole-tensor reference and block-sparse
//! attention with a mask given as a small spec (`--opt mask=causal&local:128:0`).

use super::{bad, Entry, Opts};
use tessel::kernels::attention::{
    attention_reference, block_sparse_attention, flash_attention, flash_attention_lse, Attention,
    AttentionInputs, AttentionMask, FlashOptions,
};
use tessel::kernels::grads::{
    block_sparse_attention_vjp, flash_attention_lse_vjp, flash_attention_vjp,
};
use tessel::runtime::Device;
use tessel::tile::Mask;
use tessel::{HostTensor, Result, TensorSpec};

fn flash_opts(o: &Opts) -> Result<FlashOptions> {
    let mut f = FlashOptions::new().causal(o.bool("causal")?);
    let q = o.usize_opt("block_q")?.unwrap_or(f.block_q);
    let k = o.usize_opt("block_kv")?.unwrap_or(f.block_kv);
    if let Some((left, right)) = window(o.get("window"))? {
        f = f.window(left, right);
    }
    if let Some(cap) = o.f64_opt("soft_cap")? {
        f = f.soft_cap(cap);
    }
    if let Some(scale) = o.f64_opt("scale")? {
        f = f.sm_scale(scale);
    }
    if let Some(rate) = o.f64_opt("dropout")? {
        f = f.dropout(rate);
    }
    Ok(f.block_sizes(q, k))
}

/// The inputs of a call with dropout (option `dropout` other than 0, the
/// seed from option `seed`), or `None` without: the kernels that take
/// options alone have no seed input.
fn dropout_inputs(o: &Opts) -> Result<Option<AttentionInputs<'static>>> {
    match o.f64_opt("dropout")? {
        Some(rate) if rate != 0.0 => Ok(Some(AttentionInputs::new().dropout_seed(o.u32("seed")?))),
        _ => Ok(None),
    }
}

/// Runs `attention` with the seed when the options ask for dropout, and
/// `plain` (the kernel without a seed input) otherwise; `lse` keeps the
/// logsumexp as a second output.
fn run_forward(
    attention: Attention,
    d: &Device,
    a: &[&HostTensor],
    o: &Opts,
    lse: bool,
    plain: impl FnOnce(FlashOptions) -> Result<Vec<HostTensor>>,
) -> Result<Vec<HostTensor>> {
    let opts = flash_opts(o)?;
    let Some(inputs) = dropout_inputs(o)? else {
        return plain(opts);
    };
    let out = attention.run(d, a[0], a[1], a[2], &inputs, opts)?;
    Ok(if lse {
        vec![out.out, out.lse]
    } else {
        vec![out.out]
    })
}

/// [`run_forward`]'s lowering.
fn lower_forward(
    attention: Attention,
    s: &[TensorSpec],
    o: &Opts,
    plain: impl FnOnce(FlashOptions) -> Result<String>,
) -> Result<String> {
    let opts = flash_opts(o)?;
    match dropout_inputs(o)? {
        Some(inputs) => attention.lower(&s[0], &s[1], &s[2], &inputs, opts),
        None => plain(opts),
    }
}

/// Option `window`: `none`, or `LEFT:RIGHT` with each side a count of keys
/// or `none` (unbounded).
fn window(spec: &str) -> Result<Option<(Option<usize>, Option<usize>)>> {
    let parsed = match spec.split(':').collect::<Vec<_>>()[..] {
        ["" | "none"] => return Ok(None),
        [l, r] => side(l.trim()).zip(side(r.trim())),
        _ => None,
    };
    parsed.map(Some).ok_or_else(|| {
        bad(
            "window",
            format!("takes LEFT:RIGHT (each a count or none), got `{spec}`"),
        )
    })
}

/// One side of a window (the `window` option, a `local:LEFT:RIGHT` mask
/// term): a count of keys, or `none` (unbounded); `None` if neither.
fn side(s: &str) -> Option<Option<usize>> {
    match s {
        "none" | "" => Some(None),
        n => n.parse::<usize>().ok().map(Some),
    }
}

const ATTENTION_OPTIONS: &[(&str, &str, &str)] = &[
    ("causal", "false", "mask keys after each query"),
    (
        "block_q",
        "none",
        "query block size (flash; default the library's)",
    ),
    (
        "block_kv",
        "none",
        "key/value block size (flash; default the library's)",
    ),
    (
        "window",
        "none",
        "sliding window LEFT:RIGHT: keys at most LEFT before and RIGHT after each query (each a count or none)",
    ),
    ("soft_cap", "none", "soft-cap the logits: cap · tanh(logit / cap)"),
    ("scale", "none", "the logit scale (default 1 / sqrt(head_dim))"),
];

/// The dropout options of the forward kernels.
const DROPOUT: (&str, &str, &str) = (
    "dropout",
    "0",
    "dropout rate on the attention probabilities, in [0, 1) (the mask a function of the seed and each element's position)",
);
const SEED: (&str, &str, &str) = (
    "seed",
    "0",
    "the dropout seed (u32), an input of the program",
);

/// [`ATTENTION_OPTIONS`] and dropout.
const FORWARD_OPTIONS: &[(&str, &str, &str)] = &[
    ATTENTION_OPTIONS[0],
    ATTENTION_OPTIONS[1],
    ATTENTION_OPTIONS[2],
    ATTENTION_OPTIONS[3],
    ATTENTION_OPTIONS[4],
    ATTENTION_OPTIONS[5],
    DROPOUT,
    SEED,
];

/// [`ATTENTION_OPTIONS`] and the mask.
const BLOCK_SPARSE_OPTIONS: &[(&str, &str, &str)] = &[
    ATTENTION_OPTIONS[0],
    ATTENTION_OPTIONS[1],
    ATTENTION_OPTIONS[2],
    ATTENTION_OPTIONS[3],
    ATTENTION_OPTIONS[4],
    ATTENTION_OPTIONS[5],
    (
        "mask",
        "full",
        "full, causal, causal:OFFSET, local:LEFT:RIGHT (LEFT/RIGHT a count or none), chunked:CHUNK; join with & (and) or | (or), & binding tighter; quote it in a shell",
    ),
];

/// [`BLOCK_SPARSE_OPTIONS`] and dropout.
const BLOCK_SPARSE_FORWARD_OPTIONS: &[(&str, &str, &str)] = &[
    BLOCK_SPARSE_OPTIONS[0],
    BLOCK_SPARSE_OPTIONS[1],
    BLOCK_SPARSE_OPTIONS[2],
    BLOCK_SPARSE_OPTIONS[3],
    BLOCK_SPARSE_OPTIONS[4],
    BLOCK_SPARSE_OPTIONS[5],
    BLOCK_SPARSE_OPTIONS[6],
    DROPOUT,
    SEED,
];

/// The accepted mask forms, for the error message.
const MASK_FORMS: &str = "full, causal, causal:OFFSET, local:LEFT:RIGHT (each a count or none), chunked:CHUNK, joined with & (and) or | (or), e.g. causal&local:128:0";

/// One mask term (`causal`, `local:4:0`, ...) for a `q_len × kv_len` matrix.
fn mask_term(term: &str, q_len: usize, kv_len: usize) -> Option<Mask> {
    let parts: Vec<&str> = term.trim().split(':').collect();
    match parts[..] {
        ["full"] => Some(Mask::full(q_len, kv_len)),
        ["causal"] => Some(Mask::causal(q_len, kv_len)),
        ["causal", off] => Some(Mask::causal_offset(q_len, kv_len, off.parse().ok()?)),
        ["local", l, r] => Some(Mask::local(q_len, kv_len, side(l)?, side(r)?)),
        ["chunked", c] => Mask::chunked_causal(q_len, kv_len, c.parse().ok()?).ok(),
        _ => None,
    }
}

/// Parses the mask spec `spec` for a `q_len × kv_len` matrix: terms joined
/// with `&` (and), and those groups joined with `|` (or).
fn parse_mask(spec: &str, q_len: usize, kv_len: usize) -> Result<Mask> {
    let fail = |why: String| bad("mask", format!("{why}; accepted: {MASK_FORMS}"));
    let join = |a: Option<Mask>, b: Mask, and: bool| -> Result<Mask> {
        match a {
            None => Ok(b),
            Some(a) if and => a.and(&b),
            Some(a) => a.or(&b),
        }
    };
    let mut any: Option<Mask> = None;
    for group in spec.split('|') {
        let mut all: Option<Mask> = None;
        for term in group.split('&') {
            let m = mask_term(term, q_len, kv_len)
                .ok_or_else(|| fail(format!("bad term `{}` in `{spec}`", term.trim())))?;
            all = Some(join(all, m, true)?);
        }
        any = Some(join(any, all.expect("split yields one group"), false)?);
    }
    any.ok_or_else(|| fail(format!("empty spec `{spec}`")))
}

/// The sequence length of `[B, H, S, D]` (0 for a lower rank: the kernel
/// then reports the shape).
fn seq_len(shape: &[usize]) -> usize {
    shape
        .len()
        .checked_sub(2)
        .map(|i| shape[i])
        .unwrap_or_default()
}

/// The mask of option `mask`, shaped by the query and key lengths.
fn attention_mask(o: &Opts, q: &[usize], k: &[usize]) -> Result<AttentionMask> {
    Ok(parse_mask(o.get("mask"), seq_len(q), seq_len(k))?.into())
}

/// The attention kernels.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: "flash_attention",
            about: "flash attention: q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D] (GQA when Hq is a multiple of Hkv)",
            args: &["q", "k", "v"],
            options: FORWARD_OPTIONS,
            run: |d, a, o| {
                run_forward(Attention::Flash, d, a, o, false, |f| {
                    Ok(vec![flash_attention::run(d, a[0], a[1], a[2], f)?])
                })
            },
            lower: |s, o| {
                lower_forward(Attention::Flash, s, o, |f| {
                    flash_attention::lower(&s[0], &s[1], &s[2], f)
                })
            },
        },
        Entry {
            name: "flash_attention_lse",
            about: "flash attention that also returns the f32 logsumexp of each query row (outputs: out, lse [B, Hq, Sq])",
            args: &["q", "k", "v"],
            options: FORWARD_OPTIONS,
            run: |d, a, o| {
                run_forward(Attention::Flash, d, a, o, true, |f| {
                    let (out, lse) = flash_attention_lse::run(d, a[0], a[1], a[2], f)?;
                    Ok(vec![out, lse])
                })
            },
            lower: |s, o| {
                lower_forward(Attention::Flash, s, o, |f| {
                    flash_attention_lse::lower(&s[0], &s[1], &s[2], f)
                })
            },
        },
        Entry {
            name: "attention_reference",
            about: "whole-tensor softmax(QKᵀ·scale)·V, the reference for flash attention",
            args: &["q", "k", "v"],
            options: FORWARD_OPTIONS,
            run: |d, a, o| {
                run_forward(Attention::Reference, d, a, o, false, |f| {
                    Ok(vec![attention_reference::run(d, a[0], a[1], a[2], f)?])
                })
            },
            lower: |s, o| {
                lower_forward(Attention::Reference, s, o, |f| {
                    attention_reference::lower(&s[0], &s[1], &s[2], f)
                })
            },
        },
        Entry {
            name: "block_sparse_attention",
            about: "splash-style attention: the blocks the mask leaves empty are skipped; q/k/v as flash_attention, the mask Sq x Skv",
            args: &["q", "k", "v"],
            options: BLOCK_SPARSE_FORWARD_OPTIONS,
            run: |d, a, o| {
                let mask = attention_mask(o, a[0].shape(), a[1].shape())?;
                run_forward(Attention::BlockSparse(mask.clone()), d, a, o, false, |f| {
                    Ok(vec![block_sparse_attention::run(d, a[0], a[1], a[2], mask, f)?])
                })
            },
            lower: |s, o| {
                let mask = attention_mask(o, &s[0].shape, &s[1].shape)?;
                lower_forward(Attention::BlockSparse(mask.clone()), s, o, |f| {
                    block_sparse_attention::lower(&s[0], &s[1], &s[2], mask, f)
                })
            },
        },
        Entry {
            name: "flash_attention_vjp",
            about: "cotangents (dq, dk, dv) of flash_attention for dout (the FlashAttention-2 backward)",
            args: &["q", "k", "v", "dout"],
            options: ATTENTION_OPTIONS,
            run: |d, a, o| {
                let (q, k, v) = flash_attention_vjp::run(d, a[0], a[1], a[2], a[3], flash_opts(o)?)?;
                Ok(vec![q, k, v])
            },
            lower: |s, o| flash_attention_vjp::lower(&s[0], &s[1], &s[2], &s[3], flash_opts(o)?),
        },
        Entry {
            name: "flash_attention_lse_vjp",
            about: "cotangents (dq, dk, dv) of flash_attention_lse for dout and dlse [B, Hq, Sq] (f32)",
            args: &["q", "k", "v", "dout", "dlse"],
            options: ATTENTION_OPTIONS,
            run: |d, a, o| {
                let (q, k, v) =
                    flash_attention_lse_vjp::run(d, a[0], a[1], a[2], a[3], a[4], flash_opts(o)?)?;
                Ok(vec![q, k, v])
            },
            lower: |s, o| {
                flash_attention_lse_vjp::lower(&s[0], &s[1], &s[2], &s[3], &s[4], flash_opts(o)?)
            },
        },
        Entry {
            name: "block_sparse_attention_vjp",
            about: "cotangents (dq, dk, dv) of block_sparse_attention for dout, over the blocks the mask keeps",
            args: &["q", "k", "v", "dout"],
            options: BLOCK_SPARSE_OPTIONS,
            run: |d, a, o| {
                let mask = attention_mask(o, a[0].shape(), a[1].shape())?;
                let (q, k, v) =
                    block_sparse_attention_vjp::run(d, a[0], a[1], a[2], a[3], mask, flash_opts(o)?)?;
                Ok(vec![q, k, v])
            },
            lower: |s, o| {
                let mask = attention_mask(o, &s[0].shape, &s[1].shape)?;
                block_sparse_attention_vjp::lower(&s[0], &s[1], &s[2], &s[3], mask, flash_opts(o)?)
            },
        },
    ]
}
