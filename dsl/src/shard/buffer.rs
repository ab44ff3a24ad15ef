//! Tensors that live on a mesh: one device buffer per partition.

use super::host::{assemble, split};
use super::mesh::Mesh;
use super::spec::{Layout, PartitionSpec};
use crate::error::{DeviceError, Result};
use crate::host::HostTensor;
use crate::runtime::DeviceBuffer;
use crate::shape::TensorSpec;

/// A (global) tensor laid out over a [`Mesh`] as its [`PartitionSpec`]
/// says: partition `p`'s block lives on the mesh's device `p`. Sharded
/// kernels take and return these with
/// [`Kernel::call_sharded`](crate::kernel::Kernel::call_sharded), so data
/// stays on the devices between calls.
///
/// ```
/// use tessel_dsl::prelude::*;
/// use tessel_dsl::shard::{Mesh, PartitionSpec, ShardedBuffer};
/// let dev = Device::cpu_with_devices(2)?;
/// let mesh = Mesh::new(&dev, &[("data", 2)])?;
/// let x = HostTensor::from_vec((0..6).map(|i| i as f32).collect(), [2, 3])?;
/// let b = ShardedBuffer::from_host(&mesh, &x, &PartitionSpec::new([Some("data")]))?;
/// assert_eq!(b.shards()[1].to_host()?.to_vec::<f32>()?, vec![3.0, 4.0, 5.0]);
/// assert_eq!(b.to_host()?.to_vec::<f32>()?, x.to_vec::<f32>()?);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub struct ShardedBuffer {
    mesh: Mesh,
    spec: TensorSpec,
    partition: PartitionSpec,
    layout: Layout,
    shards: Vec<DeviceBuffer>,
}

impl std::fmt::Debug for ShardedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ShardedBuffer({} as {} on {:?})",
            self.spec, self.partition, self.mesh
        )
    }
}

impl ShardedBuffer {
    /// Cuts `host` into blocks as `partition` says and copies each to its device.
    ///
    /// Errors ([`DeviceError::Sharding`]) when the spec does not fit the
    /// tensor or the mesh.
    pub fn from_host(mesh: &Mesh, host: &HostTensor, partition: &PartitionSpec) -> Result<Self> {
        let layout = partition.layout(mesh, host.shape()).map_err(|m| {
            DeviceError::Sharding(format!(
                "{} on mesh ({}): {m}",
                host.spec(),
                mesh.describe()
            ))
        })?;
        Self::place(mesh, host, partition.clone(), layout)
    }

    /// Copies `host`'s blocks under a checked `layout` to their devices.
    pub(crate) fn place(
        mesh: &Mesh,
        host: &HostTensor,
        partition: PartitionSpec,
        layout: Layout,
    ) -> Result<Self> {
        let shards = split(host, &layout, mesh)?
            .iter()
            .enumerate()
            .map(|(p, block)| mesh.device().to_device_on(block, p))
            .collect::<Result<Vec<_>>>()?;
        Ok(ShardedBuffer {
            mesh: mesh.clone(),
            spec: host.spec().clone(),
            partition,
            layout,
            shards,
        })
    }

    /// The per-partition buffers a sharded program returned, as one tensor.
    pub(crate) fn from_shards(
        mesh: &Mesh,
        spec: TensorSpec,
        partition: PartitionSpec,
        layout: Layout,
        shards: Vec<DeviceBuffer>,
    ) -> Self {
        ShardedBuffer {
            mesh: mesh.clone(),
            spec,
            partition,
            layout,
            shards,
        }
    }

    /// Copies the blocks back (each distinct block once) and puts the whole
    /// tensor together.
    pub fn to_host(&self) -> Result<HostTensor> {
        assemble(&self.spec, &self.layout, &self.mesh, |p| {
            self.shards[p].to_host()
        })
    }

    /// The global type.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// How the tensor is laid out.
    pub fn partition_spec(&self) -> &PartitionSpec {
        &self.partition
    }

    /// The mesh it lives on.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// One buffer per partition, in partition order.
    pub fn shards(&self) -> &[DeviceBuffer] {
        &self.shards
    }
}
