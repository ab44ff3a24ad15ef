//! The guide: what tessel does and how to use it, one chapter per module.
//!
//! The chapters are the Markdown files under `docs/guide/` of the
//! repository, included here so that every Rust block in them is compiled
//! and run as a doctest of this crate with the rest of the test suite: the
//! guide cannot drift from the API it describes. Read them with
//! `cargo doc --open` (under `tessel::guide`) or on docs.rs.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`kernels`] | a kernel body's language, tiles and block sparsity, `#[expert_kernel]`, the companion API, the op set |
//! | [`library`] | the kernels that ship with tessel |
//! | [`training`] | gradients, custom VJPs, checkpointed recomputation, training pieces, mixed precision, FP8 |
//! | [`models`] | parameter trees, donation by argument, optimizers, checkpoints |
//! | [`serving`] | paged and contiguous KV caches, ragged batches, metadata checked inside programs |
//! | [`sharding`] | SPMD sharding, `shard_map` and collectives, several processes |
//! | [`errors`] | checks inside programs, the error types, limits, the bad inputs tried |
//! | [`runtime`] | using tessel as a dependency, plugins and other hardware, compile caches, host tensors |
//! | [`debugging`] | profiles, the `tessel` command, the interpreter, the fuzzers, where the time goes |
//!
//! Measurements against JAX are in `PERFORMANCE.md`, the layers and their
//! rules in `ARCHITECTURE.md`.

#[doc = include_str!("../docs/guide/kernels.md")]
pub mod kernels {}

#[doc = include_str!("../docs/guide/library.md")]
pub mod library {}

#[doc = include_str!("../docs/guide/training.md")]
pub mod training {}

#[doc = include_str!("../docs/guide/models.md")]
pub mod models {}

#[doc = include_str!("../docs/guide/serving.md")]
pub mod serving {}

#[doc = include_str!("../docs/guide/sharding.md")]
pub mod sharding {}

#[doc = include_str!("../docs/guide/errors.md")]
pub mod errors {}

#[doc = include_str!("../docs/guide/runtime.md")]
pub mod runtime {}

#[doc = include_str!("../docs/guide/debugging.md")]
pub mod debugging {}
