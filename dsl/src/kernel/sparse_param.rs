//! How a block-sparse matrix crosses the kernel boundary: its values (and,
//! for a dynamic layout, its coordinate table) are traced tensors; its shape,
//! block shape and static layout are part of the compile-cache key.

use crate::error::Result;
use crate::kernel::{ArgCollector, KernelParam};
use crate::runtime::{Device, DeviceBuffer};
use crate::tile::{BlockSparse, BlockSparseOf, BlockSparseSpec, Coords, HostBlockSparse};
use crate::trace::tensor::Tensor;

/// A block-sparse matrix on the device, for `call`.
pub type DeviceBlockSparse = BlockSparseOf<DeviceBuffer>;

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
}

fn record_layout<T>(a: &BlockSparseOf<T>, name: &str, c: &mut ArgCollector<'_>) {
    c.statics
        .push(&name.to_string())
        .push_hash(&a.shape)
        .push_hash(&a.block)
        .push_hash(&unit_coords(&a.coords));
}

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
    BlockSparse {
        values,
        coords,
        shape,
        block,
    }
}

fn unit_coords<T>(c: &Coords<T>) -> Coords<()> {
    match c {
        Coords::Static(v) => Coords::Static(v.clone()),
        Coords::Dynamic(_) => Coords::Dynamic(()),
    }
}

impl KernelParam for BlockSparse {
    type Host<'a> = &'a HostBlockSparse;
    type Spec<'a> = &'a BlockSparseSpec;
    type Buffer<'a> = &'a DeviceBlockSparse;
    type Sharded<'a> = crate::shard::NotShardable;
    fn collect_host<'a>(arg: &&'a HostBlockSparse, name: &'static str, c: &mut ArgCollector<'a>) {
        record_layout(*arg, name, c);
        c.names.push(name);
        c.hosts.push(&arg.values);
        c.specs.push(arg.values.spec().clone());
        if let Coords::Dynamic(t) = &arg.coords {
            c.names.push(name);
            c.hosts.push(t);
            c.specs.push(t.spec().clone());
        }
    }
    fn collect_spec<'a>(arg: &&'a BlockSparseSpec, name: &'static str, c: &mut ArgCollector<'a>) {
        record_layout(*arg, name, c);
        c.names.push(name);
        c.specs.push(arg.values.clone());
        if let Coords::Dynamic(t) = &arg.coords {
            c.names.push(name);
            c.specs.push(t.clone());
        }
    }
    fn collect_buffer<'a>(
        arg: &&'a DeviceBlockSparse,
        name: &'static str,
        c: &mut ArgCollector<'a>,
    ) {
        record_layout(*arg, name, c);
        c.names.push(name);
        c.buffers.push(&arg.values);
        c.specs.push(arg.values.spec().clone());
        if let Coords::Dynamic(t) = &arg.coords {
            c.names.push(name);
            c.buffers.push(t);
            c.specs.push(t.spec().clone());
        }
    }
    fn bind_host(arg: &&HostBlockSparse, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    fn bind_spec(arg: &&BlockSparseSpec, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    fn bind_buffer(arg: &&DeviceBlockSparse, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind(arg.shape, arg.block, unit_coords(&arg.coords), next)
    }
    fn collect_sharded(
        arg: &crate::shard::NotShardable,
        _: &'static str,
        _: &mut ArgCollector<'_>,
    ) {
        match *arg {}
    }
    fn bind_sharded(arg: &crate::shard::NotShardable, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        match *arg {}
    }
}
