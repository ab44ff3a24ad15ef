//! Running a per-device kernel over a device mesh (JAX's `shard_map`): the
//! kernel is traced on one device's block of each argument, runs as one
//! replica per mesh device, and talks to the others only through the
//! collectives it calls (`psum`, `all_gather`, `ppermute`, ...; see
//! [`ops::collective`](crate::ops::collective)).

use super::{Kernel, StaticKey};
use crate::error::{Location, Result};
use crate::host::HostTensor;
use crate::ir::MeshAxes;
use crate::runtime::{DeviceBuffer, Program};
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
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.check_arity(specs.len(), loc.clone())?;
        for (i, a) in args.iter().enumerate() {
            if a.mesh().describe() != mesh.describe() || a.mesh().device() != mesh.device() {
                let m = format!(
                    "argument {i} lives on mesh ({}), the call runs on mesh ({})",
                    a.mesh().describe(),
                    mesh.describe()
                );
                return Err(self.shard_error(&specs, m, &loc));
            }
        }
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
        let axes = MeshAxes::new(mesh.axes().to_vec());
        let (exe, _) = device.cache().get_or_compile(cache_key, || {
            let graph = self.trace_on(&local, Some(axes), loc.clone())?;
            let program = Program::from_graph(graph);
            Ok((program.mlir.clone(), move || device.compile(&program)))
        })?;
        let outs = exe.outputs().to_vec();
        let parts: Vec<PartitionSpec> = match outputs.len() {
            0 => vec![PartitionSpec::replicated(); outs.len()],
            n if n == outs.len() => outputs.to_vec(),
            n => {
                let m = format!("{n} output partition specs for {} results", outs.len());
                return Err(self.shard_error(&specs, m, &loc));
            }
        };
        let mut whole = Vec::with_capacity(outs.len());
        let mut layouts = Vec::with_capacity(outs.len());
        for (block, part) in outs.iter().zip(&parts) {
            let spec = whole_spec(mesh, block, part);
            let l = self.layouts(
                mesh,
                "result",
                std::slice::from_ref(&spec),
                std::slice::from_ref(part),
                &loc,
            )?;
            layouts.extend(l);
            whole.push(spec);
        }
        let lists: Vec<Vec<&DeviceBuffer>> = (0..mesh.size())
            .map(|p| args.iter().map(|a| &a.shards()[p]).collect())
            .collect();
        let mut results = exe.execute_sharded(&lists)?;
        let mut out = Vec::with_capacity(outs.len());
        for (j, ((spec, part), layout)) in
            whole.into_iter().zip(parts).zip(layouts).enumerate().rev()
        {
            let shards: Vec<DeviceBuffer> = results.iter_mut().map(|r| r.remove(j)).collect();
            out.push(ShardedBuffer::from_shards(mesh, spec, part, layout, shards));
        }
        out.reverse();
        Ok(out)
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
