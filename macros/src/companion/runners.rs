//! The companion's private runners, which every public entry point goes
//! through: the `Kernel` built from the collected arguments, one run on host
//! tensors or device buffers, and one autotuning run of each.

use proc_macro2::TokenStream;
use quote::quote;

use super::Parts;

/// `__kernel`, `__run_host`, `__call_buffers`, `__tune_host`, `__tune_buffers`.
/// A run or call first collects its arguments without their names and
/// tries the cache; only on a miss are they collected again, named, to trace.
pub(super) fn runners(p: &Parts) -> TokenStream {
    let Parts {
        dsl,
        name_str,
        ps,
        tys,
        ret,
        kp,
        ko,
        cfg_ty,
        dev_ty,
        body_host,
        body_buf,
        collect_host,
        collect_buffer,
        ..
    } = p;
    quote! {
        #[inline]
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
        #[inline]
        #[track_caller]
        fn __run_host(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Host>
        {
            let mut __c = #dsl::ArgCollector::unnamed();
            #collect_host
            if let ::core::option::Option::Some(out) =
                Self::__kernel(config, &mut __c, #body_host).run_cached(device, &mut __c)?
            {
                return ::core::result::Result::Ok(out);
            }
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            Self::__kernel(config, &mut __c, #body_host).run_collected(device, &mut __c)
        }

        /// Runs the kernel once on device buffers under `config`, as given.
        #[inline]
        #[track_caller]
        fn __call_buffers(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Buffer>
        {
            let mut __c = #dsl::ArgCollector::unnamed();
            #collect_buffer
            if let ::core::option::Option::Some(out) =
                Self::__kernel(config, &mut __c, #body_buf).call_cached(device, &mut __c)?
            {
                return ::core::result::Result::Ok(out);
            }
            let mut __c = #dsl::ArgCollector::default();
            #collect_buffer
            Self::__kernel(config, &mut __c, #body_buf).call_collected(device, &mut __c)
        }

        /// Runs the kernel once for autotuning on host tensors (copied to the
        /// device once, into `uploads`), waiting for the results.
        #[inline]
        #[track_caller]
        fn __tune_host(
            config: &#cfg_ty,
            device: &#dev_ty,
            uploads: &mut #dsl::AutotuneUploads,
            #(#ps: <#tys as #kp>::Host<'_>),*
        ) -> #dsl::Result<()> {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            #dsl::autotune_run_host(&Self::__kernel(config, &mut __c, #body_host), device, &__c.hosts, uploads)
        }

        /// Runs the kernel once for autotuning on device buffers, waiting for
        /// the results.
        #[inline]
        #[track_caller]
        fn __tune_buffers(config: &#cfg_ty, device: &#dev_ty, #(#ps: <#tys as #kp>::Buffer<'_>),*)
            -> #dsl::Result<()>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_buffer
            #dsl::autotune_call(&Self::__kernel(config, &mut __c, #body_buf), device, &__c.buffers)
        }
    }
}
