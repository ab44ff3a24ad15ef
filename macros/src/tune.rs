//! The autotuning statements of the companion's `run`, `call` and
//! `profile`: each parameter is rebound to the candidate
//! `tessel::kernel::autotune::choose` picks (or kept as given). Each
//! candidate runs on device-resident arguments (the host form uploads its
//! tensors once) and is waited for, so what is timed is the program.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::paths::dsl_here;

/// Which entry point is tuned: its argument form and the private runner
/// that runs the kernel once on such arguments.
#[derive(Clone, Copy)]
pub enum Form {
    /// `run`/`profile`: host tensors, run by `__tune_host`.
    Host,
    /// `call`: device buffers, run by `__tune_buffers`.
    Buffer,
}

/// Statements that rebind each of `ps` (of types `tys`) to its tuned value
/// when `config.autotune` is on, collecting `name: label` lines in
/// `__tuned`. Expects `config`, `device` and the collector `__c` in scope.
pub fn rebind_tuned(form: Form, name: &str, ps: &[syn::Ident], tys: &[syn::Type]) -> TokenStream {
    let dsl = dsl_here();
    let kp = quote!(#dsl::KernelParam);
    // The runner runs the kernel once and waits for its results; the host
    // form uploads its tensors once (`__uploads`) for every candidate.
    let (candidates, label, runner, uploads) = match form {
        Form::Host => (
            format_ident!("tuning_candidates_host"),
            format_ident!("tuning_label_host"),
            format_ident!("__tune_host"),
            Some(quote!(&mut __uploads,)),
        ),
        Form::Buffer => (
            format_ident!("tuning_candidates_buffer"),
            format_ident!("tuning_label_buffer"),
            format_ident!("__tune_buffers"),
            None,
        ),
    };
    // Timing `call` runs the kernel several times on the same buffers,
    // which a donated buffer does not survive: such calls are not tuned.
    let enabled = match form {
        Form::Host => quote!(config.autotune),
        Form::Buffer => quote!(config.autotune && config.donate.is_empty()),
    };
    let per_param = ps.iter().zip(tys).enumerate().map(|(i, (p, ty))| {
        let p_str = p.to_string();
        let args = ps.iter().enumerate().map(|(k, q)| {
            if k == i {
                quote!(::core::clone::Clone::clone(__v))
            } else {
                quote!(::core::clone::Clone::clone(&#q))
            }
        });
        quote! {
            let #p = #dsl::autotune_arg(
                &#dsl::TuneRequest {
                    kernel: ::core::concat!(::core::module_path!(), "::", #name),
                    param: #p_str,
                    config,
                    device,
                    inputs: &__c.specs,
                    statics: &__c.statics,
                },
                #p,
                #enabled,
                |__v| <#ty as #kp>::#candidates(__v, &__c.specs),
                |__v| <#ty as #kp>::#label(__v),
                &mut __tuned,
                |__v| Self::#runner(config, device, #uploads #(#args),*),
            )?;
        }
    });
    let upload_slot = uploads.is_some().then(|| {
        quote! {
            #[allow(unused_mut, unused_variables)]
            let mut __uploads = <#dsl::AutotuneUploads as ::core::default::Default>::default();
        }
    });
    quote! {
        #[allow(unused_mut, unused_variables)]
        let mut __tuned: ::std::vec::Vec<::std::string::String> = ::std::vec::Vec::new();
        #upload_slot
        #( #per_param )*
    }
}
