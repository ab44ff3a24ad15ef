//! How a block-sparse matrix crosses the kernel boundary: its values (and,
//! for a dynamic layout, its coordinate table) are traced tensors; its shape,
//! block shape and static layout are part of the compile-cache key.

use crate::error::{Location, Result};
use crate::kernel::{ArgCollector, KernelParam};
use crate::runtime::{Device, DeviceBuffer};
use crate::shape::TensorSpec;
use crate::shard::{Mesh, PartitionSpec, ShardedBuffer};
use crate::tile::{BlockSparse, BlockSparseOf, BlockSparseSpec, Coords, HostBlockSparse};
use crate::trace::tensor::{fail, Tensor};

/// A block-sparse matrix on the device, for `call`.
pub type DeviceBlockSparse = BlockSparseOf<DeviceBuffer>;

/// A block-sparse matrix on the devices of a mesh, for `call_sharded` and
/// `call_shard_map` ([`HostBlockSparse::to_mesh`]).
pub type ShardedBlockSparse = BlockSparseOf<ShardedBuffer>;

impl HostBlockSparse {
    /// Copies the tensors to `device`, for `call`.
    pub fn to_device(&self, device: &Device) -> Result<DeviceBlockSparse> {
        Ok(BlockSparseOf {
            values: device.to_device(&self.values)?,
            coords: match &self.coords {
                Coords::Static(c) => Coords::Static(c.clone()),
                Coords::Dynamic(t) => Coords::Dynamic(device.to_device(t)?),
            },
            shape: self.shape,
            block: self.block,
        })
    }

    /// Puts the matrix on the devices of `mesh`, for `call_sharded`: the
    /// stored blocks (`[nnz, block.0, block.1]`) laid out as `values` says,
    /// a dynamic coordinate table replicated. Under `call_sharded` any
    /// layout computes the same product (the program is partitioned as a
    /// whole); under `call_shard_map` each device's body sees its own
    /// blocks, so there the values must be replicated.
    ///
    /// Errors ([`DeviceError::Sharding`](crate::DeviceError::Sharding))
    /// when `values` does not fit the stored blocks or the mesh.
    ///
    /// ```
    /// use tessel_dsl::prelude::*;
    /// use tessel_dsl::shard::{Mesh, PartitionSpec};
    /// use tessel_dsl::tile::HostBlockSparse;
    /// let dev = Device::cpu_with_devices(2)?;
    /// let mesh = Mesh::new(&dev, &[("data", 2)])?;
    /// // The identity, 16 × 16 in 8 × 8 blocks: the two diagonal blocks are stored.
    /// let dense = HostTensor::from_fn(TensorSpec::new([16, 16], F32), |i| (i % 17 == 0) as u8 as f64);
    /// let a = HostBlockSparse::from_dense(&dense, (8, 8))?;
    /// assert_eq!(a.nnz(), 2);
    /// let on_mesh = a.to_mesh(&mesh, &PartitionSpec::new([Some("data")]))?;
    /// assert_eq!(on_mesh.values().shards()[0].spec().shape, vec![1, 8, 8]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn to_mesh(&self, mesh: &Mesh, values: &PartitionSpec) -> Result<ShardedBlockSparse> {
        Ok(BlockSparseOf {
            values: ShardedBuffer::from_host(mesh, &self.values, values)?,
            coords: match &self.coords {
                Coords::Static(c) => Coords::Static(c.clone()),
                Coords::Dynamic(t) => Coords::Dynamic(ShardedBuffer::from_host(
                    mesh,
                    t,
                    &PartitionSpec::replicated(),
                )?),
            },
            shape: self.shape,
            block: self.block,
        })
    }
}

fn record_layout<T>(a: &BlockSparseOf<T>, name: &str, c: &mut ArgCollector<'_>) {
    c.statics
        .push(&name.to_string())
        .push_hash(&a.shape)
        .push_hash(&a.block)
        .push_hash(&unit_coords(&a.coords));
}

