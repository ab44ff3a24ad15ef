//! The kernel attributes' options: read into darling structs of typed
//! values (`values`), then validated into [`Options`].
//!
//! Reading never gives up on the first mistake: an option that fails is
//! reported and left at its default, so the companion can still be
//! generated and one typo gives one error.

mod values;

use darling::ast::NestedMeta;
use darling::error::Accumulator;
use darling::util::{path_to_string, SpannedValue};
use darling::{Error, FromMeta};
use proc_macro2::TokenStream;

use crate::analyze::KernelSig;
use crate::suggest::did_you_mean;

pub use values::{
    Accumulate, AutoPad, Autotune, BlockSize, CapacityFactor, CheckArgs, Checks, DType, Donate,
    Interpret, KernelName, NumExperts, PerExpert, Platform, Precision, Renormalize, TopK,
    UseBfloat16,
};

/// One option as read: its typed value with the span of what was written,
/// or the error that reading it gave.
pub type Parsed<T> = darling::Result<SpannedValue<T>>;

/// Declares a darling options struct and its `names()` from one field
/// list, so the options read and the options listed in messages agree.
/// A `#[darling(flatten)]` field (first, if any) receives the options this
/// struct does not name; its struct's names are listed after these.
macro_rules! option_struct {
    (
        $(#[doc = $doc:literal])*
        $vis:vis struct $name:ident {
            $( #[darling(flatten)] $flat:ident: $flat_ty:ty, )?
            $( $(#[doc = $fdoc:literal])* $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Default, ::darling::FromMeta)]
        $vis struct $name {
            $( #[darling(flatten)] $flat: $flat_ty, )?
            $( $(#[doc = $fdoc])* $field: $ty, )*
        }

        impl $name {
            /// The option names this struct reads.
            $vis fn names() -> Vec<&'static str> {
                #[allow(unused_mut)]
                let mut names = vec![$(stringify!($field)),*];
                $( names.extend(<$flat_ty>::names()); )?
                names
            }
        }
    };
}
pub(crate) use option_struct;

option_struct! {
    /// The options every kernel attribute, and `expert_kernel`, takes.
    pub struct SharedRaw {
        /// `precision = "high"`.
        precision: Option<Parsed<Precision>>,
        /// `name = "my_kernel"`.
        name: Option<Parsed<KernelName>>,
    }
}

option_struct! {
    /// The options of `tpu_kernel`, `gpu_kernel` and `cpu_kernel`.
    struct KernelRaw {
        #[darling(flatten)]
        shared: SharedRaw,
        /// `block_size = 128`.
        block_size: Option<Parsed<BlockSize>>,
        /// `dtype = "bf16"`.
        dtype: Option<Parsed<DType>>,
        /// `use_bfloat16 = true`.
        use_bfloat16: Option<Parsed<UseBfloat16>>,
        /// `accumulate = true`.
        accumulate: Option<Parsed<Accumulate>>,
        /// `auto_pad = false`.
        auto_pad: Option<Parsed<AutoPad>>,
        /// `donate(x, y)`.
        donate: Option<Parsed<Donate>>,
        /// `interpret = true`.
        interpret: Option<Parsed<Interpret>>,
        /// `autotune = true`.
        autotune: Option<Parsed<Autotune>>,
        /// `check_args = check_inputs`.
        check_args: Option<Parsed<CheckArgs>>,
        /// `checks = "index, nan"`.
        checks: Option<Parsed<Checks>>,
    }
}

option_struct! {
    /// The options of `sparse_kernel`: a kernel's, and its platform.
    struct SparseRaw {
        #[darling(flatten)]
        kernel: KernelRaw,
        /// `platform = "tpu"`.
        platform: Option<Parsed<Platform>>,
    }
}

/// Which kernel attribute was used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attribute {
    /// `#[tpu_kernel]`.
    Tpu,
    /// `#[gpu_kernel]`.
    Gpu,
    /// `#[cpu_kernel]`.
    Cpu,
    /// `#[sparse_kernel]`: the platform is its `platform` option (default cpu).
    Sparse,
}

impl Attribute {
    /// The platform the attribute implies before its options are read.
    fn platform(self) -> Platform {
        match self {
            Attribute::Tpu => Platform::Tpu,
            Attribute::Gpu => Platform::Gpu,
            Attribute::Cpu | Attribute::Sparse => Platform::Cpu,
        }
    }
}

/// Validated options; `None` (or empty) leaves the platform's default.
pub struct Options {
    /// The platform whose defaults the kernel takes.
    pub platform: Platform,
    /// The matmul precision.
    pub precision: Option<Precision>,
    /// The tile size: at least 1, a multiple of 8.
    pub block_size: Option<u64>,
    /// The matmul input type (`use_bfloat16` is folded in here).
    pub dtype: Option<DType>,
    /// Whether matmuls accumulate in f32.
    pub accumulate: Option<bool>,
    /// Whether inputs are padded to whole tiles.
    pub auto_pad: Option<bool>,
    /// The parameters whose buffers the kernel may reuse.
    pub donate: Vec<syn::Ident>,
    /// The kernel's name in compiled programs.
    pub name: Option<String>,
    /// Whether the kernel runs on the interpreter whatever the device.
    pub interpret: Option<bool>,
    /// Whether block sizes are chosen by measurement on first use.
    pub autotune: Option<bool>,
    /// The function that checks host arguments before they are run.
    pub check_args: Option<syn::Path>,
    /// The automatic check families (index, nan, div).
    pub checks: Option<CheckFamilies>,
}

/// The check families `checks = ".."` turns on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckFamilies {
    /// Index checks.
    pub index: bool,
    /// NaN checks.
    pub nan: bool,
    /// Division checks.
    pub div: bool,
}

/// The families named in `list` (comma-separated), or the first unknown
/// name.
fn check_families(list: &str) -> Result<CheckFamilies, String> {
    let mut f = CheckFamilies::default();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "index" => f.index = true,
            "nan" => f.nan = true,
            "div" => f.div = true,
            "all" => {
                f = CheckFamilies {
                    index: true,
                    nan: true,
                    div: true,
                }
            }
            other => return Err(other.to_string()),
        }
    }
    Ok(f)
}

impl Options {
    /// The platform's defaults: no option given.
    pub fn defaults(platform: Platform) -> Self {
        Options {
            platform,
            precision: None,
            block_size: None,
            dtype: None,
            accumulate: None,
            auto_pad: None,
            donate: Vec::new(),
            name: None,
            interpret: None,
            autotune: None,
            check_args: None,
            checks: None,
        }
    }
}

/// What an attribute accepts, for checking the names of its items.
pub struct Accepted<'a> {
    /// The option names, in the order messages list them.
    pub names: &'a [&'static str],
    /// One option written out, for the message on a bare literal.
    pub example: &'a str,
    /// Explains some unknown names better than a did-you-mean would.
    pub hint: fn(&str) -> Option<&'static str>,
}

/// Reads the attribute's arguments into `R`: items that are not
/// `name = value` (or `name(..)`) with a name in `accepted`, or that repeat
/// a name, are reported and skipped; so is every option that fails to read.
pub fn read<R: FromMeta + Default>(
    attr: TokenStream,
    accepted: &Accepted<'_>,
    errors: &mut Accumulator,
) -> R {
    let Some(items) = errors.handle(NestedMeta::parse_meta_list(attr).map_err(Error::from)) else {
        return R::default();
    };
    let mut seen: Vec<String> = Vec::new();
    let mut known = Vec::new();
    for item in items {
        let meta = match &item {
            NestedMeta::Meta(m) => m,
            NestedMeta::Lit(l) => {
                errors.push(
                    Error::custom(format!(
                        "expected `option = value`; options are written by name, e.g. `{}`",
                        accepted.example
                    ))
                    .with_span(l),
                );
                continue;
            }
        };
        let path = meta.path();
        let key = path_to_string(path);
        if !accepted.names.contains(&key.as_str()) {
            let hint = match (accepted.hint)(&key) {
                Some(h) => format!("{h}; "),
                None => did_you_mean(&key, accepted.names)
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default(),
            };
            errors.push(
                Error::custom(format!(
                    "unknown option `{key}`; {hint}expected one of: {}",
                    accepted.names.join(", ")
                ))
                .with_span(path),
            );
        } else if seen.contains(&key) {
            errors.push(Error::custom(format!("option `{key}` is given twice")).with_span(path));
        } else {
            seen.push(key);
            known.push(item);
        }
    }
    errors.handle(R::from_list(&known)).unwrap_or_default()
}

/// The option's value if it was given and read; a read error is reported.
pub fn take<T>(option: Option<Parsed<T>>, errors: &mut Accumulator) -> Option<SpannedValue<T>> {
    option.and_then(|parsed| errors.handle(parsed))
}

/// Why a kernel attribute has no `platform` option.
fn platform_hint(key: &str) -> Option<&'static str> {
    (key == "platform").then_some(
        "the attribute sets the platform (`tpu_kernel`, `gpu_kernel`, `cpu_kernel`; `platform` is an option \
         of `sparse_kernel`)",
    )
}

