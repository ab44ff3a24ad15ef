//! tessel's kernel library, written with tessel's own macros.
//!
//! The macros expand to paths under `::tessel`; inside this crate that name
//! is the DSL crate itself.

extern crate tessel_dsl as tessel;