/// The in-trace matrix of a parameter: the next one or two traced tensors
/// with the argument's static parts. Values or a coordinate table that do
/// not match the layout are a kernel error (op `block_sparse`): under
/// `shard_map` each device's body sees its own block of the values, which
/// holds fewer blocks than the coordinates name.
#[track_caller]
fn bind(
    shape: (usize, usize),
    block: (usize, usize),
    coords: Coords<()>,
    next: &mut dyn Iterator<Item = Tensor>,
) -> BlockSparse {
    let values = next.next().unwrap_or(Tensor::INERT);
    let coords = match coords {
        Coords::Static(v) => Coords::Static(v),
        Coords::Dynamic(()) => Coords::Dynamic(next.next().unwrap_or(Tensor::INERT)),
    };
    if let Some(m) = layout_mismatch(values, &coords, block) {
        let mut operands = vec![values];
        if let Coords::Dynamic(t) = &coords {
            operands.push(*t);
        }
        fail("block_sparse", &operands, m, &Location::caller());
    }
    BlockSparse {
        values,
        coords,
        shape,
        block,
    }
}

/// Why `values` (and a traced coordinate table) do not fit a layout of
/// `block`-shaped blocks, if they do not.
fn layout_mismatch(
    values: Tensor,
    coords: &Coords<Tensor>,
    block: (usize, usize),
) -> Option<String> {
    let vs = values.spec();
    let (count, table) = match coords {
        Coords::Static(c) => (c.len(), String::new()),
        Coords::Dynamic(t) => {
            let cs = t.spec();
            if cs.rank() != 2 || cs.shape[1] != 2 || !cs.dtype.is_integer() {
                return Some(format!(
                    "the coordinate table must be integer [nnz, 2], got {cs}"
                ));
            }
            (cs.shape[0], format!(" (coordinates {cs})"))
        }
    };
    if vs.shape == [count, block.0, block.1] {
        return None;
    }
    Some(format!(
        "the layout holds {count} blocks of {}x{}{table}, but the values are {vs}; \
         the values must be [{count}, {}, {}] (under shard_map, replicate them: each \
         device would see only its own blocks)",
        block.0, block.1, block.0, block.1
    ))
}

fn unit_coords<T>(c: &Coords<T>) -> Coords<()> {
    match c {
        Coords::Static(v) => Coords::Static(v.clone()),
        Coords::Dynamic(_) => Coords::Dynamic(()),
    }
}

/// Records the layout of `arg`, and its tensors (values, then a dynamic
/// coordinate table) with `push`, which files one where its kind of call
/// keeps it and returns its spec.
fn collect<'a, T>(
    arg: &'a BlockSparseOf<T>,
    name: &'static str,
    c: &mut ArgCollector<'a>,
    push: impl Fn(&mut ArgCollector<'a>, &'a T) -> TensorSpec,
) {
    record_layout(arg, name, c);
    let dynamic = match &arg.coords {
        Coords::Dynamic(t) => Some(t),
        Coords::Static(_) => None,
    };
    for t in std::iter::once(&arg.values).chain(dynamic) {
        c.name(name);
        let spec = push(c, t);
        c.specs.push(spec);
    }
}

impl KernelParam for BlockSparse {
    type Host<'a> = &'a HostBlockSparse;
    type Spec<'a> = &'a BlockSparseSpec;
    type Buffer<'a> = &'a DeviceBlockSparse;
    type Sharded<'a> = &'a ShardedBlockSparse;
    fn collect_host<'a>(arg: &&'a HostBlockSparse, name: &'static str, c: &mut ArgCollector<'a>) {
        collect(*arg, name, c, |c, t| {
            c.hosts.push(t);
            t.spec().clone()
        });
    }
    fn collect_spec<'a>(arg: &&'a BlockSparseSpec, name: &'static str, c: &mut ArgCollector<'a>) {
        collect(*arg, name, c, |_, t| t.clone());
    }
    fn collect_buffer<'a>(
        arg: &&'a DeviceBlockSparse,
        name: &'static str,
        c: &mut ArgCollector<'a>,
    ) {
        collect(*arg, name, c, |c, t| {
            c.buffers.push(t);
            t.spec().clone()
        });
    }
    fn collect_sharded<'a>(
        arg: &&'a ShardedBlockSparse,
        name: &'static str,
        c: &mut ArgCollector<'a>,
    ) {
        collect(*arg, name, c, |c, t| {
            c.sharded.push(t);
            t.spec().clone()
        });
    }
    #[track_caller]
    fn bind_host(arg: &&HostBlockSparse, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    #[track_caller]
    fn bind_spec(arg: &&BlockSparseSpec, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    #[track_caller]
    fn bind_buffer(arg: &&DeviceBlockSparse, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    #[track_caller]
    fn bind_sharded(arg: &&ShardedBlockSparse, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
}
