//! The companion's programs without running them: `lower`, `compile`,
//! `compile_for` and `compile_for_host`.

use proc_macro2::TokenStream;
use quote::quote;

use super::Parts;

/// `lower_with`, `compile_with`, and `lower`, `compile`, `compile_for`, `compile_for_host` with the attribute's config.
pub(super) fn programs(p: &Parts) -> TokenStream {
    let Parts {
        dsl,
        ps,
        tys,
        kp,
        cfg_ty,
        dev_ty,
        body_host,
        body_spec,
        body_buf,
        collect_host,
        collect_spec,
        collect_buffer,
        ..
    } = p;
    quote! {
        /// The kernel's StableHLO text for arguments of these specs, under `config`.
        #[inline]
        #[track_caller]
        pub fn lower_with(config: &#cfg_ty, #(#ps: <#tys as #kp>::Spec<'_>),*) -> #dsl::Result<::std::string::String> {
            let mut __c = #dsl::ArgCollector::default();
            #collect_spec
            Self::__kernel(config, &mut __c, #body_spec).lower(&__c.specs)
        }

        /// Compiles (or fetches from the device's cache) the kernel for these specs, under `config`.
        #[inline]
        #[track_caller]
        pub fn compile_with(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Spec<'_>),*)
            -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_spec
            Self::__kernel(config, &mut __c, #body_spec).compile(device, &__c.specs)
        }

        /// The kernel's StableHLO text with [`Self::CONFIG`].
        #[inline]
        #[track_caller]
        pub fn lower(#(#ps: <#tys as #kp>::Spec<'_>),*) -> #dsl::Result<::std::string::String> {
            Self::lower_with(&Self::CONFIG, #(#ps),*)
        }

        /// Compiles the kernel with [`Self::CONFIG`].
        #[inline]
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
        #[inline]
        #[track_caller]
        pub fn compile_for(device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
            -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_buffer
            Self::__kernel(&Self::CONFIG, &mut __c, #body_buf).compile(device, &__c.specs)
        }

        /// [`compile_for`](Self::compile_for) from host tensors, the
        /// forms `run` takes: only their specs are read.
        #[inline]
        #[track_caller]
        pub fn compile_for_host(device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<::std::sync::Arc<#dsl::Executable>>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            Self::__kernel(&Self::CONFIG, &mut __c, #body_host).compile(device, &__c.specs)
        }
    }
}