/// Reads and validates a kernel attribute's arguments. Every problem is
/// pushed to `errors`; the options that had one are left at their defaults.
pub fn parse(attribute: Attribute, attr: TokenStream, errors: &mut Accumulator) -> Options {
    let example = "precision = \"high\"";
    match attribute {
        Attribute::Sparse => {
            let names = SparseRaw::names();
            let accepted = Accepted {
                names: &names,
                example,
                hint: |_| None,
            };
            let raw: SparseRaw = read(attr, &accepted, errors);
            validate(attribute, raw.kernel, raw.platform, errors)
        }
        Attribute::Tpu | Attribute::Gpu | Attribute::Cpu => {
            let names = KernelRaw::names();
            let accepted = Accepted {
                names: &names,
                example,
                hint: platform_hint,
            };
            let raw: KernelRaw = read(attr, &accepted, errors);
            validate(attribute, raw, None, errors)
        }
    }
}

/// The shared options over `platform`'s defaults.
pub fn validate_shared(raw: SharedRaw, platform: Platform, errors: &mut Accumulator) -> Options {
    let mut options = Options::defaults(platform);
    options.precision = take(raw.precision, errors).map(|p| *p);
    options.name = take(raw.name, errors).map(|n| n.into_inner().0);
    options
}

/// Checks the kernel options against each other and the attribute.
fn validate(
    attribute: Attribute,
    raw: KernelRaw,
    platform: Option<Parsed<Platform>>,
    errors: &mut Accumulator,
) -> Options {
    let platform = take(platform, errors).map_or(attribute.platform(), |p| *p);
    if attribute == Attribute::Sparse && raw.block_size.is_none() {
        errors.push(Error::custom(
            "sparse_kernel needs a block size: `#[sparse_kernel(block_size = 128)]`",
        ));
    }
    let dtype_given = raw.dtype.is_some();
    let mut options = validate_shared(raw.shared, platform, errors);
    options.block_size = take(raw.block_size, errors).and_then(|b| block_size(&b, errors));
    options.dtype = take(raw.dtype, errors).map(|d| *d);
    if let Some(b) = take(raw.use_bfloat16, errors) {
        if dtype_given {
            errors.push(
                Error::custom(
                    "give either `dtype` or `use_bfloat16`, not both: `use_bfloat16 = true` means `dtype = \"bf16\"`",
                )
                .with_span(&b.span()),
            );
        } else if b.0 {
            options.dtype = Some(DType::BF16);
        } else {
            options.dtype = Some(DType::F32);
        }
    }
    options.accumulate = take(raw.accumulate, errors).map(|a| a.0);
    options.auto_pad = take(raw.auto_pad, errors).map(|a| a.0);
    options.interpret = take(raw.interpret, errors).map(|a| a.0);
    options.autotune = take(raw.autotune, errors).map(|a| a.0);
    options.check_args = take(raw.check_args, errors).map(|c| c.into_inner().0);
    if let Some(c) = take(raw.checks, errors) {
        match check_families(&c.0) {
            Ok(f) => options.checks = Some(f),
            Err(name) => errors.push(
                Error::custom(format!(
                    "unknown check family `{name}` in `checks`; the families are index, nan, div \
                     (or all): `checks = \"index, nan\"`"
                ))
                .with_span(&c.span()),
            ),
        }
    }
    let donate = take(raw.donate, errors).map_or_else(Vec::new, |d| d.into_inner().0);
    options.donate = donate
        .iter()
        .filter_map(|p| match p.get_ident() {
            Some(i) => Some(i.clone()),
            None => {
                errors.push(
                    Error::custom(format!(
                        "`{}` is not a parameter name; donate takes the kernel's parameter names: `donate(x, y)`",
                        path_to_string(p)
                    ))
                    .with_span(p),
                );
                None
            }
        })
        .collect();
    options
}

