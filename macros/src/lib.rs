//! tessel's attribute macros.
//!
//! `#[tpu_kernel]`, `#[gpu_kernel]` and `#[cpu_kernel]` keep the annotated
//! function (so it stays callable, and is inlined, inside other kernels) and
//! generate a companion of the same name (a struct, in the type namespace)
//! with `run`, `call`, `lower`, `compile`, their `*_with(config, ..)` forms
//! and `CONFIG`. Each entry point is thin: options
//! are parsed in `options`, the function is checked in `analyze`, the
//! companion is written in `companion`. Errors are accumulated and emitted
//! as `compile_error!`s at the offending spans, together with the original
//! item and, when only options were wrong, the companion (built with those
//! options left at their defaults), so one typo does not cascade into every
//! `name::run(..)` call.
#![forbid(unsafe_code)]

mod analyze;
mod companion;
mod expert;
mod ffi;
mod options;
mod paths;
mod rewrite;
mod scope;
mod suggest;
mod tree;
mod tune;

use darling::error::Accumulator;
use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;

use options::Attribute;

/// Marks a Rust function over `Tensor`s as a TPU kernel (defaults: block
/// size 128, bf16 matmul inputs with f32 accumulation).
///
/// Options: `precision = "default" | "high" | "highest"`, `block_size = N`,
/// `dtype = "bf16" | "f16" | "f32" | ...`, `use_bfloat16 = bool`,
/// `accumulate = bool`, `auto_pad = bool`, `donate(param, ...)`,
/// `name = "..."`, `check_args = path` (a function
/// `fn(&KernelConfig, &[&HostTensor]) -> Result<()>` that `run`,
/// `profile`, `value_and_grad` and `run_sharded` call on the
/// configuration and the tensor arguments, in order, before tracing or
/// running: for checks of values that the device could not report, such
/// as indices).
///
/// A parameter written `#[donate] state: TrainState` is donated (as with
/// `donate(state)`): every buffer of it may be reused for a result of the
/// same type, and using it after `call` is an error naming its path.
#[proc_macro_attribute]
pub fn tpu_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Attribute::Tpu, attr.into(), item.into()).into()
}

/// Marks a Rust function over `Tensor`s as a GPU kernel (defaults: block
/// size 64, f16 matmul inputs with f32 accumulation). Options as for
/// `tpu_kernel`.
#[proc_macro_attribute]
pub fn gpu_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Attribute::Gpu, attr.into(), item.into()).into()
}

/// Marks a Rust function over `Tensor`s as a CPU kernel (defaults: no
/// tiling, full precision). Options as for `tpu_kernel`.
#[proc_macro_attribute]
pub fn cpu_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Attribute::Cpu, attr.into(), item.into()).into()
}

/// Marks a Rust function as a block-sparse kernel: its parameters may be
/// `BlockSparse` matrices (static or dynamic layouts), and the body loops
/// over their stored blocks. Needs `block_size = N`; `platform = "tpu" |
/// "gpu" | "cpu"` (default cpu) picks the platform defaults; the other
/// options are those of `tpu_kernel`.
#[proc_macro_attribute]
pub fn sparse_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(Attribute::Sparse, attr.into(), item.into()).into()
}

/// Marks one expert's computation (tokens first, then that expert's
/// parameters) and generates the routed mixture-of-experts layer around it:
/// `name_moe(tokens, router, stacked params..)` (grouped, megablox style),
/// `name_moe_dense(..)` (dense einsum dispatch, the reference) and the
/// companion `name::run(&dev, ..)` for the routed layer. Options:
/// `num_experts = N` (required), `top_k = K` (default 2),
/// `capacity_factor = F` (default 1.25), `renormalize = bool` (default
/// true), `per_expert = bool` (default false: the body takes every expert
/// at once, `[E, C, d]` and the stacked weights; true: it is written for one
/// expert, `[C, d]` and that expert's weights, and batched with `vmap`),
/// `precision`, `name`.
#[proc_macro_attribute]
pub fn expert_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    pipeline(
        "expert_kernel applies to functions",
        attr.into(),
        item.into(),
        expert::parse,
        |func| {
            let sig = analyze::analyze(func)?;
            expert::check(&sig, func)?;
            Ok(sig)
        },
        |_, _, _| {},
        expert::generate,
    )
    .into()
}

/// The kernel attributes: options, then the function, then the companion.
fn expand(attribute: Attribute, attr: TokenStream2, item: TokenStream2) -> TokenStream2 {
    pipeline(
        "kernel attributes apply to functions",
        attr,
        item,
        |a, errors| options::parse(attribute, a, errors),
        analyze::analyze,
        options::check_donate,
        companion::generate,
    )
}

