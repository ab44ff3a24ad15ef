//! Typed option values, read with darling's `FromMeta`.
//!
//! Every option is written `key = literal` (only `donate` takes a list).
//! Each type here reads one option: a value of the wrong form is an error
//! that names the option and shows its form (`option `block_size` takes an
//! integer literal: `block_size = 128``), spanned on the value; a keyword
//! that is not one of the allowed ones gets a did-you-mean and the list.
//! Range checks that need other options or the span of the value (block
//! size a multiple of 8, `top_k` at most `num_experts`, ...) are made later,
//! when the options are validated.

use darling::ast::NestedMeta;
use darling::{Error, FromMeta};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, ToTokens};
use syn::spanned::Spanned;
use syn::{Expr, Lit, Meta};

use crate::suggest::{did_you_mean, quoted_list};

/// An option written `key = literal`.
trait LiteralValue: Sized {
    /// The option's name.
    const KEY: &'static str;
    /// What the option takes, shown when it is given in another form:
    /// "an integer literal: `block_size = 128`".
    fn form() -> String;
    /// The value of a literal of the right kind, `None` for another kind.
    fn from_lit(lit: &Lit) -> Option<darling::Result<Self>>;
}

/// "option `key` takes (form)" for `T`, spanned on `at`.
fn form_error<T: LiteralValue>(at: &impl Spanned) -> Error {
    Error::custom(format!("option `{}` takes {}", T::KEY, T::form())).with_span(at)
}

/// Reads `key = literal` as a `T`; any other form is an error showing the
/// form `T` takes.
fn from_literal<T: LiteralValue>(meta: &Meta) -> darling::Result<T> {
    let Meta::NameValue(nv) = meta else {
        return Err(form_error::<T>(meta));
    };
    let mut value = &nv.value;
    // Options written by a `macro_rules!` arrive wrapped in invisible groups.
    while let Expr::Group(g) = value {
        value = &g.expr;
    }
    let Expr::Lit(lit) = value else {
        return Err(form_error::<T>(value));
    };
    match T::from_lit(&lit.lit) {
        Some(parsed) => parsed.map_err(|e| e.with_span(&lit.lit)),
        None => Err(form_error::<T>(&lit.lit)),
    }
}

/// `unknown precision "hgh"; did you mean "high"? expected one of ...`.
fn unknown_keyword(kind: &str, got: &str, folded: &str, allowed: &[&str]) -> Error {
    let hint = did_you_mean(folded, allowed)
        .map(|s| format!("did you mean \"{s}\"? "))
        .unwrap_or_default();
    Error::custom(format!(
        "unknown {kind} \"{got}\"; {hint}expected one of {}",
        quoted_list(allowed)
    ))
}

