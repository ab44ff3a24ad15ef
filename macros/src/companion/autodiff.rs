//! The companion's `value_and_grad`: the kernel's scalar loss and its
//! gradients with respect to the tensor and tree parameters named at the
//! call.

use proc_macro2::TokenStream;
use quote::quote;

use super::Parts;

/// `value_and_grad_with` and `value_and_grad`.
pub(super) fn autodiff(p: &Parts) -> TokenStream {
    let Parts {
        dsl,
        name_str,
        callee,
        ps,
        ps_str,
        tys,
        kp,
        cfg_ty,
        dev_ty,
        collect_host,
        check_cfg,
        ..
    } = p;
    // The parameters as a nested list `(x, (w, ()))`: bound in order, and
    // taken apart for the call.
    let nested_bind = ps.iter().zip(tys.iter()).rev().fold(
        quote!(()),
        |rest, (p, ty)| quote!((<#ty as #kp>::bind_host(&#p, &mut __it), #rest)),
    );
    let nested_pattern = ps
        .iter()
        .rev()
        .fold(quote!(()), |rest, p| quote!((#p, #rest)));
    quote! {
        /// Runs the kernel (which must return one scalar loss) and its
        /// gradient with respect to the tensor and tree parameters named in
        /// `wrt`, under `config`: returns the loss and the gradients in the
        /// order of `wrt` (one for a tensor, one per leaf in path order for
        /// a tree, as its `leaf_paths()` lists them). A name that is not
        /// a tensor or tree parameter is a kernel error. Compiled once per
        /// `wrt`, specs, statics and config.
        #[inline]
        #[track_caller]
        pub fn value_and_grad_with(config: &#cfg_ty, device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            #check_cfg
            #dsl::kernel_value_and_grad(
                #name_str,
                ::core::module_path!(),
                &[#(#ps_str),*],
                config,
                device,
                wrt,
                &__c,
                |__t: &[#dsl::Tensor]| {
                    let mut __it = __t.iter().copied();
                    #nested_bind
                },
                |#nested_pattern| #callee(#(#ps),*),
            )
        }

        /// [`Self::value_and_grad_with`] with [`Self::CONFIG`].
        #[inline]
        #[track_caller]
        pub fn value_and_grad(device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
        {
            Self::value_and_grad_with(&Self::CONFIG, device, wrt, #(#ps),*)
        }
    }
}
