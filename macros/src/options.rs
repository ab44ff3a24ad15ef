//! The kernel attributes' options: parsed with darling, then validated with
//! messages that name the bad option and list the allowed ones.

use darling::ast::NestedMeta;
use darling::util::{PathList, SpannedValue};
use darling::{Error, FromMeta};
use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;

use crate::analyze::KernelSig;

/// Which attribute was used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Tpu,
    Gpu,
    Cpu,
    /// `sparse_kernel`: platform chosen by its `platform` option (default cpu).
    Sparse,
}

/// The option names `sparse_kernel` accepts beyond the common ones.
pub const SPARSE_OPTION_NAMES: &[&str] = &["platform"];
const PLATFORMS: &[&str] = &["tpu", "gpu", "cpu"];

/// The option names every platform attribute accepts.
pub const OPTION_NAMES: &[&str] = &[
    "precision",
    "block_size",
    "dtype",
    "use_bfloat16",
    "accumulate",
    "auto_pad",
    "donate",
    "name",
];

const PRECISIONS: &[&str] = &["default", "high", "highest"];
const DTYPES: &[&str] = &[
    "bf16", "f16", "f32", "f64", "f8e4m3fn", "f8e5m2", "s8", "s32", "s64", "u8", "u32", "pred",
];

#[derive(Debug, Default, FromMeta)]
struct RawOptions {
    precision: Option<SpannedValue<String>>,
    block_size: Option<SpannedValue<syn::LitInt>>,
    dtype: Option<SpannedValue<String>>,
    use_bfloat16: Option<SpannedValue<bool>>,
    accumulate: Option<bool>,
    auto_pad: Option<bool>,
    donate: Option<PathList>,
    name: Option<String>,
    platform: Option<SpannedValue<String>>,
}

/// Validated options.
pub struct Options {
    pub platform: Platform,
    pub precision: Option<String>,
    pub block_size: Option<u64>,
    pub dtype: Option<String>,
    pub accumulate: Option<bool>,
    pub auto_pad: Option<bool>,
    pub donate: Vec<syn::Ident>,
    pub name: Option<String>,
}

/// The closest allowed word to `word`, if it is close.
pub fn did_you_mean<'a>(word: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(word, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn one_of(kind: &str, got: &str, allowed: &[&str], span: Span) -> Error {
    let list = allowed
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let hint = did_you_mean(got, allowed)
        .map(|s| format!("did you mean \"{s}\"? "))
        .unwrap_or_default();
    Error::custom(format!(
        "unknown {kind} \"{got}\"; {hint}expected one of {list}"
    ))
    .with_span(&span)
}