/// Declares an enum of keywords written as a string (`key = "keyword"`),
/// with `FromMeta`, the name of the matching variant of the runtime enum
/// (at `tokens`), and `ToTokens` writing that variant's path.
macro_rules! keyword_enum {
    (
        $(#[doc = $doc:literal])*
        enum $name:ident for $key:literal, example $example:literal,
            ignore_case = $ignore_case:literal, tokens [$($path:tt)*] {
            $( $(#[doc = $vdoc:literal])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $( $(#[doc = $vdoc])* $variant, )*
        }

        impl $name {
            /// The accepted keywords, in declaration order.
            pub const KEYWORDS: &'static [&'static str] = &[$($text),*];

            /// The runtime enum's variant this value stands for.
            pub fn variant_ident(self) -> syn::Ident {
                match self {
                    $( Self::$variant => format_ident!(stringify!($variant)), )*
                }
            }
        }

        impl FromMeta for $name {
            fn from_string(value: &str) -> darling::Result<Self> {
                let folded = if $ignore_case {
                    value.to_ascii_lowercase()
                } else {
                    value.to_owned()
                };
                match folded.as_str() {
                    $( $text => Ok(Self::$variant), )*
                    _ => Err(unknown_keyword($key, value, &folded, Self::KEYWORDS)),
                }
            }

            fn from_meta(meta: &Meta) -> darling::Result<Self> {
                from_literal(meta)
            }
        }

        impl LiteralValue for $name {
            const KEY: &'static str = $key;

            fn form() -> String {
                format!(
                    "a string: `{} = \"{}\"` (one of {})",
                    $key,
                    $example,
                    quoted_list(Self::KEYWORDS)
                )
            }

            fn from_lit(lit: &Lit) -> Option<darling::Result<Self>> {
                match lit {
                    Lit::Str(s) => Some(Self::from_string(&s.value())),
                    _ => None,
                }
            }
        }

        impl ToTokens for $name {
            fn to_tokens(&self, tokens: &mut TokenStream) {
                let variant = self.variant_ident();
                let dsl = crate::paths::dsl_here();
                tokens.extend(quote!(#dsl::$($path)*::#variant));
            }
        }
    };
}

keyword_enum! {
    /// `precision = "high"`: the matmul precision.
    enum Precision for "precision", example "high",
        ignore_case = false, tokens [Precision] {
        /// `"default"`: fastest.
        Default = "default",
        /// `"high"`: bf16_3x on TPU.
        High = "high",
        /// `"highest"`: full f32 on TPU.
        Highest = "highest",
    }
}

keyword_enum! {
    /// `dtype = "bf16"`: the matmul input type; spelled in any case.
    enum DType for "dtype", example "bf16",
        ignore_case = true, tokens [DType] {
        /// `"bf16"`: bfloat16.
        BF16 = "bf16",
        /// `"f16"`: IEEE half precision.
        F16 = "f16",
        /// `"f32"`: IEEE single precision.
        F32 = "f32",
        /// `"f64"`: IEEE double precision.
        F64 = "f64",
        /// `"f8e4m3fn"`: 8-bit float, 4 exponent bits, finite only.
        F8E4M3FN = "f8e4m3fn",
        /// `"f8e5m2"`: 8-bit float, 5 exponent bits.
        F8E5M2 = "f8e5m2",
        /// `"s8"`: signed 8-bit integer.
        S8 = "s8",
        /// `"s16"`: signed 16-bit integer.
        S16 = "s16",
        /// `"s32"`: signed 32-bit integer.
        S32 = "s32",
        /// `"s64"`: signed 64-bit integer.
        S64 = "s64",
        /// `"u8"`: unsigned 8-bit integer.
        U8 = "u8",
        /// `"u16"`: unsigned 16-bit integer.
        U16 = "u16",
        /// `"u32"`: unsigned 32-bit integer.
        U32 = "u32",
        /// `"u64"`: unsigned 64-bit integer.
        U64 = "u64",
        /// `"pred"`: boolean.
        Pred = "pred",
    }
}

keyword_enum! {
    /// `platform = "tpu"` (`sparse_kernel` only): the platform whose
    /// defaults the kernel takes.
    enum Platform for "platform", example "tpu",
        ignore_case = false, tokens [Platform] {
        /// `"tpu"`: Cloud TPU.
        Tpu = "tpu",
        /// `"gpu"`: NVIDIA GPU.
        Gpu = "gpu",
        /// `"cpu"`: CPU.
        Cpu = "cpu",
    }
}

/// An integer literal (any suffix) as a `u64`.
fn int(lit: &Lit, key: &str) -> Option<darling::Result<u64>> {
    match lit {
        Lit::Int(i) => Some(
            i.base10_parse()
                .map_err(|e| Error::custom(format!("{key} must be a positive integer: {e}"))),
        ),
        _ => None,
    }
}

/// A float or integer literal as an `f64`.
fn number(lit: &Lit, key: &str) -> Option<darling::Result<f64>> {
    match lit {
        Lit::Float(f) => Some(
            f.base10_parse()
                .map_err(|e| Error::custom(format!("{key} must be a number: {e}"))),
        ),
        Lit::Int(_) => int(lit, key).map(|n| n.map(|n| n as f64)),
        _ => None,
    }
}

/// A bool literal.
fn boolean(lit: &Lit, _key: &str) -> Option<darling::Result<bool>> {
    match lit {
        Lit::Bool(b) => Some(Ok(b.value)),
        _ => None,
    }
}

/// A string literal.
fn string(lit: &Lit, _key: &str) -> Option<darling::Result<String>> {
    match lit {
        Lit::Str(s) => Some(Ok(s.value())),
        _ => None,
    }
}

/// Declares newtypes over one literal each: `Name(type) = "key", reader,
/// "what it takes", "example value";`.
macro_rules! literal_value {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident($ty:ty) = $key:literal, $read:ident, $what:literal, $example:literal;
    )*) => {$(
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name(pub $ty);

        impl LiteralValue for $name {
            const KEY: &'static str = $key;

            fn form() -> String {
                format!("{}: `{} = {}`", $what, $key, $example)
            }

            fn from_lit(lit: &Lit) -> Option<darling::Result<Self>> {
                $read(lit, $key).map(|parsed| parsed.map(Self))
            }
        }

        impl FromMeta for $name {
            fn from_meta(meta: &Meta) -> darling::Result<Self> {
                from_literal(meta)
            }
        }
    )*};
}

literal_value! {
    /// `block_size = 128`: the tile size.
    BlockSize(u64) = "block_size", int, "an integer literal", "128";
    /// `use_bfloat16 = true`: `dtype = "bf16"` (`false`: `"f32"`).
    UseBfloat16(bool) = "use_bfloat16", boolean, "a bool", "true";
    /// `accumulate = true`: accumulate matmuls in f32.
    Accumulate(bool) = "accumulate", boolean, "a bool", "true";
    /// `auto_pad = false`: whether inputs are padded to whole tiles.
    AutoPad(bool) = "auto_pad", boolean, "a bool", "false";
    /// `interpret = true`: run on the interpreter whatever the device.
    Interpret(bool) = "interpret", boolean, "a bool", "true";
    /// `autotune = true`: choose block sizes by measurement on first use.
    Autotune(bool) = "autotune", boolean, "a bool", "true";
    /// `checks = "index, nan"`: the automatic check families.
    Checks(String) = "checks", string, "a string listing index, nan, div or all", "\"index, nan\"";
    /// `name = "my_kernel"`: the kernel's name in compiled programs.
    KernelName(String) = "name", string, "a string", "\"my_kernel\"";
    /// `num_experts = 8`: how many experts `expert_kernel` routes between.
    NumExperts(u64) = "num_experts", int, "an integer literal", "8";
    /// `top_k = 2`: how many experts each token is routed to.
    TopK(u64) = "top_k", int, "an integer literal", "2";
    /// `capacity_factor = 1.25`: each expert's capacity over an even share.
    CapacityFactor(f64) = "capacity_factor", number, "a number", "1.25";
    /// `renormalize = true`: whether the top-k gates are renormalized.
    Renormalize(bool) = "renormalize", boolean, "a bool", "true";
    /// `per_expert = true`: the expert body is written for one expert.
    PerExpert(bool) = "per_expert", boolean, "a bool", "true";
}

/// `donate(x, y)`: the parameters whose buffers the kernel may reuse, as
/// written (that they are plain names, and parameters of the kernel, is
/// checked when the options are validated).
#[derive(Clone, Debug)]
pub struct Donate(pub Vec<syn::Path>);

impl Donate {
    /// "option `donate` takes ...", spanned on `at`.
    fn form_error(at: &impl Spanned) -> Error {
        Error::custom("option `donate` takes a list of parameter names: `donate(x, y)`")
            .with_span(at)
    }
}

impl FromMeta for Donate {
    fn from_meta(meta: &Meta) -> darling::Result<Self> {
        let Meta::List(list) = meta else {
            return Err(Self::form_error(meta));
        };
        let mut errors = Error::accumulator();
        let mut paths = Vec::new();
        for item in NestedMeta::parse_meta_list(list.tokens.clone())? {
            match item {
                NestedMeta::Meta(Meta::Path(p)) => paths.push(p),
                other => errors.push(Self::form_error(&other)),
            }
        }
        errors.finish_with(Donate(paths))
    }
}

/// `check_args = check_inputs`: a function the companion's host-tensor
/// entry points (`run`, `profile`, `value_and_grad`, `run_sharded`) call
/// on the configuration and the tensor arguments before running.
#[derive(Clone, Debug)]
pub struct CheckArgs(pub syn::Path);

impl CheckArgs {
    /// "option `check_args` takes ...", spanned on `at`.
    fn form_error(at: &impl Spanned) -> Error {
        Error::custom(
            "option `check_args` takes the path of a function `fn(&KernelConfig, &[&HostTensor]) \
             -> Result<()>`: `check_args = check_inputs`",
        )
        .with_span(at)
    }
}

impl FromMeta for CheckArgs {
    fn from_meta(meta: &Meta) -> darling::Result<Self> {
        let Meta::NameValue(nv) = meta else {
            return Err(Self::form_error(meta));
        };
        let mut value = &nv.value;
        while let Expr::Group(g) = value {
            value = &g.expr;
        }
        match value {
            Expr::Path(p) if p.qself.is_none() => Ok(CheckArgs(p.path.clone())),
            other => Err(Self::form_error(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(tokens: TokenStream) -> Meta {
        syn::parse2(tokens).expect("a meta item")
    }

    #[test]
    fn keywords_parse_to_variants() {
        let p = Precision::from_meta(&meta(quote!(precision = "highest"))).unwrap();
        assert_eq!(p, Precision::Highest);
        assert_eq!(
            p.to_token_stream().to_string(),
            ":: tessel :: __private :: Precision :: Highest"
        );
        let d = DType::from_meta(&meta(quote!(dtype = "BF16"))).unwrap();
        assert_eq!(
            d.to_token_stream().to_string(),
            ":: tessel :: __private :: DType :: BF16"
        );
        let p = Platform::from_string("gpu").unwrap();
        assert_eq!(p.variant_ident(), "Gpu");
    }

    #[test]
    fn unknown_keyword_suggests_and_lists() {
        let e = Precision::from_string("hgh").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown precision \"hgh\"; did you mean \"high\"? expected one of \"default\", \"high\", \"highest\""
        );
        let e = DType::from_string("Bf61").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown dtype \"Bf61\"; did you mean \"bf16\"?"),
            "{e}"
        );
        let e = DType::from_string("float128").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown dtype \"float128\"; expected one of \"bf16\""),
            "{e}"
        );
        let e = Precision::from_string("HIGH").unwrap_err().to_string();
        assert!(e.starts_with("unknown precision \"HIGH\""), "{e}");
    }

    #[test]
    fn wrong_kind_shows_the_form() {
        let e = Precision::from_meta(&meta(quote!(precision = 3))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "option `precision` takes a string: `precision = \"high\"` (one of \"default\", \"high\", \"highest\")"
        );
        let e = BlockSize::from_meta(&meta(quote!(block_size = "128"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "option `block_size` takes an integer literal: `block_size = 128`"
        );
        let e = AutoPad::from_meta(&meta(quote!(auto_pad))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "option `auto_pad` takes a bool: `auto_pad = false`"
        );
        let e = Donate::from_meta(&meta(quote!(donate = x))).unwrap_err();
        assert!(e.to_string().contains("`donate(x, y)`"));
    }

    #[test]
    fn literals_parse() {
        assert_eq!(
            BlockSize::from_meta(&meta(quote!(block_size = 64))).unwrap(),
            BlockSize(64)
        );
        let c = CapacityFactor::from_meta(&meta(quote!(capacity_factor = 2))).unwrap();
        assert_eq!(c, CapacityFactor(2.0));
        let d = Donate::from_meta(&meta(quote!(donate(x, y)))).unwrap();
        assert_eq!(d.0.len(), 2);
        let c = CheckArgs::from_meta(&meta(quote!(check_args = super::check))).unwrap();
        assert_eq!(c.0.segments.len(), 2);
        let e = CheckArgs::from_meta(&meta(quote!(check_args = "check"))).unwrap_err();
        assert!(e.to_string().contains("`check_args = check_inputs`"), "{e}");
    }
}
