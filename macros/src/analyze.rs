//! Checks the annotated function and extracts what generation needs:
//! parameter names and types, the return type, visibility and docs.
//! Whether a parameter is traced or static is left to the type system
//! (`KernelParam`), not guessed here.

use darling::Error;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

/// Names the companion functions use for their own parameters.
const RESERVED: &[&str] = &["device", "config", "options"];

/// One parameter.
pub struct Param {
    pub ident: syn::Ident,
    pub ty: Type,
    /// The `#[donate]` attribute on the parameter, if written.
    pub donate: Option<syn::Attribute>,
}

/// What the generator needs from the function.
pub struct KernelSig {
    pub params: Vec<Param>,
    pub ret: Type,
}

/// The `#[donate]` among a parameter's attributes (an error if it takes
/// arguments).
fn donate_attr(
    attrs: &[syn::Attribute],
    errors: &mut darling::error::Accumulator,
) -> Option<syn::Attribute> {
    let attr = attrs.iter().find(|a| a.path().is_ident("donate"))?;
    if !matches!(attr.meta, syn::Meta::Path(_)) {
        errors.push(
            Error::custom(
                "`#[donate]` takes no arguments: it donates the whole parameter (every leaf of a tree)",
            )
            .with_span(&attr.meta),
        );
    }
    Some(attr.clone())
}

/// Removes the `#[donate]` attributes from `f`'s parameters (they are the
/// macro's, not the compiler's).
pub fn strip_param_attrs(f: &mut ItemFn) {
    for arg in &mut f.sig.inputs {
        if let FnArg::Typed(pt) = arg {
            pt.attrs.retain(|a| !a.path().is_ident("donate"));
        }
    }
}

/// Validates the function's signature, accumulating every problem.
pub fn analyze(f: &ItemFn) -> darling::Result<KernelSig> {
    let mut errors = Error::accumulator();
    let sig = &f.sig;
    if let Some(a) = &sig.asyncness {
        errors.push(
            Error::custom("a kernel cannot be `async`: its body runs once, synchronously, while tracing; remove `async`")
                .with_span(a),
        );
    }
    if let Some(u) = &sig.unsafety {
        errors.push(
            Error::custom("a kernel cannot be `unsafe`: tensor ops are safe; remove `unsafe` (and do raw work outside the kernel)")
                .with_span(u),
        );
    }
    if let Some(c) = &sig.constness {
        errors.push(
            Error::custom("a kernel cannot be `const`: it is traced at run time; remove `const`")
                .with_span(c),
        );
    }
    if let Some(abi) = &sig.abi {
        errors
            .push(Error::custom("a kernel cannot have an `extern` ABI; remove it").with_span(abi));
    }
    if let Some(v) = &sig.variadic {
        errors.push(Error::custom("a kernel cannot be variadic").with_span(v));
    }
    if !sig.generics.params.is_empty() {
        errors.push(
            Error::custom(
                "a kernel cannot have generic or lifetime parameters: tensor shapes and dtypes are known while \
                 tracing; make configuration a static parameter (bool, integer, enum) instead",
            )
            .with_span(&sig.generics),
        );
    }
    let mut params = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(r) => errors.push(
                Error::custom(
                    "a kernel cannot take `self`: write a free function and pass the tensor as a parameter",
                )
                .with_span(r),
            ),
            FnArg::Typed(pt) => match &*pt.pat {
                Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    let is_static_ref = matches!(&*pt.ty, Type::Reference(r) if r.lifetime.as_ref().is_some_and(|l| l.ident == "static") && r.mutability.is_none());
                    if let (Type::Reference(r), false) = (&*pt.ty, is_static_ref) {
                        errors.push(
                            Error::custom(
                                "kernel parameters are taken by value: `Tensor` is a `Copy` handle; \
                                 remove the `&` (static parameters may be `&'static` references such as `&'static str`)",
                            )
                            .with_span(&r.span()),
                        );
                        continue;
                    }
                    if let Type::ImplTrait(t) = &*pt.ty {
                        errors.push(
                            Error::custom("kernel parameters need concrete types (`Tensor` or a static type), not `impl Trait`")
                                .with_span(&t.span()),
                        );
                        continue;
                    }
                    if RESERVED.contains(&pi.ident.to_string().as_str()) {
                        errors.push(
                            Error::custom(format!(
                                "`{}` is a parameter of the generated companion functions (`run(device, ..)`, \
                                 `run_with(config, device, ..)`, `profile(device, options, ..)`); rename this parameter",
                                pi.ident
                            ))
                            .with_span(&pi.ident),
                        );
                        continue;
                    }
                    params.push(Param {
                        ident: pi.ident.clone(),
                        ty: (*pt.ty).clone(),
                        donate: donate_attr(&pt.attrs, &mut errors),
                    });
                }
                other => errors.push(
                    Error::custom("kernel parameters must be plain names (`x: Tensor`); destructure inside the body")
                        .with_span(&other.span()),
                ),
            },
        }
    }
    let ret = match &sig.output {
        ReturnType::Type(_, t) => Some((**t).clone()),
        ReturnType::Default => {
            errors.push(
                Error::custom(
                    "a kernel must return its result: add `-> Tensor` (or a tuple of `Tensor`s)",
                )
                .with_span(&sig.ident),
            );
            None
        }
    };
    errors.finish()?;
    Ok(KernelSig {
        params,
        ret: ret.unwrap_or_else(|| syn::parse_quote!(())),
    })
}
