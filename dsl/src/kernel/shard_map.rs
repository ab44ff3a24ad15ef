//! Running a per-device kernel over a device mesh (JAX's `shard_map`): the
//! kernel is traced on one device's block of each argument, runs as one
//! replica per mesh device, and talks to the others only through the
//! collectives it calls (`psum`, `all_gather`, `ppermute`, ...; see
//! [`ops::collective`](crate::ops::collective)).

use super::sharded::execute_on_mesh;
use super::{DeviceCache, Kernel, StaticKey};
use crate::error::{Location, Result};
use crate::host::HostTensor;
use crate::runtime::Program;
use crate::shape::TensorSpec;
use crate::shard::{Mesh, PartitionSpec, ShardedBuffer, Shardings};
use crate::trace::tensor::Tensor;
use crate::trace::Outputs;

impl<F, O> Kernel<F>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    /// Runs the kernel once per device of `mesh`, each on its own block of
    /// the arguments (JAX's `shard_map`): `shardings.inputs` split each
    /// argument over mesh axes (an axis a spec leaves out is replicated:
    /// every device of it gets the same block), the kernel is traced on one
    /// device's block shapes, and inside it collectives over named mesh
    /// axes combine the devices' values. `shardings.outputs` say how each
    /// device's result is a block of the whole result (none given:
    /// replicated, every device holds all of it and device 0's is
    /// returned). Compiled once per block specs, shardings and mesh, then
    /// cached.
    ///
    /// Errors before anything runs, naming the kernel and the caller's line:
    /// a spec count that does not match the arguments or results, a spec
    /// naming an axis the mesh lacks, an argument that does not split
    /// evenly; and, while tracing, a collective over an unknown axis or on
    /// a shape its group does not divide.
    #[track_caller]
    pub fn run_shard_map(
        &self,
        mesh: &Mesh,
        shardings: &Shardings,
        args: &[&HostTensor],
    ) -> Result<Vec<HostTensor>> {
        let loc = Location::caller();
        let placed = self.place_args(mesh, shardings, args, &loc)?;
        let refs: Vec<&ShardedBuffer> = placed.iter().collect();
        self.call_shard_map_at(mesh, &shardings.outputs, &refs, loc)?
            .iter()
            .map(ShardedBuffer::to_host)
            .collect()
    }

    /// [`run_shard_map`](Self::run_shard_map) on sharded device buffers,
    /// leaving the results on the devices laid out as `outputs` says (none
    /// given: replicated). The arguments' own partition specs say how they
    /// are split. Errors as `run_shard_map`, and when an argument lives on
    /// another mesh.
    #[track_caller]
    pub fn call_shard_map(
        &self,
        mesh: &Mesh,
        outputs: &[PartitionSpec],
        args: &[&ShardedBuffer],
    ) -> Result<Vec<ShardedBuffer>> {
        self.call_shard_map_at(mesh, outputs, args, Location::caller())
    }

    fn call_shard_map_at(
        &self,
        mesh: &Mesh,
        outputs: &[PartitionSpec],
        args: &[&ShardedBuffer],
        loc: Location,
    ) -> Result<Vec<ShardedBuffer>> {
        let specs = self.check_on_mesh(mesh, args, &loc)?;
        // Every device's block has the same type: device 0's.
        let local: Vec<TensorSpec> = args.iter().map(|b| b.shards()[0].spec().clone()).collect();
        let inputs: Vec<PartitionSpec> = args.iter().map(|a| a.partition_spec().clone()).collect();
        let mut key = StaticKey::default();
        key.push(&"shard_map")
            .push(&mesh.describe())
            .push_hash(&inputs)
            .push_hash(&outputs.to_vec());
        let cache_key = self.cache_key_for(&local, Some(&key));
        let device = mesh.device();
        let axes = mesh.mesh_axes().clone();
        let (exe, _) = device.cache().get_or_compile(cache_key, |_| {
            let graph = self.trace_on(&local, Some(axes), loc.clone())?;
            let program = Program::for_device(graph, device);
            Ok((program.mlir.clone(), move || device.compile(&program)))
        })?;
        self.note_outputs(&exe);
        let outs = exe.outputs().to_vec();
        let parts = self.output_parts(outputs, outs.len(), &specs, &loc)?;
        let whole: Vec<TensorSpec> = outs
            .iter()
            .zip(&parts)
            .map(|(block, part)| whole_spec(mesh, block, part))
            .collect();
        let layouts = self.layouts(mesh, "result", &whole, &parts, &loc)?;
        let laid_out = whole
            .into_iter()
            .zip(parts)
            .zip(layouts)
            .map(|((s, p), l)| (s, p, l))
            .collect();
        execute_on_mesh(mesh, &exe, args, laid_out)
    }
}

/// The whole tensor of which each device's `block` is one block, laid out
/// as `part` says: each axis the spec splits over a mesh axis of size `n`
/// is `n` times the block's.
fn whole_spec(mesh: &Mesh, block: &TensorSpec, part: &PartitionSpec) -> TensorSpec {
    let mut shape = block.shape.clone();
    for (dim, name) in part.axes().iter().enumerate() {
        let size = name
            .as_deref()
            .and_then(|n| mesh.axis_index(n))
            .map_or(1, |a| mesh.axes()[a].1);
        if let Some(extent) = shape.get_mut(dim) {
            *extent *= size;
        }
    }
    TensorSpec::new(shape, block.dtype)
}
