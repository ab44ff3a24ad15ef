//! The companion's runs over a device mesh: one SPMD program
//! (`run_sharded`, `call_sharded`) or one replica per device with
//! collectives (`run_shard_map`, `call_shard_map`).

use proc_macro2::TokenStream;
use quote::quote;

use super::Parts;

/// `run_sharded`, `run_shard_map`, `call_sharded`, `call_shard_map`.
pub(super) fn sharded(p: &Parts) -> TokenStream {
    let Parts {
        dsl,
        ps,
        tys,
        ret,
        kp,
        ko,
        body_host,
        body_sharded,
        collect_host,
        collect_sharded,
        check_const,
        ..
    } = p;
    quote! {
        /// Runs the kernel with [`Self::CONFIG`] as one SPMD program over
        /// `mesh`, its tensor arguments and results laid out as `shardings`
        /// says (see [`tessel::shard`](::tessel::shard)); the results come back whole.
        #[inline]
        #[track_caller]
        pub fn run_sharded(mesh: &#dsl::Mesh, shardings: &#dsl::Shardings, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Host>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
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
        #[inline]
        #[track_caller]
        pub fn run_shard_map(mesh: &#dsl::Mesh, shardings: &#dsl::Shardings, #(#ps: <#tys as #kp>::Host<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Host>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_host
            #check_const
            let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_host);
            let __outs = __k.run_shard_map(mesh, shardings, &__c.hosts)?;
            <#ret as #ko>::from_host(__outs, __k.output_tree().as_deref())
        }

        /// Runs the kernel with [`Self::CONFIG`] as one SPMD program over
        /// `mesh` on sharded device buffers (their partition specs are the
        /// input shardings), leaving the results on the devices laid out as
        /// `outputs` says (none given: replicated).
        #[inline]
        #[track_caller]
        pub fn call_sharded(mesh: &#dsl::Mesh, outputs: &[#dsl::PartitionSpec], #(#ps: <#tys as #kp>::Sharded<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Sharded>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_sharded
            let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_sharded);
            let __outs = __k.call_sharded(mesh, outputs, &__c.sharded)?;
            <#ret as #ko>::from_sharded(__outs, __k.output_tree().as_deref())
        }

        /// [`run_shard_map`](Self::run_shard_map) on sharded device buffers
        /// (their partition specs say how they are split), leaving the
        /// results on the devices laid out as `outputs` says (none given:
        /// replicated).
        #[inline]
        #[track_caller]
        pub fn call_shard_map(mesh: &#dsl::Mesh, outputs: &[#dsl::PartitionSpec], #(#ps: <#tys as #kp>::Sharded<'_>),*)
            -> #dsl::Result<<#ret as #ko>::Sharded>
        {
            let mut __c = #dsl::ArgCollector::default();
            #collect_sharded
            let __k = Self::__kernel(&Self::CONFIG, &mut __c, #body_sharded);
            let __outs = __k.call_shard_map(mesh, outputs, &__c.sharded)?;
            <#ret as #ko>::from_sharded(__outs, __k.output_tree().as_deref())
        }
    }
}
