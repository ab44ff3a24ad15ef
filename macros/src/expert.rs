//! `#[expert_kernel]`: the annotated function is one expert's computation;
//! the attribute generates the routed mixture-of-experts layer around it.
//!
//! For `fn ffn(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor` it keeps `ffn`
//! (one expert, callable anywhere), adds `ffn_moe(x, router, w1, w2)` (the
//! routed layer over stacked expert weights `[E, ..]`, returning the output,
//! the load-balancing loss, the router z-loss and the dropped count),
//! `ffn_moe_dense(..)` (the same layer with dense einsum dispatch, the
//! reference), and the companion `ffn::run(&dev, ..)` etc. for `ffn_moe`.

use darling::ast::NestedMeta;
use darling::Error;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::ItemFn;

use crate::analyze::{KernelSig, Param};
use crate::options::{did_you_mean, Options, Platform};

/// Option names `expert_kernel` accepts.
const EXPERT_OPTIONS: &[&str] = &[
    "num_experts",
    "top_k",
    "capacity_factor",
    "renormalize",
    "precision",
    "name",
];

/// Validated `expert_kernel` options.
pub struct ExpertOptions {
    num_experts: u64,
    top_k: u64,
    capacity_factor: f64,
    renormalize: bool,
    common: Options,
}

fn lit_u64(e: &syn::Expr, key: &str) -> darling::Result<u64> {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i
            .base10_parse::<u64>()
            .map_err(|err| Error::custom(err).with_span(i)),
        other => Err(Error::custom(format!(
            "`{key}` takes an integer literal, e.g. `{key} = 8`"
        ))
        .with_span(&other.span())),
    }
}

/// Parses `expert_kernel(num_experts = 8, top_k = 2, capacity_factor = 1.25, renormalize = true)`.
pub fn parse(attr: TokenStream) -> darling::Result<ExpertOptions> {
    let items = NestedMeta::parse_meta_list(attr)?;
    let mut errors = Error::accumulator();
    let (mut num_experts, mut top_k, mut capacity_factor, mut renormalize) =
        (None, 2u64, 1.25f64, true);
    let mut top_k_span = Span::call_site();
    let mut common = Vec::new();
    for item in items {
        let NestedMeta::Meta(syn::Meta::NameValue(nv)) = &item else {
            errors.push(
                Error::custom("expected `option = value`, e.g. `num_experts = 8`")
                    .with_span(&item.span()),
            );
            continue;
        };
        let key = nv
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        match key.as_str() {
            "num_experts" => match lit_u64(&nv.value, "num_experts") {
                Ok(0) => errors
                    .push(Error::custom("num_experts must be at least 1").with_span(&nv.value)),
                Ok(n) => num_experts = Some((n, nv.value.span())),
                Err(e) => errors.push(e),
            },
            "top_k" => match lit_u64(&nv.value, "top_k") {
                Ok(0) => {
                    errors.push(Error::custom("top_k must be at least 1").with_span(&nv.value))
                }
                Ok(k) => {
                    top_k = k;
                    top_k_span = nv.value.span();
                }
                Err(e) => errors.push(e),
            },
            "capacity_factor" => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Float(f),
                    ..
                }) => match f.base10_parse::<f64>() {
                    Ok(v) if v > 0.0 => capacity_factor = v,
                    _ => errors.push(
                        Error::custom("capacity_factor must be a positive number").with_span(f),
                    ),
                },
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(i),
                    ..
                }) => match i.base10_parse::<u64>() {
                    Ok(v) if v > 0 => capacity_factor = v as f64,
                    _ => errors.push(
                        Error::custom("capacity_factor must be a positive number").with_span(i),
                    ),
                },
                other => errors.push(
                    Error::custom(
                        "`capacity_factor` takes a number, e.g. `capacity_factor = 1.25`",
                    )
                    .with_span(&other.span()),
                ),
            },
            "renormalize" => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Bool(b),
                    ..
                }) => renormalize = b.value,
                other => errors
                    .push(Error::custom("`renormalize` takes a bool").with_span(&other.span())),
            },
            "precision" | "name" => common.push(item.clone()),
            _ => {
                let hint = did_you_mean(&key, EXPERT_OPTIONS)
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default();
                errors.push(
                    Error::custom(format!(
                        "unknown option `{key}`; {hint}expected one of: {}",
                        EXPERT_OPTIONS.join(", ")
                    ))
                    .with_span(&nv.path),
                );
            }
        }
    }
    let num_experts = match num_experts {
        Some((n, span)) => {
            if top_k > n {
                errors.push(
                    Error::custom(format!("top_k = {top_k} exceeds num_experts = {n}: each token picks top_k distinct experts"))
                        .with_span(&top_k_span),
                );
            }
            let _ = span;
            n
        }
        None => {
            errors.push(Error::custom("expert_kernel needs `num_experts = N`"));
            1
        }
    };
    let tokens: TokenStream = quote!(#(#common),*);
    let common = errors.handle(crate::options::parse(Platform::Cpu, tokens));
    let common = errors.finish_with(common)?;
    match common {
        Some(common) => Ok(ExpertOptions {
            num_experts,
            top_k,
            capacity_factor,
            renormalize,
            common,
        }),
        None => Err(Error::custom("invalid options")),
    }
}

