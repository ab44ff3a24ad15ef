//! The companion's runs: `run`, `call` and `profile` (and their `*_with`
//! forms under another config).

use proc_macro2::TokenStream;
use quote::quote;

use super::Parts;

/// `run_with`, `call_with`, `profile_with`, and `run`, `call`, `profile` with the attribute's config.
pub(super) fn runs(p: &Parts) -> TokenStream {
    let Parts {
        dsl,
        ps,
        tys,
        ret,
        kp,
        ko,
        cfg_ty,
        dev_ty,
        body_host,
        collect_host,
        collect_buffer,
        check_cfg,
        collect_first,
        tune_host,
        tune_buffer,
        ..
    } = p;
    quote! {
        /// Runs the kernel on host tensors under `config` (traced and compiled
        /// once per argument specs, static arguments and config, then cached;
        /// with `config.autotune`, tunable arguments are chosen by measurement first).
        #[inline]
        #[track_caller]
        pub fn run_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Host>
        {
            // The arguments are collected here only for the argument
            // check and autotuning; `__run_host` collects its own.
            let mut __c = #dsl::ArgCollector::default();
            if #collect_first {
                #collect_host
            }
            #check_cfg
            #tune_host
            Self::__run_host(config, device, #(#ps),*)
        }

        /// Runs the kernel on device buffers under `config`, leaving the results on the device.
        #[inline]
        #[track_caller]
        pub fn call_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Buffer>
        {
            // Collected here only for autotuning; `__call_buffers`
            // collects its own.
            let mut __c = #dsl::ArgCollector::default();
            if config.autotune {
                #collect_buffer
            }
            #tune_buffer
            Self::__call_buffers(config, device, #(#ps),*)
        }

        /// Profiles the kernel on host tensors under `config`: trace, compile
        /// and run times, FLOPs, bytes, throughput and compiled memory.
        #[inline]
        #[track_caller]
        pub fn profile_with(config: &#cfg_ty, device: &#dev_ty, options: #dsl::ProfileOptions, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<#dsl::Profile>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            #check_cfg
            #tune_host
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            let mut __p = Self::__kernel(config, &mut __c, #body_host).profile(device, &__c.hosts, options)?;
            __p.tuned = __tuned;
            ::core::result::Result::Ok(__p)
        }

        /// Profiles the kernel on host tensors with [`Self::CONFIG`].
        #[inline]
        #[track_caller]
        pub fn profile(device: &#dev_ty, options: #dsl::ProfileOptions, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<#dsl::Profile>
        {
            Self::profile_with(&Self::CONFIG, device, options, #(#ps),*)
        }

        /// Runs the kernel on host tensors with [`Self::CONFIG`].
        #[inline]
        #[track_caller]
        pub fn run(device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*) -> #dsl::Result<<#ret as #ko>::Host> {
            Self::run_with(&Self::CONFIG, device, #(#ps),*)
        }

        /// Runs the kernel on device buffers with [`Self::CONFIG`].
        #[inline]
        #[track_caller]
        pub fn call(device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*) -> #dsl::Result<<#ret as #ko>::Buffer> {
            Self::call_with(&Self::CONFIG, device, #(#ps),*)
        }
    }
}
