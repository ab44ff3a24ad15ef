//! The companion's `value_and_grad`: the kernel's scalar loss and its
//! gradients with respect to the tensor parameters named at the call.

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
    quote! {
        /// Runs the kernel (which must return one scalar loss) and its
        /// gradient with respect to the tensor parameters named in `wrt`,
        /// under `config`: returns the loss and one gradient per name, in
        /// the order of `wrt`. A name that is not a tensor parameter is a
        /// kernel error. Compiled once per `wrt`, specs, statics and config.
        #[inline]
        #[track_caller]
        pub fn value_and_grad_with(config: &#cfg_ty, device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
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
        #[inline]
        #[track_caller]
        pub fn value_and_grad(device: &#dev_ty, wrt: &[&str], #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<(#dsl::HostTensor, ::std::vec::Vec<#dsl::HostTensor>)>
        {
            Self::value_and_grad_with(&Self::CONFIG, device, wrt, #(#ps),*)
        }
    }
}