/// parse options and the function -> analyze -> check the options against
/// the signature -> rewrite the body -> generate. Every error found on the
/// way is emitted. Options that fail are left at their defaults and a body
/// with errors is replaced by one that diverges ([`stub_body`]), so the
/// companion is still generated when the signature is a kernel's (and
/// calls to it type-check); otherwise only the function is.
fn pipeline<O>(
    not_a_function: &str,
    attr: TokenStream2,
    item: TokenStream2,
    parse: impl FnOnce(TokenStream2, &mut Accumulator) -> O,
    analyze: impl FnOnce(&syn::ItemFn) -> darling::Result<analyze::KernelSig>,
    check: impl FnOnce(&mut O, &analyze::KernelSig, &mut Accumulator),
    generate: impl FnOnce(&syn::ItemFn, &O, &analyze::KernelSig) -> TokenStream2,
) -> TokenStream2 {
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let msg =
                syn::Error::new(e.span(), format!("{not_a_function}: {e}")).to_compile_error();
            return quote! { #msg #item };
        }
    };
    let mut errors = darling::Error::accumulator();
    let mut opts = parse(attr, &mut errors);
    let sig = errors.handle(analyze(&func));
    if let Some(sig) = &sig {
        check(&mut opts, sig, &mut errors);
    }
    let mut body = func.block.clone();
    let mut rw = rewrite::Rewriter { errors: Vec::new() };
    rw.rewrite_body(&mut body);
    let body_ok = rw.errors.is_empty();
    for e in rw.errors {
        errors.push(e.into());
    }
    let errs = errors.finish().err().map(darling::Error::write_errors);
    let mut out = func.clone();
    analyze::strip_param_attrs(&mut out);
    if !body_ok {
        stub_body(&mut out);
    } else if sig.is_some() {
        out.block = body;
    }
    let out = match sig {
        Some(sig) => generate(&out, &opts, &sig),
        // The signature is not a kernel's: the function as written.
        None => quote! { #out },
    };
    quote! { #errs #out }
}

/// Gives `func`, whose body the macro reported errors in, a body that only
/// diverges. Its signature stays, so calls to it (and to its companion)
/// still type-check, and the errors above are the only ones: the written
/// body is not Rust without the rewrite (`if` on a tensor, a traced loop),
/// and a half-rewritten one fails in other ways (a `break` moved into the
/// loop's closure). The crate does not build, so the body never runs.
fn stub_body(func: &mut syn::ItemFn) {
    func.attrs
        .push(syn::parse_quote!(#[allow(unused_variables, unreachable_code)]));
    *func.block = syn::parse_quote!({ ::core::unreachable!("the kernel body did not compile") });
}

/// Makes a Rust function over typed buffers a native function kernels can
/// call (`tessel::ffi`): parameters are `FfiBuffer<T>` arguments, or static
/// attributes marked `#[attr]` (f64, f32, i64, i32, usize, bool, String);
/// it returns `Result<FfiBuffer<T>, String>` or a tuple of buffers in the
/// `Ok`. The function is kept; its companion `name::register()` registers
/// it and `name::call(buffers.., attrs.., &result_specs)` calls it from
/// traced code.
#[proc_macro_attribute]
pub fn ffi_function(attr: TokenStream, item: TokenStream) -> TokenStream {
    ffi::expand(attr.into(), item.into()).into()
}

/// Makes a struct or enum generic over its leaf type a tree of tensors
/// (JAX's pytrees): `#[derive(Tree)] struct Params<T = Tensor> { embed: T,
/// layers: Vec<Layer<T>>, heads: usize }`. The same type then holds traced
/// `Tensor`s inside a kernel (it can be a kernel parameter or result, a
/// loop carry, a `grad` argument), `DeviceBuffer`s between calls,
/// `HostTensor`s on the host and `TensorSpec`s to compile. Leaves are named
/// by their paths (`layers.3.wq`).
///
/// A field whose type mentions the leaf parameter is a subtree: its type
/// with the parameter as `Tensor` must be a tree (`Tensor`, a `Vec`, array,
/// `Option` or tuple of trees, or another derived type). Any other field is
/// static: a `StaticArg` that enters the compile key and is cloned into
/// the traced and returned values.
#[proc_macro_derive(Tree)]
pub fn derive_tree(item: TokenStream) -> TokenStream {
    tree::derive(item.into()).into()
}
