//! `#[ffi_function]`: a Rust function over typed buffers and attributes
//! becomes a native function kernels call (`tessel::ffi`). Parse (the
//! function, each parameter a buffer or an `#[attr]`) → check (the form of
//! the function, names) → generate: the function as written, and a
//! companion with `NAME`, `register()` and `call(..)`. Types are checked by
//! traits (`FfiArg`, `FfiAttrValue`, `FfiResults`), whose errors point at
//! the user's types.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::paths::{dsl, dsl_here};

/// One parameter: its name, its type and whether it is an attribute.
struct FfiParam {
    ident: syn::Ident,
    ty: syn::Type,
    attr: bool,
}

/// The expansion of `#[ffi_function]` on `item`, or its errors followed by
/// the item as written.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let m = syn::Error::new(e.span(), format!("ffi_function applies to functions: {e}"));
            let m = m.to_compile_error();
            return quote!(#m #item);
        }
    };
    let mut errors: Vec<syn::Error> = Vec::new();
    if !attr.is_empty() {
        errors.push(syn::Error::new(
            attr.span(),
            "ffi_function takes no options: `#[ffi_function]`",
        ));
    }
    let params = analyze(&mut func, &mut errors);
    if !errors.is_empty() {
        // The errors, and the function as written without its `#[attr]`
        // markers (which only this macro reads).
        let errs = errors.iter().map(syn::Error::to_compile_error);
        return quote!(#(#errs)* #func);
    }
    generate(&func, &params)
}

/// Checks the function's form and reads its parameters, removing the
/// `#[attr]` markers from them.
fn analyze(func: &mut syn::ItemFn, errors: &mut Vec<syn::Error>) -> Vec<FfiParam> {
    let sig = &func.sig;
    let form = [
        (
            sig.asyncness.map(|t| t.span()),
            "a native function cannot be async",
        ),
        (
            sig.constness.map(|t| t.span()),
            "a native function cannot be const",
        ),
        (
            sig.unsafety.map(|t| t.span()),
            "a native function cannot be unsafe",
        ),
        (
            sig.variadic.as_ref().map(|v| v.span()),
            "a native function cannot be variadic",
        ),
    ];
    for (span, m) in form {
        if let Some(s) = span {
            errors.push(syn::Error::new(s, m));
        }
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new(
            sig.generics.span(),
            "a native function cannot be generic: its buffers' element types are part of its registration",
        ));
    }
    if matches!(sig.output, syn::ReturnType::Default) {
        errors.push(syn::Error::new(
            sig.ident.span(),
            "a native function returns `Result<FfiBuffer<T>, String>` (or a tuple of buffers in the Ok)",
        ));
    }
    let mut params = Vec::new();
    for input in func.sig.inputs.iter_mut() {
        let syn::FnArg::Typed(pt) = input else {
            errors.push(syn::Error::new(
                input.span(),
                "a native function takes no `self`",
            ));
            continue;
        };
        let mut attr = false;
        let mut kept = Vec::new();
        for a in pt.attrs.drain(..) {
            if a.path().is_ident("attr") {
                if !matches!(a.meta, syn::Meta::Path(_)) {
                    errors.push(syn::Error::new(a.span(), "`#[attr]` takes no arguments"));
                }
                attr = true;
            } else {
                kept.push(a);
            }
        }
        pt.attrs = kept;
        let syn::Pat::Ident(pi) = &*pt.pat else {
            errors.push(syn::Error::new(
                pt.pat.span(),
                "each parameter of a native function is a plain name",
            ));
            continue;
        };
        let ident = pi.ident.clone();
        if attr && ident == "tessel_fn" {
            errors.push(syn::Error::new(
                ident.span(),
                "`tessel_fn` names the function itself; rename this attribute",
            ));
        }
        params.push(FfiParam {
            ident,
            ty: (*pt.ty).clone(),
            attr,
        });
    }
    params
}

fn generate(func: &syn::ItemFn, params: &[FfiParam]) -> TokenStream {
    let d = dsl_here();
    let vis = &func.vis;
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let ret = match &func.sig.output {
        syn::ReturnType::Type(_, t) => (**t).clone(),
        syn::ReturnType::Default => syn::parse_quote!(()),
    };
    let mut buffer_at = 0usize;
    let reads = params.iter().map(|p| {
        let (ident, ty) = (&p.ident, &p.ty);
        let ds = dsl(ty.span());
        if p.attr {
            let key = ident.to_string();
            quote_spanned!(ty.span()=> let #ident = #ds::ffi_attr_of::<#ty>(__call, #key)?;)
        } else {
            let i = buffer_at;
            buffer_at += 1;
            quote_spanned!(ty.span()=> let #ident = #ds::ffi_arg::<#ty>(Self::NAME, __call, #i)?;)
        }
    });
    let idents: Vec<&syn::Ident> = params.iter().map(|p| &p.ident).collect();
    let call_params = params.iter().map(|p| {
        let (ident, ty) = (&p.ident, &p.ty);
        match p.attr {
            true => quote!(#ident: #ty),
            false => quote!(#ident: #d::Tensor),
        }
    });
    let buffers = params.iter().filter(|p| !p.attr).map(|p| &p.ident);
    let attrs = params.iter().filter(|p| p.attr).map(|p| {
        let (ident, key, ty) = (&p.ident, p.ident.to_string(), &p.ty);
        let ds = dsl(ty.span());
        quote_spanned!(ty.span()=> (#key, <#ty as #ds::FfiAttrValue>::to_attr(&#ident)))
    });
    let ds_ret = dsl(ret.span());
    let results = quote_spanned!(ret.span()=> {
        let __r: ::core::result::Result<_, ::std::string::String> = #name(#(#idents),*);
        #ds_ret::FfiResults::into_results(__r?)
    });
    let doc = format!(
        "Companion of the native function [`{name_str}`](fn@{name_str}): `register()` makes it callable \
         from kernels, `call(..)` calls it from traced code (registering it first if needed)."
    );
    let module = format_ident!("{}", name, span = Span::call_site());
    quote! {
        #func

        #[doc = #doc]
        #[allow(non_camel_case_types)]
        #vis struct #module {}

        #[allow(dead_code, clippy::too_many_arguments)]
        impl #module {
            /// The name it is registered under.
            pub const NAME: &'static str = ::core::concat!(::core::module_path!(), "::", #name_str);

            /// Registers it (replacing a function registered under [`Self::NAME`]).
            pub fn register() {
                #d::ffi_register(Self::NAME, |__call: &#d::FfiCall<'_>| {
                    #(#reads)*
                    #results
                });
            }

            /// Calls it on the buffer arguments with the attributes given,
            /// its results of the types `results`.
            #[track_caller]
            pub fn call(#(#call_params,)* results: &[#d::TensorSpec]) -> ::std::vec::Vec<#d::Tensor> {
                if #d::ffi_function(Self::NAME).is_none() {
                    Self::register();
                }
                #d::ffi_call_with(Self::NAME, &[#(#buffers),*], results, &[#(#attrs),*])
            }
        }
    }
}
