//! Writes the companion of a kernel: a struct of the kernel's name whose
//! associated functions (`run`, `call`, `lower`, `compile`, `profile`, the
//! sharded forms, `value_and_grad`, their `*_with` forms, `CONFIG`) are
//! typed from the kernel's signature.
//!
//! One generator per group of functions, each in its own file; they share
//! the pieces built once from the signature ([`Parts`]). Every function is
//! `#[inline]`: a crate of kernels (the kernel library) compiles only the
//! kernels' bodies, and a crate that calls `name::run` compiles the entry
//! points it calls, not the twenty-odd of every kernel it can see.

mod autodiff;
mod programs;
mod runners;
mod runs;
mod sharded;

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Ident, ItemFn, Type};

use crate::analyze::KernelSig;
use crate::options::Options;
use crate::paths::dsl_here;
use crate::tune::{rebind_tuned, Form};

/// The `KernelConfig` the options describe, over the platform's defaults.
fn config_expr(o: &Options) -> TokenStream {
    let dsl = dsl_here();
    let platform = o.platform;
    let mut fields = Vec::new();
    if let Some(p) = o.precision {
        fields.push(quote!(precision: #p));
    }
    if let Some(b) = o.block_size {
        let b = b as usize;
        fields.push(quote!(block_size: ::core::option::Option::Some(#b)));
    }
    if let Some(d) = o.dtype {
        fields.push(quote!(dtype: ::core::option::Option::Some(#d)));
    }
    if let Some(a) = o.accumulate {
        fields.push(quote!(accumulate: #a));
    }
    if let Some(a) = o.auto_pad {
        fields.push(quote!(auto_pad: #a));
    }
    if let Some(i) = o.interpret {
        fields.push(quote!(interpret: #i));
    }
    if let Some(a) = o.autotune {
        fields.push(quote!(autotune: #a));
    }
    if let Some(c) = o.checks {
        let (index, nan, div) = (c.index, c.nan, c.div);
        fields.push(quote!(checks: #dsl::CheckFamilies { index: #index, nan: #nan, div: #div }));
    }
    if !o.donate.is_empty() {
        let names = o.donate.iter().map(|d| d.to_string());
        fields.push(quote!(donate: &[#(#names),*]));
    }
    if let Some(n) = &o.name {
        fields.push(quote!(name: ::core::option::Option::Some(#n)));
    }
    quote! {
        #dsl::KernelConfig {
            #(#fields,)*
            ..#dsl::KernelConfig::for_platform(#platform)
        }
    }
}

/// The original function followed by its companion: a braced struct of the
/// same name (it lives in the type namespace, so `name(..)` still calls the
/// function and `name::run(..)` reaches the companion, also for kernels
/// declared inside function bodies).
pub fn generate(func: &ItemFn, opts: &Options, sig: &KernelSig) -> TokenStream {
    let companion = companion(&func.vis, &func.sig.ident, &func.sig.ident, opts, sig);
    quote! {
        #func

        #companion
    }
}

/// What the generators share, built once from the kernel's signature and
/// options.
struct Parts {
    /// The path of the DSL (`::tessel::__private`).
    dsl: TokenStream,
    /// The kernel's name, as a string.
    name_str: String,
    /// The function the companion traces.
    callee: Ident,
    /// The parameters' names, as identifiers and as strings.
    ps: Vec<Ident>,
    ps_str: Vec<String>,
    /// The parameters' types, and the return type.
    tys: Vec<Type>,
    ret: Type,
    /// The DSL's `KernelParam`, `KernelOutput`, `KernelConfig` and `Device`.
    kp: TokenStream,
    ko: TokenStream,
    cfg_ty: TokenStream,
    dev_ty: TokenStream,
    /// Statements recording every argument in the collector `__c`, as host
    /// tensors, specs, buffers and sharded buffers.
    collect_host: TokenStream,
    collect_spec: TokenStream,
    collect_buffer: TokenStream,
    collect_sharded: TokenStream,
    /// The traced body's closure over host, spec, buffer and sharded arguments.
    body_host: TokenStream,
    body_spec: TokenStream,
    body_buf: TokenStream,
    body_sharded: TokenStream,
    /// The `check_args` call under `config` and under `Self::CONFIG`.
    check_cfg: Option<TokenStream>,
    check_const: Option<TokenStream>,
    /// Whether `run_with` collects the host arguments before running.
    collect_first: TokenStream,
    /// The autotuning statements on host and on buffer arguments.
    tune_host: TokenStream,
    tune_buffer: TokenStream,
}

impl Parts {
    fn new(callee: &Ident, name: &Ident, opts: &Options, sig: &KernelSig) -> Parts {
        let dsl = dsl_here();
        let name_str = name.to_string();
        let ps: Vec<Ident> = sig.params.iter().map(|p| p.ident.clone()).collect();
        let ps_str: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
        let tys: Vec<Type> = sig.params.iter().map(|p| p.ty.clone()).collect();
        let kp = quote!(#dsl::KernelParam);
        let body = |bind: TokenStream| {
            quote! {
                |__t: &[#dsl::Tensor]| {
                    let mut __it = __t.iter().copied();
                    #( let #ps = <#tys as #kp>::#bind(&#ps, &mut __it); )*
                    #callee(#(#ps),*)
                }
            }
        };
        let collect =
            |form: TokenStream| quote!(#( <#tys as #kp>::#form(&#ps, #ps_str, &mut __c); )*);
        // The `check_args` function, called on the host arguments under `cfg`.
        let check = |cfg: TokenStream| {
            opts.check_args.as_ref().map(|path| {
                let f = quote::quote_spanned!(syn::spanned::Spanned::span(path)=> #path);
                quote!(#f(#cfg, &__c.hosts)?;)
            })
        };
        // `run_with` needs the host arguments before running for
        // `check_args` or autotuning.
        let collect_first = if opts.check_args.is_some() {
            quote!(true)
        } else {
            quote!(config.autotune)
        };
        Parts {
            name_str: name_str.clone(),
            callee: callee.clone(),
            ret: sig.ret.clone(),
            ko: quote!(#dsl::KernelOutput),
            cfg_ty: quote!(#dsl::KernelConfig),
            dev_ty: quote!(#dsl::Device),
            body_host: body(quote!(bind_host)),
            body_spec: body(quote!(bind_spec)),
            body_buf: body(quote!(bind_buffer)),
            body_sharded: body(quote!(bind_sharded)),
            collect_host: collect(quote!(collect_host)),
            collect_spec: collect(quote!(collect_spec)),
            collect_buffer: collect(quote!(collect_buffer)),
            collect_sharded: collect(quote!(collect_sharded)),
            check_cfg: check(quote!(config)),
            check_const: check(quote!(&Self::CONFIG)),
            collect_first,
            tune_host: rebind_tuned(Form::Host, &name_str, &ps, &tys),
            tune_buffer: rebind_tuned(Form::Buffer, &name_str, &ps, &tys),
            kp,
            ps_str,
            ps,
            tys,
            dsl,
        }
    }
}

/// The companion struct `name` whose functions trace `callee` (a function
/// with the signature `sig`).
pub fn companion(
    vis: &syn::Visibility,
    name: &Ident,
    callee: &Ident,
    opts: &Options,
    sig: &KernelSig,
) -> TokenStream {
    let p = Parts::new(callee, name, opts, sig);
    let (name_str, cfg_ty) = (&p.name_str, &p.cfg_ty);
    let config = config_expr(opts);
    let doc = format!(
        "Companion of the kernel [`{name_str}`](fn@{name_str}): `run` (host tensors in and out), \
         `call` (device buffers), `lower` (StableHLO text), `compile`, `profile` and `CONFIG`; the `*_with` \
         forms take a [`KernelConfig`](#dsl::KernelConfig) that overrides the attribute's."
    );
    // The result's bound, checked once here at the user's return type: a
    // type that is not a kernel result is one error at its span, not one
    // per generated method. (The parameters' bounds stay on the methods:
    // the methods rely on their types' forms being known.)
    let ret = &sig.ret;
    let ret_span = syn::spanned::Spanned::span(ret);
    let ko = respan(p.ko.clone(), ret_span);
    let ret_bound = quote::quote_spanned!(ret_span=> #ret: #ko);
    let groups = [
        runners::runners(&p),
        runs::runs(&p),
        programs::programs(&p),
        sharded::sharded(&p),
        autodiff::autodiff(&p),
    ];
    quote! {
        #[doc = #doc]
        #[allow(non_camel_case_types)]
        #vis struct #name {}

        #[allow(clippy::too_many_arguments, dead_code)]
        impl #name where #ret_bound {
            /// The configuration given by the kernel's attribute.
            pub const CONFIG: #cfg_ty = #config;

            #(#groups)*
        }
    }
}

/// `tokens` with every span set to `span` (so that an error about them
/// points at the user's code).
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            if let proc_macro2::TokenTree::Group(g) = &t {
                let mut inner = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                inner.set_span(span);
                t = proc_macro2::TokenTree::Group(inner);
            } else {
                t.set_span(span);
            }
            t
        })
        .collect()
}
