//! The op tests' harness: the shared `tessel-testing` crate (its docs list
//! the tolerances per dtype).

#![allow(unused_imports)]

pub use tessel_testing::*;
