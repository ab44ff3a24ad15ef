//! The kernel library's everyday names in one import, beside
//! `tessel::prelude`: what a model file uses (activations, attention,
//! norms, RoPE, losses, optimizers, the paged cache and its kernels).
//!
//! ```
//! # extern crate tessel_dsl as tessel;
//! use tessel::prelude::*;
//! use tessel_kernels::prelude::*;
//!
//! #[cpu_kernel]
//! fn block(x: Tensor, g: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor {
//!     let h = rms_norm(x, g, 1e-5);
//!     x + swiglu(h.matmul(w_gate), h.matmul(w_up))
//! }
//! ```

pub use crate::activation::{gelu, silu, swiglu};
pub use crate::attention::{flash_attention, flash_attention_with, FlashOptions};
pub use crate::einsum::{einsum, einsum_n};
pub use crate::gemm::{gemm, GemmOptions};
pub use crate::norm::{layer_norm, rms_norm};
pub use crate::optim::{OptState, Optimizer, PathMask, Schedule, TrainState};
pub use crate::rope::{rope, rope_at, rope_at_positions, rope_positions, RopeLayout, RopeTable};
pub use crate::serving::{
    kv_cache_update_with, paged_attention_with, prefill_attention, ragged_paged_attention_with,
    PagePool, PagedKv, RaggedBatch, ServeOptions,
};
pub use crate::softmax::{log_softmax, softmax};
pub use crate::train::cross_entropy;
