//! Running a kernel as one SPMD program over a device mesh.

use std::sync::Arc;

use super::{CacheKey, Kernel};
use crate::error::{KernelError, Location, Result};
use crate::host::HostTensor;
use crate::lower::lower;
use crate::runtime::{DeviceBuffer, Executable, Program};
use crate::shape::TensorSpec;
use crate::shard::{assemble, split, GraphShardings, Layout, Mesh, PartitionSpec, Shardings};
use crate::tensor::Tensor;
use crate::trace::Outputs;

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
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        self.check_arity(specs.len(), loc.clone())?;
        let fail = |message: String| -> crate::Error {
            KernelError {
                kernel: self.name().to_string(),
                op: "shard".into(),
                operands: specs.iter().map(|s| s.to_string()).collect(),
                message,
                location: loc.clone(),
            }
            .into()
        };
        if shardings.inputs.len() != args.len() {
            return Err(fail(format!(
                "{} input partition specs for {} tensor arguments",
                shardings.inputs.len(),
                args.len()
            )));
        }
        let layouts = |what: &str, specs: &[TensorSpec], parts: &[PartitionSpec]| {
            specs
                .iter()
                .zip(parts)
                .enumerate()
                .map(|(i, (s, p))| {
                    p.layout(mesh, &s.shape).map_err(|m| {
                        fail(format!(
                            "{what} {i} ({s}) on mesh ({}): {m}",
                            mesh.describe()
                        ))
                    })
                })
                .collect::<Result<Vec<Layout>>>()
        };
        let in_layouts = layouts("argument", &specs, &shardings.inputs)?;
        let key = CacheKey {
            kernel: self.key.clone().unwrap_or_else(|| self.name().to_string()),
            statics: format!(
                "{}|mesh({})|in{:?}|out{:?}",
                self.statics,
                mesh.describe(),
                shardings.inputs,
                shardings.outputs
            ),
            specs: specs.clone(),
            config: self.config,
        };
        let device = mesh.device();
        let exe: Arc<Executable> = match device.cache().get(&key) {
            Some(exe) => exe,
            None => {
                let mut graph = self.trace(&specs)?;
                let outs = graph.output_specs();
                let out_parts = output_specs(shardings, outs.len()).ok_or_else(|| {
                    fail(format!(
                        "{} output partition specs for {} results",
                        shardings.outputs.len(),
                        outs.len()
                    ))
                })?;
                let out_layouts = layouts("result", &outs, &out_parts)?;
                graph.shardings = Some(GraphShardings {
                    partitions: mesh.size(),
                    inputs: in_layouts.iter().map(|l| l.gspmd(mesh)).collect(),
                    outputs: out_layouts.iter().map(|l| l.gspmd(mesh)).collect(),
                });
                let text = lower(&graph);
                let program = Program {
                    name: self.name().to_string(),
                    mlir: text.clone(),
                    inputs: graph.input_specs(),
                    outputs: outs,
                    num_partitions: mesh.size(),
                    num_replicas: 1,
                };
                device
                    .cache()
                    .insert_with(key, &text, || device.compile(&program))?
            }
        };
        let outs = exe.outputs().to_vec();
        let out_parts = output_specs(shardings, outs.len()).ok_or_else(|| {
            fail(format!(
                "{} output partition specs for {} results",
                shardings.outputs.len(),
                outs.len()
            ))
        })?;
        let out_layouts = layouts("result", &outs, &out_parts)?;
        // Per-device argument blocks, on the devices the program runs on.
        let mut lists: Vec<Vec<DeviceBuffer>> = (0..mesh.size()).map(|_| Vec::new()).collect();
        for (arg, layout) in args.iter().zip(&in_layouts) {
            for (p, block) in split(arg, layout, mesh)?.iter().enumerate() {
                lists[p].push(device.to_device_on(block, exe.devices()[p])?);
            }
        }
        let refs: Vec<Vec<&DeviceBuffer>> = lists.iter().map(|l| l.iter().collect()).collect();
        let results = exe.execute_sharded(&refs)?;
        (0..outs.len())
            .map(|j| {
                let shards = results
                    .iter()
                    .map(|per_device| per_device[j].to_host())
                    .collect::<Result<Vec<HostTensor>>>()?;
                assemble(&shards, &outs[j], &out_layouts[j], mesh)
            })
            .collect()
    }
}

/// The result specs: as given, or all replicated when none are given.
fn output_specs(shardings: &Shardings, results: usize) -> Option<Vec<PartitionSpec>> {
    if shardings.outputs.is_empty() {
        Some(vec![PartitionSpec::replicated(); results])
    } else if shardings.outputs.len() == results {
        Some(shardings.outputs.clone())
    } else {
        None
    }
}
