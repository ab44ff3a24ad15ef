//! Running compiled programs: argument checks, `PJRT_LoadedExecutable_Execute`,
//! and the host-in, host-out shortcut.

use std::sync::Arc;

use super::buffer::DeviceBuffer;
use super::launch;
use super::pjrt::args::Args;
use super::pjrt::call::pjrt_call;
use super::pjrt::ffi;
use super::Executable;
use crate::error::{DeviceError, Result};
use crate::host::HostTensor;
use crate::shape::TensorSpec;

impl Executable {
    fn arguments_error(&self, message: String) -> crate::Error {
        DeviceError::Arguments {
            kernel: self.name().to_string(),
            message,
        }
        .into()
    }

    fn check_count(&self, given: usize) -> Result<()> {
        let expected = self.inputs().len();
        if given != expected {
            let specs: Vec<String> = self.inputs().iter().map(ToString::to_string).collect();
            return Err(self.arguments_error(format!(
                "expected {expected} argument{} ({}), got {given}",
                if expected == 1 { "" } else { "s" },
                specs.join(", ")
            )));
        }
        Ok(())
    }

    fn check_single_device(&self) -> Result<usize> {
        match self.devices() {
            [device] => Ok(*device),
            devices => Err(self.arguments_error(format!(
                "compiled for {} devices ({} partitions x {} replicas): use execute_sharded \
                 with one argument list per device",
                devices.len(),
                self.num_partitions(),
                self.num_replicas()
            ))),
        }
    }

    /// Runs on device buffers; returns one buffer per result.
    ///
    /// The arguments are checked before anything runs: their number, each
    /// one's dtype and shape, and that each lives on the device (and client)
    /// the program was compiled for. A mismatch is
    /// [`DeviceError::Arguments`] naming the argument and both types.
    pub fn execute(&self, args: &[&DeviceBuffer]) -> Result<Vec<DeviceBuffer>> {
        let device = self.check_single_device()?;
        self.check_specs(args.iter().map(|a| a.spec()))?;
        for (i, arg) in args.iter().enumerate() {
            self.check_placement(i, arg, device)?;
            self.check_alive(i, arg)?;
        }
        if let Some(program) = self.interpreted() {
            let data: Vec<&HostTensor> = args
                .iter()
                .filter_map(|a| a.interpreted().map(|(data, _)| &**data))
                .collect();
            let outs = self.checked_hosts(program.run(&data)?)?;
            return Ok(outs
                .into_iter()
                .map(|h| DeviceBuffer::from_interpreter_result(&program.interpreter, h))
                .collect());
        }
        let list: Vec<*mut ffi::PJRT_Buffer> = args
            .iter()
            .filter_map(|a| a.pjrt().map(|(_, raw)| raw))
            .collect();
        let mut outs = self.execute_raw(&[list])?;
        self.checked_buffers(outs.pop().unwrap_or_default())
    }

