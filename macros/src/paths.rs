//! The one place the expansions name the DSL crate: every item they use is
//! reached through `::tessel::__private`, which re-exports exactly those.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;

/// `::tessel::__private`, with `span` (the user's code it stands for, so
/// errors and `#[track_caller]` locations point there).
pub fn dsl(span: Span) -> TokenStream {
    quote_spanned!(span=> ::tessel::__private)
}

/// [`dsl`] at the macro's call site.
pub fn dsl_here() -> TokenStream {
    dsl(Span::call_site())
}
