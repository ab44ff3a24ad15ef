//! Running a kernel as one SPMD program over a device mesh.

use std::sync::Arc;

use super::{DeviceCache, Kernel, StaticKey};
use crate::error::{KernelError, Location, Result};
use crate::host::HostTensor;
use crate::ir::GraphShardings;
use crate::runtime::{DeviceBuffer, Executable, Program};
use crate::shape::TensorSpec;
use crate::shard::{Layout, Mesh, PartitionSpec, ShardedBuffer, Shardings};
use crate::trace::tensor::Tensor;
use crate::trace::Outputs;

/// A compiled sharded program and the layouts of its results.
struct Compiled {
    exe: Arc<Executable>,
    outputs: Vec<(TensorSpec, PartitionSpec, Layout)>,
}

impl<F, O> Kernel<F>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    /// Runs on host tensors as one SPMD program over `mesh`: the kernel is
    /// traced on the arguments' (global) shapes, arguments and results are
    /// laid out as `shardings` says, XLA partitions the program, and the
    /// results come back whole (see [`shard`](crate::shard)). Compiled once
    /// per specs, shardings and mesh, then cached.
    ///
    /// Errors before anything runs: a spec count that does not match the
    /// arguments or results, a spec naming an axis the mesh lacks (or one
    /// axis twice), a tensor axis that does not split evenly; each names the
    /// kernel, the tensor and the caller's line.
    #[track_caller]
    pub fn run_sharded(
        &self,
        mesh: &Mesh,
        shardings: &Shardings,
        args: &[&HostTensor],
    ) -> Result<Vec<HostTensor>> {
        let loc = Location::caller();
        let buffers = self.place_args(mesh, shardings, args, &loc)?;
        let refs: Vec<&ShardedBuffer> = buffers.iter().collect();
        self.call_sharded_at(mesh, &shardings.outputs, &refs, loc)?
            .iter()
            .map(ShardedBuffer::to_host)
            .collect()
    }

    /// `args` cut into per-device blocks as `shardings.inputs` say and put
    /// on the mesh's devices, after checking the argument count, the spec
    /// count and that every spec fits its argument.
    pub(crate) fn place_args(
        &self,
        mesh: &Mesh,
        shardings: &Shardings,
        args: &[&HostTensor],
        loc: &Location,
    ) -> Result<Vec<ShardedBuffer>> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.check_arity(specs.len(), loc.clone())?;
        if shardings.inputs.len() != args.len() {
            let m = format!(
                "{} input partition specs for {} tensor arguments",
                shardings.inputs.len(),
                args.len()
            );
            return Err(self.shard_error(&specs, m, loc));
        }
        let layouts = self.layouts(mesh, "argument", &specs, &shardings.inputs, loc)?;
        args.iter()
            .zip(&shardings.inputs)
            .zip(layouts)
            .map(|((a, p), l)| ShardedBuffer::place(mesh, a, p.clone(), l))
            .collect()
    }

    /// Runs on sharded device buffers as one SPMD program over `mesh`,
    /// leaving the results on the devices, laid out as `outputs` says (none
    /// given: replicated). The arguments' own partition specs are the
    /// input shardings. Errors as [`run_sharded`](Self::run_sharded), and
    /// when an argument lives on another mesh.
    #[track_caller]
    pub fn call_sharded(
        &self,
        mesh: &Mesh,
        outputs: &[PartitionSpec],
        args: &[&ShardedBuffer],
    ) -> Result<Vec<ShardedBuffer>> {
        self.call_sharded_at(mesh, outputs, args, Location::caller())
    }

    fn call_sharded_at(
        &self,
        mesh: &Mesh,
        outputs: &[PartitionSpec],
        args: &[&ShardedBuffer],
        loc: Location,
    ) -> Result<Vec<ShardedBuffer>> {
        let specs = self.check_on_mesh(mesh, args, &loc)?;
        let shardings = Shardings::new(
            args.iter().map(|a| a.partition_spec().clone()),
            outputs.iter().cloned(),
        );
        let compiled = self.compile_sharded(mesh, &specs, &shardings, &loc)?;
        execute_on_mesh(mesh, &compiled.exe, args, compiled.outputs)
    }

    /// The global types of `args`, after checking their number and that each
    /// lives on `mesh`.
    pub(crate) fn check_on_mesh(
        &self,
        mesh: &Mesh,
        args: &[&ShardedBuffer],
        loc: &Location,
    ) -> Result<Vec<TensorSpec>> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.check_arity(specs.len(), loc.clone())?;
        for (i, a) in args.iter().enumerate() {
            let same = a.mesh().describe() == mesh.describe() && a.mesh().device() == mesh.device();
            if !same {
                let m = format!(
                    "argument {i} lives on mesh ({}), the call runs on mesh ({})",
                    a.mesh().describe(),
                    mesh.describe()
                );
                return Err(self.shard_error(&specs, m, loc));
            }
        }
        Ok(specs)
    }

    /// The partition spec of each of `n` results: `outputs`, or replicated
    /// when none are given; another count is a kernel error.
    pub(crate) fn output_parts(
        &self,
        outputs: &[PartitionSpec],
        n: usize,
        specs: &[TensorSpec],
        loc: &Location,
    ) -> Result<Vec<PartitionSpec>> {
        match outputs.len() {
            0 => Ok(vec![PartitionSpec::replicated(); n]),
            k if k == n => Ok(outputs.to_vec()),
            k => Err(self.shard_error(
                specs,
                format!("{k} output partition specs for {n} results"),
                loc,
            )),
        }
    }

    /// The program for `specs` laid out as `shardings`, from the device's
    /// cache or traced, lowered and compiled.
    fn compile_sharded(
        &self,
        mesh: &Mesh,
        specs: &[TensorSpec],
        shardings: &Shardings,
        loc: &Location,
    ) -> Result<Compiled> {
        let mut layout = StaticKey::default();
        layout
            .push(&mesh.describe())
            .push_hash(&shardings.inputs)
            .push_hash(&shardings.outputs);
        let key = self.cache_key_for(specs, Some(&layout));
        let out_parts = |n: usize| self.output_parts(&shardings.outputs, n, specs, loc);
        let device = mesh.device();
        let (exe, _) = device.cache().get_or_compile(key, |_| {
            let in_layouts = self.layouts(mesh, "argument", specs, &shardings.inputs, loc)?;
            let mut graph = self.trace_at(specs, loc.clone())?;
            let mut outs = graph.output_specs();
            let checks = outs.split_off(graph.num_body_outputs());
            let out_layouts = self.layouts(mesh, "result", &outs, &out_parts(outs.len())?, loc)?;
            // The checks' code and values: whole on every device.
            let replicated = checks.iter().map(|_| "{replicated}".to_string());
            graph.shardings = Some(GraphShardings {
                partitions: mesh.size(),
                inputs: in_layouts.iter().map(|l| l.gspmd(mesh)).collect(),
                outputs: out_layouts
                    .iter()
                    .map(|l| l.gspmd(mesh))
                    .chain(replicated)
                    .collect(),
            });
            let program = Program {
                num_partitions: mesh.size(),
                ..Program::for_device(graph, device)
            };
            Ok((program.mlir.clone(), move || device.compile(&program)))
        })?;
        self.note_outputs(&exe);
        let outs = exe.outputs().to_vec();
        let parts = out_parts(outs.len())?;
        let out_layouts = self.layouts(mesh, "result", &outs, &parts, loc)?;
        let outputs = outs
            .into_iter()
            .zip(parts)
            .zip(out_layouts)
            .map(|((s, p), l)| (s, p, l))
            .collect();
        Ok(Compiled { exe, outputs })
    }

    /// The layouts of `specs` (arguments or results, as `what` says) laid
    /// out as `parts`, or a kernel error naming the first that does not fit.
    pub(crate) fn layouts(
        &self,
        mesh: &Mesh,
        what: &str,
        specs: &[TensorSpec],
        parts: &[PartitionSpec],
        loc: &Location,
    ) -> Result<Vec<Layout>> {
        specs
            .iter()
            .zip(parts)
            .enumerate()
            .map(|(i, (s, p))| {
                p.layout(mesh, &s.shape).map_err(|m| {
                    let m = format!("{what} {i} ({s}) on mesh ({}): {m}", mesh.describe());
                    self.shard_error(specs, m, loc)
                })
            })
            .collect()
    }

    pub(crate) fn shard_error(
        &self,
        specs: &[TensorSpec],
        message: String,
        loc: &Location,
    ) -> crate::Error {
        KernelError {
            kernel: self.name().to_string(),
            op: "shard".into(),
            operands: specs.iter().map(|s| s.to_string()).collect(),
            message,
            location: loc.clone(),
            called_at: None,
        }
        .into()
    }
}

/// Runs `exe` on each mesh device's blocks of `args` and assembles each
/// result's per-device blocks into a sharded buffer, as `outputs` (global
/// type, partition spec, layout per result) say.
pub(crate) fn execute_on_mesh(
    mesh: &Mesh,
    exe: &Executable,
    args: &[&ShardedBuffer],
    outputs: Vec<(TensorSpec, PartitionSpec, Layout)>,
) -> Result<Vec<ShardedBuffer>> {
    let lists: Vec<Vec<&DeviceBuffer>> = (0..mesh.size())
        .map(|p| args.iter().map(|a| &a.shards()[p]).collect())
        .collect();
    let mut results = exe.execute_sharded(&lists)?;
    let mut out = Vec::with_capacity(outputs.len());
    for (j, (spec, part, layout)) in outputs.into_iter().enumerate().rev() {
        let shards: Vec<DeviceBuffer> = results.iter_mut().map(|r| r.remove(j)).collect();
        out.push(ShardedBuffer::from_shards(mesh, spec, part, layout, shards));
    }
    out.reverse();
    Ok(out)
}