/// Checks the expert function's signature: tokens first, then its weights.
pub fn check(sig: &KernelSig, func: &ItemFn) -> darling::Result<()> {
    if sig.params.is_empty() {
        return Err(Error::custom(
            "an expert kernel takes the tokens first: `fn expert(x: Tensor, w: Tensor, ..)`",
        )
        .with_span(&func.sig.ident));
    }
    if let Some(p) = sig.params.iter().find(|p| p.ident == "router") {
        return Err(Error::custom(
            "`router` is the routed layer's router-weight parameter; rename this parameter",
        )
        .with_span(&p.ident));
    }
    Ok(())
}

/// The expert function, the routed layers and the companion.
pub fn generate(func: &ItemFn, o: &ExpertOptions, sig: &KernelSig) -> TokenStream {
    let vis = &func.vis;
    let name = &func.sig.ident;
    let routed = format_ident!("{}_moe", name);
    let dense = format_ident!("{}_moe_dense", name);
    let first = &sig.params[0];
    let (x, x_ty) = (&first.ident, &first.ty);
    let rest: Vec<&Param> = sig.params[1..].iter().collect();
    let rest_ids: Vec<_> = rest.iter().map(|p| &p.ident).collect();
    let rest_tys: Vec<_> = rest.iter().map(|p| &p.ty).collect();
    let (e, k, cf, rn) = (
        o.num_experts as usize,
        o.top_k as usize,
        o.capacity_factor,
        o.renormalize,
    );
    let opts = quote! {
        ::tessel::moe::MoeOptions { num_experts: #e, top_k: #k, capacity_factor: #cf, renormalize: #rn }
    };
    let doc_routed = format!(
        "The routed mixture-of-experts layer around [`{name}`](fn@{name}): {e} experts, top-{k}, capacity factor \
         {cf}. Takes the tokens `[T, d]`, the router weights `[d, {e}]` and each expert parameter stacked over \
         the experts (`[{e}, ..]`); returns (output `[T, d_out]`, load-balancing loss, router z-loss, dropped \
         assignments)."
    );
    let doc_dense =
        format!("[`{routed}`] with dense (einsum) dispatch: the reference implementation.");
    let layer = |f: &syn::Ident, which: TokenStream, doc: &str| {
        quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            #vis fn #f(#x: #x_ty, router: ::tessel::Tensor, #(#rest_ids: #rest_tys),*)
                -> (::tessel::Tensor, ::tessel::Tensor, ::tessel::Tensor, ::tessel::Tensor)
            {
                let __o = #opts;
                let __r = ::tessel::moe::#which(#x, router, &__o, |__xe| #name(__xe, #(#rest_ids),*));
                (__r.output, __r.aux_loss, __r.z_loss, __r.dropped)
            }
        }
    };
    let routed_fn = layer(&routed, quote!(grouped_layer), &doc_routed);
    let dense_fn = layer(&dense, quote!(dense_dispatch_layer), &doc_dense);
    let mut params = vec![Param {
        ident: x.clone(),
        ty: x_ty.clone(),
    }];
    params.push(Param {
        ident: syn::Ident::new("router", Span::call_site()),
        ty: syn::parse_quote!(::tessel::Tensor),
    });
    params.extend(rest.iter().map(|p| Param {
        ident: p.ident.clone(),
        ty: p.ty.clone(),
    }));
    let layer_sig = KernelSig {
        params,
        ret: syn::parse_quote!((
            ::tessel::Tensor,
            ::tessel::Tensor,
            ::tessel::Tensor,
            ::tessel::Tensor
        )),
    };
    let companion = crate::generate::companion(vis, name, &routed, &o.common, &layer_sig);
    quote! {
        #func

        #routed_fn

        #dense_fn

        #companion
    }
}