/// The largest block size: 2^31 - 1, since block starts are s32 indices.
const MAX_BLOCK_SIZE: u64 = i32::MAX as u64;

/// The block size if it is at least 1, at most [`MAX_BLOCK_SIZE`] and a
/// multiple of 8.
fn block_size(b: &SpannedValue<BlockSize>, errors: &mut Accumulator) -> Option<u64> {
    let problem = match b.0 {
        0 => "block_size must be at least 1".to_string(),
        n if n > MAX_BLOCK_SIZE => format!(
            "block_size = {n} is above the limit of {MAX_BLOCK_SIZE} (2^31 - 1): block starts are s32 indices"
        ),
        n if n % 8 != 0 => format!(
            "block_size = {n} is not a multiple of 8: tiles are made of 8-row sublanes, and on TPU a block's last \
             two dimensions must be divisible by 8 and 128 respectively (or equal the array's full extent)"
        ),
        n => return Some(n),
    };
    errors.push(Error::custom(problem).with_span(&b.span()));
    None
}

/// Checks that every donated name is a parameter of the kernel; names that
/// are not are reported and dropped. Parameters marked `#[donate]` are
/// added.
pub fn check_donate(opts: &mut Options, sig: &KernelSig, errors: &mut Accumulator) {
    for p in sig.params.iter().filter(|p| p.donate.is_some()) {
        if !opts.donate.contains(&p.ident) {
            opts.donate.push(p.ident.clone());
        }
    }
    let names: Vec<String> = sig.params.iter().map(|p| p.ident.to_string()).collect();
    let allowed: Vec<&str> = names.iter().map(String::as_str).collect();
    opts.donate.retain(|d| {
        let s = d.to_string();
        if names.contains(&s) {
            return true;
        }
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
        false
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse_ok(attribute: Attribute, attr: TokenStream) -> Options {
        let mut errors = Error::accumulator();
        let options = parse(attribute, attr, &mut errors);
        errors.finish().expect("valid options");
        options
    }

    fn messages(attribute: Attribute, attr: TokenStream) -> (Options, Vec<String>) {
        let mut errors = Error::accumulator();
        let options = parse(attribute, attr, &mut errors);
        let messages = errors
            .into_inner()
            .iter()
            .map(ToString::to_string)
            .collect();
        (options, messages)
    }

    #[test]
    fn names_come_from_the_structs() {
        assert_eq!(
            KernelRaw::names(),
            [
                "block_size",
                "dtype",
                "use_bfloat16",
                "accumulate",
                "auto_pad",
                "donate",
                "interpret",
                "autotune",
                "check_args",
                "checks",
                "precision",
                "name"
            ]
        );
        assert_eq!(SparseRaw::names()[0], "platform");
        assert_eq!(SparseRaw::names().len(), 13);
    }

    #[test]
    fn reads_every_option() {
        let o = parse_ok(
            Attribute::Tpu,
            quote!(
                precision = "high",
                block_size = 256,
                use_bfloat16 = true,
                accumulate = true,
                auto_pad = false,
                donate(x, y),
                interpret = true,
                check_args = inputs_ok,
                name = "k"
            ),
        );
        assert_eq!(o.platform, Platform::Tpu);
        assert_eq!(o.precision, Some(Precision::High));
        assert_eq!(o.block_size, Some(256));
        assert_eq!(o.dtype, Some(DType::BF16));
        assert_eq!((o.accumulate, o.auto_pad), (Some(true), Some(false)));
        assert_eq!(o.interpret, Some(true));
        assert_eq!(o.donate.len(), 2);
        assert_eq!(o.name.as_deref(), Some("k"));
        assert!(o.check_args.is_some_and(|p| p.is_ident("inputs_ok")));
        let o = parse_ok(Attribute::Sparse, quote!(block_size = 64, platform = "gpu"));
        assert_eq!(o.platform, Platform::Gpu);
        assert_eq!(
            parse_ok(Attribute::Gpu, quote!(dtype = "F8E5M2")).dtype,
            Some(DType::F8E5M2)
        );
    }

    #[test]
    fn a_failed_option_keeps_the_others() {
        let (o, errs) = messages(
            Attribute::Cpu,
            quote!(
                precision = "highest",
                block_size = 12,
                dtype = 3,
                name = "kept"
            ),
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].starts_with("block_size = 12 is not a multiple of 8"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("option `dtype` takes a string"),
            "{errs:?}"
        );
        assert_eq!(o.precision, Some(Precision::Highest));
        assert_eq!((o.block_size, o.dtype), (None, None));
        assert_eq!(o.name.as_deref(), Some("kept"));
        let (o, errs) = messages(Attribute::Sparse, quote!(block_size = 18446744073709551608));
        assert_eq!(
            errs,
            ["block_size = 18446744073709551608 is above the limit of 2147483647 (2^31 - 1): block \
              starts are s32 indices"]
        );
        assert_eq!(o.block_size, None);
    }

    #[test]
    fn unknown_repeated_and_misplaced_options() {
        let (_, errs) = messages(Attribute::Tpu, quote!(precison = "high", platform = "gpu"));
        assert!(errs[0].starts_with(
            "unknown option `precison`; did you mean `precision`? expected one of: block_size,"
        ));
        assert!(errs[1].contains("`platform` is an option of `sparse_kernel`"));
        let (_, errs) = messages(Attribute::Cpu, quote!(name = "a", name = "b", "high"));
        assert_eq!(errs[0], "option `name` is given twice");
        assert_eq!(
            errs[1],
            "expected `option = value`; options are written by name, e.g. `precision = \"high\"`"
        );
        let (_, errs) = messages(Attribute::Sparse, quote!(platform = "cpu", donate(a::b)));
        assert!(errs[0].starts_with("sparse_kernel needs a block size"));
        assert!(errs[1].starts_with("`a::b` is not a parameter name"));
    }
}
