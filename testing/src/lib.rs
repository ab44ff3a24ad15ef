//! Helpers shared by tessel's test suites (the core crate's op tests, the
//! kernel library's tests and the workspace tests): deterministic data,
//! host tensors of any dtype, plain-Rust reference helpers, tolerances
//! written down per dtype, and runners that trace, compile and run a closure
//! on the XLA CPU device, and the interpreter's differential fuzzer
//! ([`fuzz`]). Not published.
//!
//! # Tolerances
//!
//! Every float comparison is `|got - want| <= atol + rtol * |want|`, with the
//! reference computed in `f64` from the inputs *as rounded to their dtype*
//! (so input rounding never counts against an op). NaN matches NaN and an
//! infinity matches the same infinity.
//!
//! | dtype      | [`Class::Simple`] (one rounding: + - * / casts, moves) | [`Class::Transcendental`] (exp, log, tanh, erf, pow, ...) |
//! |------------|---------------------------------------------------------|-----------------------------------------------------------|
//! | f64        | rtol 1e-12, atol 1e-12                                  | rtol 1e-12, atol 1e-12                                    |
//! | f32        | rtol 1e-6, atol 1e-6                                    | rtol 1e-5, atol 1e-5                                      |
//! | f16        | rtol 1e-3, atol 1e-3                                    | rtol 2e-3, atol 2e-3                                      |
//! | bf16       | rtol 1e-2, atol 1e-2                                    | rtol 2e-2, atol 2e-2                                      |
//! | f8e4m3fn   | rtol 7e-2, atol 2e-2                                    | rtol 1.3e-1, atol 4e-2                                    |
//! | f8e5m2     | rtol 1.3e-1, atol 4e-2                                  | rtol 2.5e-1, atol 8e-2                                    |
//! | ints, pred | exact                                                   | exact                                                     |
//!
//! Results that accumulate many terms (reductions, dots) use
//! [`accumulate_tol`]: the table's simple tolerance scaled by the number of
//! terms and the magnitude of the terms, since the absolute error of a sum
//! grows with `n * eps * max|term|` rather than with the result.

#![forbid(unsafe_code)]

mod data;
pub mod fuzz;
mod reference;
mod run;
mod sweeps;
mod tolerance;

pub mod kernel_fuzz;

pub use data::*;
pub use reference::*;
pub use run::*;
pub use sweeps::*;
pub use tolerance::*;