    /// Checks the number of arguments and each one's dtype and shape
    /// against the program's inputs.
    fn check_specs<'a>(&self, specs: impl ExactSizeIterator<Item = &'a TensorSpec>) -> Result<()> {
        self.check_count(specs.len())?;
        for (i, (given, spec)) in specs.zip(self.inputs()).enumerate() {
            if given != spec {
                let name = self.argument_name(i);
                return Err(self.arguments_error(format!("{name}: expected {spec}, got {given}")));
            }
        }
        Ok(())
    }

    /// How errors name argument `i`: `argument 3 (`p.layers.1.b`)` when the
    /// program was traced, else by its index.
    fn argument_name(&self, i: usize) -> String {
        self.param_name(i).map_or_else(
            || format!("argument {i}"),
            |n| format!("argument {i} (`{n}`)"),
        )
    }

    /// A donated buffer passed again: an error naming the argument, before
    /// the plugin's own ("buffer has been deleted or donated").
    fn check_alive(&self, i: usize, arg: &DeviceBuffer) -> Result<()> {
        if arg.is_deleted()? {
            let name = self.argument_name(i);
            return Err(self.arguments_error(format!(
                "{name} ({}) was donated to an earlier call, which reused its memory for a result; \
                 pass that call's result instead",
                arg.spec()
            )));
        }
        Ok(())
    }

    fn check_placement(&self, i: usize, arg: &DeviceBuffer, device: usize) -> Result<()> {
        let same_client = match (
            self.pjrt(),
            arg.pjrt(),
            self.interpreted(),
            arg.interpreted(),
        ) {
            (Some((mine, ..)), Some((theirs, _)), _, _) => Arc::ptr_eq(mine, theirs),
            (_, _, Some(mine), Some((_, theirs))) => Arc::ptr_eq(&mine.interpreter, theirs),
            _ => false,
        };
        if !same_client {
            return Err(self.arguments_error(format!(
                "argument {i} ({}) lives on another client (Device) than the one \
                 the kernel was compiled on",
                arg.spec()
            )));
        }
        if arg.device_index() != device {
            return Err(self.arguments_error(format!(
                "argument {i} ({}) is on device {}, the kernel runs on device {device}",
                arg.spec(),
                arg.device_index()
            )));
        }
        Ok(())
    }

    /// Runs a multi-device (SPMD or replicated) program: `args[d]` are the
    /// arguments (shards) for device [`devices()[d]`](Executable::devices);
    /// returns each device's results (shards) in the same order.
    ///
    /// Checked before running: the number of lists and of arguments, each
    /// argument's dtype and rank, and its device. Shard extents are checked by
    /// the plugin.
    pub fn execute_sharded(&self, args: &[Vec<&DeviceBuffer>]) -> Result<Vec<Vec<DeviceBuffer>>> {
        let devices = self.devices();
        if args.len() != devices.len() {
            return Err(self.arguments_error(format!(
                "expected {} argument lists (one per device {:?}), got {}",
                devices.len(),
                devices,
                args.len()
            )));
        }
        let mut lists = Vec::with_capacity(args.len());
        for (list, device) in args.iter().zip(devices) {
            self.check_count(list.len())?;
            for (i, (arg, spec)) in list.iter().zip(self.inputs()).enumerate() {
                if arg.spec().dtype != spec.dtype || arg.spec().rank() != spec.rank() {
                    return Err(self.arguments_error(format!(
                        "argument {i} on device {device}: expected a shard of {spec}, got {}",
                        arg.spec()
                    )));
                }
                self.check_placement(i, arg, *device)?;
                self.check_alive(i, arg)?;
            }
            lists.push(
                list.iter()
                    .filter_map(|a| a.pjrt().map(|(_, raw)| raw))
                    .collect(),
            );
        }
        if self.interpreted().is_some() {
            // One device: `args` is one list, checked above.
            return Ok(vec![self.execute(&args[0])?]);
        }
        self.execute_raw(&lists)?
            .into_iter()
            .map(|outs| self.checked_buffers(outs))
            .collect()
    }

    /// Runs on host tensors: checks them, copies them to the device, runs,
    /// and copies the results back.
    pub fn run(&self, args: &[&HostTensor]) -> Result<Vec<HostTensor>> {
        let device = self.check_single_device()?;
        self.check_specs(args.iter().map(|a| a.spec()))?;
        if let Some(program) = self.interpreted() {
            return self.checked_hosts(program.run(args)?);
        }
        let Some((client, ..)) = self.pjrt() else {
            return Err(self.arguments_error("not a PJRT executable".into()));
        };
        let buffers = args
            .iter()
            .map(|a| DeviceBuffer::from_host(client, a, device))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
        self.execute(&refs)?
            .iter()
            .map(DeviceBuffer::to_host)
            .collect()
    }

    /// `PJRT_LoadedExecutable_Execute` on checked argument lists (one per device).
    fn execute_raw(&self, lists: &[Vec<*mut ffi::PJRT_Buffer>]) -> Result<Vec<Vec<DeviceBuffer>>> {
        let Some((client, _, loaded)) = self.pjrt() else {
            return Err(self.arguments_error("not a PJRT executable".into()));
        };
        let api = client.api();
        let num_outputs = self.num_outputs();
        let arg_ptrs: Vec<*const *mut ffi::PJRT_Buffer> =
            lists.iter().map(|l| l.as_ptr()).collect();
        let mut outs: Vec<Vec<*mut ffi::PJRT_Buffer>> = lists
            .iter()
            .map(|_| vec![std::ptr::null_mut(); num_outputs])
            .collect();
        let out_ptrs: Vec<*mut *mut ffi::PJRT_Buffer> =
            outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let mut options = ffi::PJRT_ExecuteOptions::new();
        // A multi-process program's launch id must agree across the
        // processes, which each count their own executions (see `launch`).
        options.launch_id = if client.is_multi_process() {
            launch::next_of_program(self.launch_seed())
        } else {
            launch::next_in_process()
        };
        let mut args = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        args.executable = loaded;
        args.options = &mut options;
        args.argument_lists = arg_ptrs.as_ptr();
        args.num_devices = lists.len();
        args.num_args = self.inputs().len();
        args.output_lists = out_ptrs.as_ptr();
        // SAFETY: the argument lists hold `num_devices` x `num_args` live
        // buffers of this client on the executable's devices (checked by the
        // callers); the output lists have `num_devices` x `num_outputs` slots
        // (num_outputs from PJRT_Executable_NumOutputs); `options` is non-NULL
        // and zeroed; everything outlives the call. No completion events are
        // requested (`device_complete_events` is NULL).
        let executed = unsafe { pjrt_call!(api, PJRT_LoadedExecutable_Execute, &mut args) };
        // Take ownership of every returned buffer before looking at the error,
        // so none leaks.
        let mut results = Vec::with_capacity(outs.len());
        let mut failure = None;
        for list in &outs {
            let mut device_results = Vec::with_capacity(list.len());
            for raw in list.iter().filter(|p| !p.is_null()) {
                // SAFETY: each non-null slot is a fresh output buffer we own.
                match unsafe { DeviceBuffer::from_raw(client, *raw) } {
                    Ok(b) => device_results.push(b),
                    Err(e) => failure = failure.or(Some(e)),
                }
            }
            results.push(device_results);
        }
        executed?;
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some(short) = results.iter().find(|r| r.len() != num_outputs) {
            return Err(DeviceError::UnexpectedResult {
                call: "PJRT_LoadedExecutable_Execute",
                message: format!(
                    "kernel `{}` got {} of its {num_outputs} outputs on a device",
                    self.name(),
                    short.len()
                ),
            }
            .into());
        }
        Ok(results)
    }
}
