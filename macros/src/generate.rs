//! Writes the companion module: `CONFIG`, `with_config`, `run`, `call`,
//! `lower`, `compile`, all typed from the kernel's signature.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

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

/// The companion struct `name` whose functions trace `callee` (a function
/// with the signature `sig`).
pub fn companion(
    vis: &syn::Visibility,
    name: &syn::Ident,
    callee: &syn::Ident,
    opts: &Options,
    sig: &KernelSig,
) -> TokenStream {
    let dsl = dsl_here();
    let name_str = name.to_string();
    let config = config_expr(opts);
    let ps: Vec<_> = sig.params.iter().map(|p| &p.ident).collect();
    let ps_str: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
    let tys: Vec<_> = sig.params.iter().map(|p| &p.ty).collect();
    let ret = &sig.ret;
    let kp = quote!(#dsl::KernelParam);
    let ko = quote!(#dsl::KernelOutput);
    let cfg_ty = quote!(#dsl::KernelConfig);
    let dev_ty = quote!(#dsl::Device);
    let doc = format!(
        "Companion of the kernel [`{name_str}`](fn@{name_str}): `run` (host tensors in and out), \
         `call` (device buffers), `lower` (StableHLO text), `compile`, `profile` and `CONFIG`; the `*_with` \
         forms take a [`KernelConfig`](#dsl::KernelConfig) that overrides the attribute's."
    );
    let body = |bind: TokenStream| {
        quote! {
            move |__t: &[#dsl::Tensor]| {
                let mut __it = __t.iter().copied();
                #( let #ps = <#tys as #kp>::#bind(&#ps, &mut __it); )*
                #callee(#(#ps),*)
            }
        }
    };
    // The `check_args` function, called on the host arguments under `cfg`.
    let check = |cfg: TokenStream| {
        opts.check_args.as_ref().map(|path| {
            let f = quote::quote_spanned!(syn::spanned::Spanned::span(path)=> #path);
            quote!(#f(#cfg, &__c.hosts)?;)
        })
    };
    let check_cfg = check(quote!(config));
    // Whether `run_with` needs the host arguments before running (for
    // `check_args` or autotuning).
    let collect_first = if opts.check_args.is_some() {
        quote!(true)
    } else {
        quote!(config.autotune)
    };
    let check_const = check(quote!(&Self::CONFIG));
    let body_host = body(quote!(bind_host));
    let body_spec = body(quote!(bind_spec));
    let body_buf = body(quote!(bind_buffer));
    let body_sharded = body(quote!(bind_sharded));
    let tune_host = rebind_tuned(Form::Host, &name_str, &ps, &tys);
    let tune_buffer = rebind_tuned(Form::Buffer, &name_str, &ps, &tys);
    quote! {
        #[doc = #doc]
        #[allow(non_camel_case_types)]
        #vis struct #name {}

        #[allow(clippy::too_many_arguments, dead_code)]
        impl #name {
            /// The configuration given by the kernel's attribute.
            pub const CONFIG: #cfg_ty = #config;

            fn __kernel<F, O>(config: &#cfg_ty, c: &mut #dsl::ArgCollector<'_>, f: F) -> #dsl::Kernel<F>
            where
                F: Fn(&[#dsl::Tensor]) -> O,
                O: #dsl::Outputs,
            {
                #dsl::Kernel::new(#name_str, f)
                    .param_names(::core::mem::take(&mut c.names))
                    .config(*config)
                    .statics(::core::mem::take(&mut c.statics))
                    .cache_key(::core::concat!(::core::module_path!(), "::", #name_str))
            }

            /// Runs the kernel once on host tensors under `config`, as given.
            #[track_caller]
            fn __run_host(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Host>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(config, &mut __c, #body_host).run_collected(device, &mut __c)
            }

            /// Runs the kernel once on device buffers under `config`, as given.
            #[track_caller]
            fn __call_buffers(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Buffer>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_buffer(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(config, &mut __c, #body_buf).call_collected(device, &mut __c)
            }

            /// Runs the kernel once for autotuning on host tensors (copied to the
            /// device once, into `uploads`), waiting for the results.
            #[track_caller]
            fn __tune_host(
                config: &#cfg_ty,
                device: &#dev_ty,
                uploads: &mut #dsl::AutotuneUploads,
                #(#ps: <#tys as #kp>::Host<'_>),*
            ) -> #dsl::Result<()> {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                #dsl::autotune_run_host(&Self::__kernel(config, &mut __c, #body_host), device, &__c.hosts, uploads)
            }

            /// Runs the kernel once for autotuning on device buffers, waiting for
            /// the results.
            #[track_caller]
            fn __tune_buffers(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
                -> #dsl::Result<()>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_buffer(&#ps, #ps_str, &mut __c); )*
                #dsl::autotune_call(&Self::__kernel(config, &mut __c, #body_buf), device, &__c.buffers)
            }

            /// Runs the kernel on host tensors under `config` (traced and compiled
            /// once per argument specs, static arguments and config, then cached;
            /// with `config.autotune`, tunable arguments are chosen by measurement first).
            #[track_caller]
            pub fn run_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Host>
            {
                // The arguments are collected here only for the argument
                // check and autotuning; `__run_host` collects its own.
                let mut __c = #dsl::ArgCollector::default();
                if #collect_first {
                    #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                }
                #check_cfg
                #tune_host
                Self::__run_host(config, device, #(#ps),*)
            }

            /// Runs the kernel on device buffers under `config`, leaving the results on the device.
            #[track_caller]
            pub fn call_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Buffer>
            {
                // Collected here only for autotuning; `__call_buffers`
                // collects its own.
                let mut __c = #dsl::ArgCollector::default();
                if config.autotune {
                    #( <#tys as #kp>::collect_buffer(&#ps, #ps_str, &mut __c); )*
                }
                #tune_buffer
                Self::__call_buffers(config, device, #(#ps),*)
            }

            /// The kernel's StableHLO text for arguments of these specs, under `config`.
            #[track_caller]
            pub fn lower_with(config: &#cfg_ty, #(#ps: <#tys as #kp>::Spec<'_>),*) -> #dsl::Result<::std::string::String> {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_spec(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(config, &mut __c, #body_spec).lower(&__c.specs)
            }

            /// Compiles (or fetches from the device's cache) the kernel for these specs, under `config`.
            #[track_caller]
            pub fn compile_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Spec<'_>),*)
                -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_spec(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(config, &mut __c, #body_spec).compile(device, &__c.specs)
            }

            /// Profiles the kernel on host tensors under `config`: trace, compile
            /// and run times, FLOPs, bytes, throughput and compiled memory.
            #[track_caller]
            pub fn profile_with(config: &#cfg_ty, device: &#dev_ty, options: #dsl::ProfileOptions, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<#dsl::Profile>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                #check_cfg
                #tune_host
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                let mut __p = Self::__kernel(config, &mut __c, #body_host).profile(device, &__c.hosts, options)?;
                __p.tuned = __tuned;
                ::core::result::Result::Ok(__p)
            }

            /// Profiles the kernel on host tensors with [`Self::CONFIG`].
            #[track_caller]
            pub fn profile(device: &#dev_ty, options: #dsl::ProfileOptions, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<#dsl::Profile>
            {
                Self::profile_with(&Self::CONFIG, device, options, #(#ps),*)
            }

            /// Runs the kernel on host tensors with [`Self::CONFIG`].
            #[track_caller]
            pub fn run(device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*) -> #dsl::Result<<#ret as #ko>::Host> {
                Self::run_with(&Self::CONFIG, device, #(#ps),*)
            }

            /// Runs the kernel with [`Self::CONFIG`] as one SPMD program over
            /// `mesh`, its tensor arguments and results laid out as `shardings`
            /// says (see [`tessel::shard`](::tessel::shard)); the results come back whole.
            #[track_caller]
            pub fn run_sharded(mesh: &#dsl::Mesh, shardings: &#dsl::Shardings, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Host>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                #check_const
                let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_host);
                let __outs = __k.run_sharded(mesh, shardings, &__c.hosts)?;
                <#ret as #ko>::from_host(__outs, __k.output_tree().as_deref())
            }

            /// Runs the kernel with [`Self::CONFIG`] once per device of `mesh`,
            /// each on its own block of the arguments (`shard_map`): the body
            /// sees one device's blocks and combines them with collectives over
            /// named mesh axes (`psum`, `all_gather`, `ppermute`, ...); the
            /// results' blocks are assembled as `shardings.outputs` says (see
            /// [`tessel::ops::collective`](::tessel::ops::collective)).
            #[track_caller]
            pub fn run_shard_map(mesh: &#dsl::Mesh, shardings: &#dsl::Shardings, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Host>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                #check_const
                let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_host);
                let __outs = __k.run_shard_map(mesh, shardings, &__c.hosts)?;
                <#ret as #ko>::from_host(__outs, __k.output_tree().as_deref())
            }

            /// Runs the kernel with [`Self::CONFIG`] as one SPMD program over
            /// `mesh` on sharded device buffers (their partition specs are the
            /// input shardings), leaving the results on the devices laid out as
            /// `outputs` says (none given: replicated).
            #[track_caller]
            pub fn call_sharded(mesh: &#dsl::Mesh, outputs: &[#dsl::PartitionSpec], #(#ps: <#tys as #kp>::Sharded<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Sharded>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_sharded(&#ps, #ps_str, &mut __c); )*
                let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_sharded);
                let __outs = __k.call_sharded(mesh, outputs, &__c.sharded)?;
                <#ret as #ko>::from_sharded(__outs, __k.output_tree().as_deref())
            }

            /// [`run_shard_map`](Self::run_shard_map) on sharded device buffers
            /// (their partition specs say how they are split), leaving the
            /// results on the devices laid out as `outputs` says (none given:
            /// replicated).
            #[track_caller]
            pub fn call_shard_map(mesh: &#dsl::Mesh, outputs: &[#dsl::PartitionSpec], #(#ps: <#tys as #kp>::Sharded<'_>),*)
                -> #dsl::Result<<#ret as #ko>::Sharded>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_sharded(&#ps, #ps_str, &mut __c); )*
                let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_sharded);
                let __outs = __k.call_shard_map(mesh, outputs, &__c.sharded)?;
                <#ret as #ko>::from_sharded(__outs, __k.output_tree().as_deref())
            }

            /// Runs the kernel on device buffers with [`Self::CONFIG`].
            #[track_caller]
            pub fn call(device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*) -> #dsl::Result<<#ret as #ko>::Buffer> {
                Self::call_with(&Self::CONFIG, device, #(#ps),*)
            }

            /// The kernel's StableHLO text with [`Self::CONFIG`].
            #[track_caller]
            pub fn lower(#(#ps: <#tys as #kp>::Spec<'_>),*) -> #dsl::Result<::std::string::String> {
                Self::lower_with(&Self::CONFIG, #(#ps),*)
            }

            /// Compiles the kernel with [`Self::CONFIG`].
            #[track_caller]
            pub fn compile(device: &#dev_ty, #(#ps: <#tys as #kp>::Spec<'_>),*)
                -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
            {
                Self::compile_with(&Self::CONFIG, device, #(#ps),*)
            }

            /// Compiles (or fetches from the device's cache) the kernel with
            /// [`Self::CONFIG`] for arguments like these device buffers, the
            /// forms `call` takes, their specs derived: a `call` with
            /// buffers of the same specs (and the same static arguments)
            /// runs this program.
            #[track_caller]
            pub fn compile_for(device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
                -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_buffer(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(&Self::CONFIG, &mut __c, #body_buf).compile(device, &__c.specs)
            }

            /// [`compile_for`](Self::compile_for) from host tensors, the
            /// forms `run` takes: only their specs are read.
            #[track_caller]
            pub fn compile_for_host(device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                Self::__kernel(&Self::CONFIG, &mut __c, #body_host).compile(device, &__c.specs)
            }

            /// Runs the kernel (which must return one scalar loss) and its
            /// gradient with respect to the tensor parameters named in `wrt`,
            /// under `config`: returns the loss and one gradient per name, in
            /// the order of `wrt`. A name that is not a tensor parameter is a
            /// kernel error. Compiled once per `wrt`, specs, statics and config.
            #[track_caller]
            pub fn value_and_grad_with(config: &#cfg_ty, device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
            {
                let mut __c = #dsl::ArgCollector::default();
                #( <#tys as #kp>::collect_host(&#ps, #ps_str, &mut __c); )*
                #check_cfg
                let __wrt: ::std::vec::Vec<::std::string::String> = wrt.iter().map(|w| w.to_string()).collect();
                let __key = ::std::format!("{}::{}::value_and_grad[{}]", ::core::module_path!(), #name_str, wrt.join(","));
                let __w = __wrt.clone();
                let __body = move |__t: &[#dsl::Tensor]| {
                    let mut __it = __t.iter().copied();
                    #( let #ps = <#tys as #kp>::bind_host(&#ps, &mut __it); )*
                    let mut __names: ::std::vec::Vec<&'static str> = ::std::vec::Vec::new();
                    let mut __primals: ::std::vec::Vec<#dsl::Tensor> = ::std::vec::Vec::new();
                    #(
                        if __w.iter().any(|w| w == #ps_str) {
                            if let ::core::option::Option::Some(t) = <#tys as #kp>::primal(&#ps) {
                                __names.push(#ps_str);
                                __primals.push(t);
                            }
                        }
                    )*
                    for w in &__w {
                        if !__names.contains(&w.as_str()) {
                            let __m = ::std::format!("`{}` is not a tensor parameter of `{}` (parameters: {})", w, #name_str, [#(#ps_str),*].join(", "));
                            return ::std::vec![#dsl::trace_error("value_and_grad", &__primals, __m)];
                        }
                    }
                    let __flags: ::std::vec::Vec<bool> = [#(#ps_str),*].iter().map(|p| __names.contains(p)).collect();
                    let (__v, __g) = #dsl::value_and_grad(
                        move |__x: ::std::vec::Vec<#dsl::Tensor>| {
                            let mut __xi = __x.into_iter();
                            let mut __f = __flags.iter().copied();
                            #( let #ps = <#tys as #kp>::substitute(#ps, __f.next().unwrap_or(false), &mut __xi); )*
                            #dsl::single_output(#name_str, #callee(#(#ps),*))
                        },
                        __primals,
                    );
                    let mut __out = ::std::vec![__v];
                    for w in &__w {
                        if let ::core::option::Option::Some(i) = __names.iter().position(|n| n == w) {
                            __out.push(__g[i]);
                        }
                    }
                    __out
                };
                let mut __outs = #dsl::Kernel::new(::std::format!("{}_value_and_grad", #name_str), __body)
                    .param_names(__c.names.clone())
                    .config(*config)
                    .statics(__c.statics.clone())
                    .cache_key(__key)
                    .run(device, &__c.hosts)?
                    .into_iter();
                let __v = __outs.next().ok_or_else(|| #dsl::Error::from(#dsl::DeviceError::NoResult { call: "value_and_grad", what: "loss" }))?;
                ::core::result::Result::Ok((__v, __outs.collect()))
            }

            /// [`Self::value_and_grad_with`] with [`Self::CONFIG`].
            #[track_caller]
            pub fn value_and_grad(device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
                -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
            {
                Self::value_and_grad_with(&Self::CONFIG, device, wrt, #(#ps),*)
            }
        }
    }
}
