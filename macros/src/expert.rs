//! `#[expert_kernel]`: the annotated function is one expert's computation;
//! the attribute generates the routed mixture-of-experts layer around it.
//!
//! For `fn ffn(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor` it keeps `ffn`
//! (one expert, callable anywhere), adds `ffn_moe(x, router, w1, w2)` (the
//! routed layer over stacked expert weights `[E, ..]`, returning the output,
//! the load-balancing loss, the router z-loss and the dropped count),
//! `ffn_moe_dense(..)` (the same layer with dense einsum dispatch, the
//! reference), and the companion `ffn::run(&dev, ..)` etc. for `ffn_moe`.

use darling::error::Accumulator;
use darling::Error;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::ItemFn;

use crate::analyze::{KernelSig, Param};
use crate::options::{
    option_struct, read, take, validate_shared, Accepted, CapacityFactor, NumExperts, Options,
    Parsed, PerExpert, Platform, Renormalize, SharedRaw, TopK,
};

option_struct! {
    /// `expert_kernel`'s options: the routing ones and the shared ones.
    struct ExpertRaw {
        #[darling(flatten)]
        shared: SharedRaw,
        /// `num_experts = 8` (required).
        num_experts: Option<Parsed<NumExperts>>,
        /// `top_k = 2`.
        top_k: Option<Parsed<TopK>>,
        /// `capacity_factor = 1.25`.
        capacity_factor: Option<Parsed<CapacityFactor>>,
        /// `renormalize = true`.
        renormalize: Option<Parsed<Renormalize>>,
        /// `per_expert = true`.
        per_expert: Option<Parsed<PerExpert>>,
    }
}

/// Validated `expert_kernel` options.
pub struct ExpertOptions {
    /// How many experts tokens are routed between (at least 1).
    num_experts: u64,
    /// How many experts each token picks (1 to `num_experts`; default 2).
    top_k: u64,
    /// Each expert's capacity over an even share (positive; default 1.25).
    capacity_factor: f64,
    /// Whether the top-k gates are renormalized (default true).
    renormalize: bool,
    /// Whether the body is written for one expert (`[C, d]` and that
    /// expert's weights) and batched over the experts with `vmap`; by
    /// default it takes every expert at once (`[E, C, d]`, stacked weights).
    per_expert: bool,
    /// The companion's options: CPU defaults with `precision` and `name`.
    common: Options,
}