/// Parses and validates the attribute's arguments.
pub fn parse(platform: Platform, attr: TokenStream) -> darling::Result<Options> {
    let items = NestedMeta::parse_meta_list(attr)?;
    let mut errors = Error::accumulator();
    let mut known = Vec::new();
    for item in items {
        let path = match &item {
            NestedMeta::Meta(m) => m.path().clone(),
            NestedMeta::Lit(l) => {
                errors.push(
                    Error::custom("expected `option = value`; options are written by name, e.g. `precision = \"high\"`")
                        .with_span(&l.span()),
                );
                continue;
            }
        };
        let key = path.get_ident().map(|i| i.to_string()).unwrap_or_default();
        let mut allowed: Vec<&str> = OPTION_NAMES.to_vec();
        if platform == Platform::Sparse {
            allowed.extend_from_slice(SPARSE_OPTION_NAMES);
        }
        if allowed.contains(&key.as_str()) {
            match check_form(&key, &item) {
                Ok(()) => known.push(item),
                Err(e) => errors.push(e),
            }
        } else {
            let hint = if key == "platform" {
                "the attribute sets the platform (`tpu_kernel`, `gpu_kernel`, `cpu_kernel`; `platform` is an option of \
                 `sparse_kernel`); "
                    .to_string()
            } else {
                did_you_mean(&key, &allowed)
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default()
            };
            errors.push(
                Error::custom(format!(
                    "unknown option `{}`; {hint}expected one of: {}",
                    if key.is_empty() {
                        quote::quote!(#path).to_string()
                    } else {
                        key
                    },
                    allowed.join(", ")
                ))
                .with_span(&path.span()),
            );
        }
    }
    let raw = errors
        .handle(RawOptions::from_list(&known))
        .unwrap_or_default();
    let precision = raw.precision.as_ref().and_then(|p| {
        let v = p.as_str();
        if PRECISIONS.contains(&v) {
            Some(v.to_string())
        } else {
            errors.push(one_of("precision", v, PRECISIONS, p.span()));
            None
        }
    });
    let block_size = raw
        .block_size
        .as_ref()
        .and_then(|b| match b.base10_parse::<u64>() {
            Ok(0) => {
                errors.push(Error::custom("block_size must be at least 1").with_span(&b.span()));
                None
            }
            Ok(n) if n % 8 != 0 => {
                errors.push(
                    Error::custom(format!(
                        "block_size = {n} is not a multiple of 8: tiles are made of 8-row sublanes, and on TPU a \
                         block's last two dimensions must be divisible by 8 and 128 respectively (or equal the \
                         array's full extent)"
                    ))
                    .with_span(&b.span()),
                );
                None
            }
            Ok(n) => Some(n),
            Err(e) => {
                errors.push(
                    Error::custom(format!("block_size must be a positive integer: {e}"))
                        .with_span(&b.span()),
                );
                None
            }
        });
    let mut dtype = raw.dtype.as_ref().and_then(|d| {
        let v = d.to_ascii_lowercase();
        if DTYPES.contains(&v.as_str()) {
            Some(v)
        } else {
            errors.push(one_of("dtype", d.as_str(), DTYPES, d.span()));
            None
        }
    });
    if let Some(b) = &raw.use_bfloat16 {
        if raw.dtype.is_some() {
            errors.push(
                Error::custom(
                    "give either `dtype` or `use_bfloat16`, not both: `use_bfloat16 = true` means `dtype = \"bf16\"`",
                )
                .with_span(&b.span()),
            );
        } else if **b {
            dtype = Some("bf16".into());
        } else {
            dtype = Some("f32".into());
        }
    }
    let donate = raw
        .donate
        .as_ref()
        .map(|l| {
            l.iter()
                .filter_map(|p| match p.get_ident() {
                    Some(i) => Some(i.clone()),
                    None => {
                        errors.push(
                            Error::custom("donate takes parameter names").with_span(&p.span()),
                        );
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let sparse = platform == Platform::Sparse;
    let platform = match (platform, raw.platform.as_ref()) {
        (Platform::Sparse, Some(p)) => match p.as_str() {
            "tpu" => Platform::Tpu,
            "gpu" => Platform::Gpu,
            "cpu" => Platform::Cpu,
            other => {
                errors.push(one_of("platform", other, PLATFORMS, p.span()));
                Platform::Cpu
            }
        },
        (Platform::Sparse, None) => Platform::Cpu,
        (p, _) => p,
    };
    if sparse && raw.block_size.is_none() {
        errors.push(Error::custom(
            "sparse_kernel needs a block size: `#[sparse_kernel(block_size = 128)]`",
        ));
    }
    errors.finish_with(Options {
        platform,
        precision,
        block_size,
        dtype,
        accumulate: raw.accumulate,
        auto_pad: raw.auto_pad,
        donate,
        name: raw.name,
    })
}

/// What each option's value looks like, for messages.
fn expected_form(key: &str) -> &'static str {
    match key {
        "precision" => "a string: `precision = \"high\"` (\"default\", \"high\" or \"highest\")",
        "block_size" => "an integer literal: `block_size = 128`",
        "dtype" => "a string: `dtype = \"bf16\"`",
        "use_bfloat16" => "a bool: `use_bfloat16 = true`",
        "accumulate" => "a bool: `accumulate = true`",
        "auto_pad" => "a bool: `auto_pad = false`",
        "donate" => "a list of parameter names: `donate(x, y)`",
        "platform" => "a string: `platform = \"tpu\"` (\"tpu\", \"gpu\" or \"cpu\")",
        _ => "a string: `name = \"my_kernel\"`",
    }
}

/// Checks an option's shape (`key = literal` of the right kind, or
/// `donate(..)`) before darling parses it, for a message that shows the form.
fn check_form(key: &str, item: &NestedMeta) -> darling::Result<()> {
    let bad = |span: Span| {
        Err(Error::custom(format!("option `{key}` takes {}", expected_form(key))).with_span(&span))
    };
    let NestedMeta::Meta(meta) = item else {
        return Ok(());
    };
    match (key, meta) {
        ("donate", syn::Meta::List(_)) => Ok(()),
        ("donate", m) => bad(m.span()),
        (_, syn::Meta::NameValue(nv)) => {
            let ok = match &nv.value {
                syn::Expr::Lit(l) => matches!(
                    (key, &l.lit),
                    ("block_size", syn::Lit::Int(_))
                        | (
                            "precision" | "dtype" | "name" | "platform",
                            syn::Lit::Str(_)
                        )
                        | (
                            "use_bfloat16" | "accumulate" | "auto_pad",
                            syn::Lit::Bool(_)
                        )
                ),
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                bad(nv.value.span())
            }
        }
        (_, m) => bad(m.span()),
    }
}

/// Checks that every donated name is a parameter of the kernel.
pub fn check_donate(opts: &Options, sig: &KernelSig) -> darling::Result<()> {
    let mut errors = Error::accumulator();
    let names: Vec<String> = sig.params.iter().map(|p| p.ident.to_string()).collect();
    let allowed: Vec<&str> = names.iter().map(String::as_str).collect();
    for d in &opts.donate {
        let s = d.to_string();
        if !names.contains(&s) {
            let hint = did_you_mean(&s, &allowed)
                .map(|h| format!("did you mean `{h}`? "))
                .unwrap_or_default();
            errors.push(
                Error::custom(format!(
                    "`{s}` is not a parameter of this kernel; {hint}parameters: {}",
                    names.join(", ")
                ))
                .with_span(d),
            );
        }
    }
    errors.finish()
}
