//! Sharding: one kernel run as a single SPMD program over a mesh of devices.
//!
//! A [`Mesh`] names the axes of an array of devices; a [`PartitionSpec`]
//! per argument and per result says which tensor axis each mesh axis splits
//! (as JAX's `jit(in_shardings=.., out_shardings=..)`). The kernel is traced
//! on the global shapes, its `@main` arguments and results carry
//! `mhlo.sharding` attributes, and XLA's SPMD partitioner (GSPMD) splits the
//! program and inserts the collectives. On the host, arguments are cut into
//! per-device blocks and results put back together, so
//! [`Kernel::run_sharded`](crate::kernel::Kernel::run_sharded) (and a macro
//! kernel's `run_sharded`) returns the same tensors as `run`;
//! [`ShardedBuffer`]s and [`Kernel::call_sharded`](crate::kernel::Kernel::call_sharded)
//! keep the blocks on the devices between calls.
//!
//! The CPU plugin exposes several devices ([`Device::cpu_with_devices`]),
//! so sharded kernels are tested here; the same program runs on a TPU slice.
//!
//! ```
//! # extern crate tessel_dsl as tessel;
//! use tessel::prelude::*;
//! use tessel::shard::{Mesh, PartitionSpec, Shardings};
//!
//! #[cpu_kernel(precision = "highest")]
//! fn dense(x: Tensor, w: Tensor) -> Tensor {
//!     x.matmul(w)
//! }
//!
//! let dev = Device::cpu_with_devices(2)?;
//! let mesh = Mesh::new(&dev, &[("data", 2)])?;
//! let rows = PartitionSpec::new([Some("data"), None]);
//! let shardings = Shardings::new([rows.clone(), PartitionSpec::replicated()], [rows]);
//! let x = HostTensor::from_vec((0..8).map(|i| i as f32).collect(), [4, 2])?;
//! let w = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2])?;
//! let y = dense::run_sharded(&mesh, &shardings, &x, &w)?;
//! assert_eq!(y.to_vec::<f32>()?, x.to_vec::<f32>()?);
//! # Ok::<(), tessel_dsl::Error>(())
//! ```
//!
//! [`Device::cpu_with_devices`]: crate::runtime::Device::cpu_with_devices

mod buffer;
mod host;
mod mesh;
mod spec;

pub use buffer::ShardedBuffer;
pub use mesh::Mesh;
pub use spec::PartitionSpec;

pub(crate) use spec::Layout;

/// The partition specs of a sharded kernel's tensor arguments (in order;
/// static arguments have none) and of its results (none given: every result
/// is replicated, so each device ends with the whole result).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shardings {
    /// One spec per tensor argument.
    pub inputs: Vec<PartitionSpec>,
    /// One spec per result, or none.
    pub outputs: Vec<PartitionSpec>,
}

impl Shardings {
    /// Specs for the arguments and the results.
    pub fn new(
        inputs: impl IntoIterator<Item = PartitionSpec>,
        outputs: impl IntoIterator<Item = PartitionSpec>,
    ) -> Self {
        Shardings {
            inputs: inputs.into_iter().collect(),
            outputs: outputs.into_iter().collect(),
        }
    }
}