/// Reads and validates `expert_kernel(num_experts = 8, top_k = 2,
/// capacity_factor = 1.25, renormalize = true, per_expert = true, precision =
/// "high", name = "..")`. Every problem is pushed to `errors`; the options that had one
/// are left at their defaults.
pub fn parse(attr: TokenStream, errors: &mut Accumulator) -> ExpertOptions {
    let names = ExpertRaw::names();
    let accepted = Accepted {
        names: &names,
        example: "num_experts = 8",
        hint: |_| None,
    };
    let raw: ExpertRaw = read(attr, &accepted, errors);
    if raw.num_experts.is_none() {
        errors.push(Error::custom("expert_kernel needs `num_experts = N`"));
    }
    let num_experts = take(raw.num_experts, errors).and_then(|n| {
        if n.0 == 0 {
            errors.push(Error::custom("num_experts must be at least 1").with_span(&n.span()));
            None
        } else {
            Some(n.0)
        }
    });
    let top_k = take(raw.top_k, errors).and_then(|k| match (k.0, num_experts) {
        (0, _) => {
            errors.push(Error::custom("top_k must be at least 1").with_span(&k.span()));
            None
        }
        (k_val, Some(n)) if k_val > n => {
            errors.push(
                Error::custom(format!(
                    "top_k = {k_val} exceeds num_experts = {n}: each token picks top_k distinct experts"
                ))
                .with_span(&k.span()),
            );
            None
        }
        (k_val, _) => Some(k_val),
    });
    let capacity_factor = take(raw.capacity_factor, errors).and_then(|c| {
        if c.0 > 0.0 && c.0.is_finite() {
            Some(c.0)
        } else {
            errors.push(
                Error::custom("capacity_factor must be a positive number").with_span(&c.span()),
            );
            None
        }
    });
    let renormalize = take(raw.renormalize, errors).map(|r| r.0);
    let per_expert = take(raw.per_expert, errors).is_some_and(|r| r.0);
    ExpertOptions {
        num_experts: num_experts.unwrap_or(1),
        top_k: top_k.unwrap_or(2),
        capacity_factor: capacity_factor.unwrap_or(1.25),
        renormalize: renormalize.unwrap_or(true),
        per_expert,
        common: validate_shared(raw.shared, Platform::Cpu, errors),
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
    if let Some(a) = sig.params.iter().find_map(|p| p.donate.as_ref()) {
        return Err(Error::custom(
            "an expert kernel does not donate its arguments: `#[donate]` applies to \
             `#[cpu_kernel]`, `#[tpu_kernel]`, `#[gpu_kernel]` and `#[sparse_kernel]` parameters",
        )
        .with_span(a));
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
    let dsl = crate::paths::dsl_here();
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
        #dsl::MoeOptions { num_experts: #e, top_k: #k, capacity_factor: #cf, renormalize: #rn }
    };
    let doc_routed = format!(
        "The routed mixture-of-experts layer around [`{name}`](fn@{name}): {e} experts, top-{k}, capacity factor \
         {cf}. Takes the tokens `[T, d]`, the router weights `[d, {e}]` and each expert parameter stacked over \
         the experts (`[{e}, ..]`); returns (output `[T, d_out]`, load-balancing loss, router z-loss, dropped \
         assignments)."
    );
    let doc_dense =
        format!("[`{routed}`] with dense (einsum) dispatch: the reference implementation.");
    // The body over every expert at once: as written, or (per_expert) the
    // one-expert body batched over the experts' inputs and stacked weights.
    let body = if o.per_expert {
        let nested = rest_ids
            .iter()
            .rev()
            .fold(quote!(()), |acc, w| quote!((#w, #acc)));
        quote! {
            |__xe| #dsl::vmap(|(#x, #nested)| #name(#x, #(#rest_ids),*), (__xe, #nested))
        }
    } else {
        quote!(|__xe| #name(__xe, #(#rest_ids),*))
    };
    let layer = |f: &syn::Ident, which: TokenStream, doc: &str| {
        quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            #[track_caller]
            #vis fn #f(#x: #x_ty, router: #dsl::Tensor, #(#rest_ids: #rest_tys),*)
                -> (#dsl::Tensor, #dsl::Tensor, #dsl::Tensor, #dsl::Tensor)
            {
                let __o = #opts;
                let __r = #dsl::#which(#x, router, &__o, #body);
                (__r.output, __r.aux_loss, __r.z_loss, __r.dropped)
            }
        }
    };
    let routed_fn = layer(&routed, quote!(grouped_layer), &doc_routed);
    let dense_fn = layer(&dense, quote!(dense_dispatch_layer), &doc_dense);
    let mut params = vec![Param {
        ident: x.clone(),
        ty: x_ty.clone(),
        donate: None,
    }];
    params.push(Param {
        ident: syn::Ident::new("router", Span::call_site()),
        ty: syn::parse_quote!(#dsl::Tensor),
        donate: None,
    });
    params.extend(rest.iter().map(|p| Param {
        ident: p.ident.clone(),
        ty: p.ty.clone(),
        donate: None,
    }));
    let layer_sig = KernelSig {
        params,
        ret: syn::parse_quote!((
            #dsl::Tensor,
            #dsl::Tensor,
            #dsl::Tensor,
            #dsl::Tensor
        )),
    };
    let companion = crate::companion::companion(vis, name, &routed, &o.common, &layer_sig);
    quote! {
        #func

        #routed_fn

        #dense_fn

        #companion
    }
}
