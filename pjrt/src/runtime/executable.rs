//! Compiling StableHLO with `PJRT_Client_Compile` and running the result.

use std::ffi::c_char;
use std::fmt;
use std::sync::Arc;

use super::buffer::{from_pjrt_type, pjrt_type_name};
use super::cache::disk;
use super::client::Client;
use super::interpreter_backend::{InterpProgram, Interpreter};
use super::launch;
use super::options::{compile_options, platform_overrides, HostCpu};
use super::pjrt::args::Args;
use super::pjrt::call::pjrt_call;
use super::pjrt::ffi;
use crate::config::Platform;
use crate::error::{DeviceError, Result};
use crate::interp::Finding;
use crate::ir::{check_outputs, CheckSite, Graph, TreeDef};
use crate::lower::{compile_hints, lower, split_row_reductions, CompileHints};
use crate::shape::TensorSpec;

/// What to compile: a StableHLO module and the types of its `@main`, and
/// the traced graph it was lowered from when tessel traced it (what the
/// [interpreter](super::Device::interpreter) runs).
#[derive(Clone, Debug)]
pub struct Program {
    /// The kernel's name, used in error messages.
    pub name: String,
    /// StableHLO (or MHLO/CHLO) module text containing `func.func @main`.
    pub mlir: String,
    /// The argument types of `@main`, in order.
    pub inputs: Vec<TensorSpec>,
    /// The result types of `@main`, in order.
    pub outputs: Vec<TensorSpec>,
    /// SPMD partitions (1 unless sharded; more than 1 turns on XLA's SPMD partitioner).
    pub num_partitions: usize,
    /// Replicas (1 unless data-parallel replication is wanted).
    pub num_replicas: usize,
    /// What lowering learned about the program, for choosing compile
    /// options ([`compile_hints`](crate::lower::compile_hints) of its graph;
    /// the default for hand-written text).
    pub hints: CompileHints,
    /// The traced graph the text was lowered from (`None` for hand-written
    /// text). PJRT compiles the text; the interpreter evaluates the graph.
    pub graph: Option<Arc<Graph>>,
}

impl PartialEq for Program {
    /// The same text, types, layout and hints, and the same graph (the same
    /// allocation, or none on both sides).
    fn eq(&self, other: &Program) -> bool {
        self.name == other.name
            && self.mlir == other.mlir
            && self.inputs == other.inputs
            && self.outputs == other.outputs
            && self.num_partitions == other.num_partitions
            && self.num_replicas == other.num_replicas
            && self.hints == other.hints
            && match (&self.graph, &other.graph) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Program {
    /// A single-device program (1 partition, 1 replica).
    pub fn new(
        name: impl Into<String>,
        mlir: impl Into<String>,
        inputs: Vec<TensorSpec>,
        outputs: Vec<TensorSpec>,
    ) -> Program {
        Program {
            name: name.into(),
            mlir: mlir.into(),
            inputs,
            outputs,
            num_partitions: 1,
            num_replicas: 1,
            hints: CompileHints::default(),
            graph: None,
        }
    }

    /// The checks its results report (those of its graph; none for
    /// hand-written text).
    pub fn checks(&self) -> Vec<CheckSite> {
        match &self.graph {
            Some(g) if g.output_specs() == self.outputs => g.checks.clone(),
            _ => Vec::new(),
        }
    }

    /// The structure of its body's results (that of its graph; none for
    /// hand-written text).
    pub fn output_tree(&self) -> Option<Arc<TreeDef>> {
        self.graph.as_ref().and_then(|g| g.output_tree.clone())
    }

    /// Its parameters' names (those of its graph; none for hand-written
    /// text).
    pub fn param_names(&self) -> Vec<String> {
        self.graph
            .as_ref()
            .map(|g| g.param_names.clone())
            .unwrap_or_default()
    }

    /// The single-device program of a traced `graph`: its lowered text,
    /// its types, its compile hints, and the graph itself.
    pub fn from_graph(graph: impl Into<Arc<Graph>>) -> Program {
        let graph: Arc<Graph> = graph.into();
        Program::with_text(lower(&graph), graph)
    }

    /// The program of `graph` compiled as `mlir` (its lowered text, or that
    /// of a graph prepared from it for a backend).
    fn with_text(mlir: String, graph: Arc<Graph>) -> Program {
        Program {
            name: graph.name.clone(),
            mlir,
            inputs: graph.input_specs(),
            outputs: graph.output_specs(),
            num_partitions: 1,
            num_replicas: graph.replicas.max(1),
            hints: compile_hints(&graph),
            graph: Some(graph),
        }
    }

    /// [`from_graph`](Self::from_graph), with the text prepared for
    /// `device`'s plugin: where
    /// [`Workaround::SplitRowReductions`](super::Workaround::SplitRowReductions)
    /// applies (the pinned CPU plugin), long row reductions are split so
    /// that XLA fuses them with what feeds them
    /// ([`split_row_reductions`](crate::lower::split_row_reductions)). The
    /// graph kept for the interpreter is the traced one.
    pub fn for_device(graph: impl Into<Arc<Graph>>, device: &super::Device) -> Program {
        let split = device.platform() == Some(Platform::Cpu)
            && device
                .plugin_identity()
                .is_some_and(|id| id.applies(super::Workaround::SplitRowReductions));
        Program::lowered(graph.into(), split)
    }

    /// [`from_graph`](Self::from_graph), with the text prepared for
    /// `platform`'s compiler as for the pinned plugin of that platform: on
    /// CPU, long row reductions are split (see [`for_device`](Self::for_device),
    /// which asks the plugin instead).
    pub fn for_platform(graph: impl Into<Arc<Graph>>, platform: Option<Platform>) -> Program {
        Program::lowered(graph.into(), platform == Some(Platform::Cpu))
    }

    /// `graph` lowered, its long row reductions split first when `split`.
    fn lowered(graph: Arc<Graph>, split: bool) -> Program {
        let mlir = if split {
            lower(&split_row_reductions(&graph))
        } else {
            lower(&graph)
        };
        Program::with_text(mlir, graph)
    }
}

/// Owns a `PJRT_LoadedExecutable` and the `PJRT_Executable` obtained from it.
struct Compiled {
    client: Arc<Client>,
    loaded: *mut ffi::PJRT_LoadedExecutable,
    executable: *mut ffi::PJRT_Executable,
}

impl Drop for Compiled {
    fn drop(&mut self) {
        let api = self.client.api();
        if !self.executable.is_null() {
            let mut args = ffi::PJRT_Executable_Destroy_Args::new();
            args.executable = self.executable;
            // SAFETY: we own this executable (from GetExecutable) and destroy
            // it exactly once. A failure to destroy it is ignored.
            let _ = unsafe { pjrt_call!(api, PJRT_Executable_Destroy, &mut args) };
        }
        let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
        args.executable = self.loaded;
        // SAFETY: we own the loaded executable and destroy it exactly once,
        // after the last `Executable` clone is gone; the client outlives it.
        // A failure to destroy it is ignored.
        let _ = unsafe { pjrt_call!(api, PJRT_LoadedExecutable_Destroy, &mut args) };
    }
}

struct Inner {
    backend: Backend,
    name: String,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    num_outputs: usize,
    num_partitions: usize,
    num_replicas: usize,
    /// Client device indices the executable runs on, in PJRT execution order.
    devices: Vec<usize>,
    /// Where its launch ids start in a multi-process client
    /// ([`launch::seed_of`] its program text; 0 elsewhere, where it is not
    /// read).
    launch_seed: u32,
    /// The program's checks, reported by its last results.
    checks: Vec<CheckSite>,
    /// The parameters' names, when the program was traced.
    param_names: Vec<String>,
    /// The structure of the body's results, when the program was traced.
    output_tree: Option<Arc<TreeDef>>,
}

/// What runs an executable.
enum Backend {
    /// A PJRT executable.
    Pjrt(Compiled),
    /// The interpreter, on the program's graph.
    Interpreter(InterpProgram),
}

// SAFETY: PJRT loaded executables may be executed, queried and destroyed from
// any thread; `Compiled` is immutable after compilation and destroys its
// handles only in Drop, when no other reference exists.
unsafe impl Send for Compiled {}
// SAFETY: as above: shared access only executes and queries, which PJRT
// allows concurrently.
unsafe impl Sync for Compiled {}

/// A compiled program, ready to run on the device it was compiled for.
///
/// Cheap to clone (shared); keeps its device (client) alive.
#[derive(Clone)]
pub struct Executable {
    inner: Arc<Inner>,
}

/// A [`DeviceError::Compile`] of `program` saying `message`.
fn compile_error_of(program: &Program, message: String) -> crate::Error {
    DeviceError::Compile {
        kernel: program.name.clone(),
        message,
    }
    .into()
}

/// Compiles `program` on `client`, or loads the executable the
/// [persistent cache](super::executable_cache_dir) holds for it.
pub(crate) fn compile(client: &Arc<Client>, program: &Program) -> Result<Executable> {
    let compile_error = |message: String| compile_error_of(program, message);
    if program.num_partitions == 0 || program.num_replicas == 0 {
        return Err(compile_error(format!(
            "num_partitions ({}) and num_replicas ({}) must be at least 1",
            program.num_partitions, program.num_replicas
        )));
    }
    // XLA aborts the process on a tensor whose byte size overflows int64.
    for spec in program.inputs.iter().chain(&program.outputs) {
        if let Err(e) = spec.check_size() {
            return Err(compile_error(e.to_string()));
        }
    }
    let needed = program.num_partitions.saturating_mul(program.num_replicas);
    if needed > client.devices().len() {
        return Err(compile_error(format!(
            "{} partitions x {} replicas need {needed} devices, the {} client has {}",
            program.num_partitions,
            program.num_replicas,
            client.platform_name(),
            client.devices().len()
        )));
    }
    let options = compile_options(
        program.num_replicas,
        program.num_partitions,
        &platform_overrides(client.platform(), &program.hints, HostCpu::detect(), |w| {
            client.identity().applies(w)
        }),
    );
    let key = disk::key(client, &program.mlir, &options);
    let (loaded, from_disk) = match disk::load(client, &key) {
        Some(loaded) => (loaded, true),
        None => (pjrt_compile(client, program, &options)?, false),
    };
    // Owned from here: destroyed on every error below.
    let compiled = Compiled {
        client: Arc::clone(client),
        loaded,
        executable: std::ptr::null_mut(),
    };
    finish(program, compiled, (!from_disk).then_some(key))
}

/// Compiles `program`'s text with `PJRT_Client_Compile`.
fn pjrt_compile(
    client: &Arc<Client>,
    program: &Program,
    options: &[u8],
) -> Result<*mut ffi::PJRT_LoadedExecutable> {
    let api = client.api();
    let compile_error = |message: String| compile_error_of(program, message);
    let format = "mlir";
    let mut prog = ffi::PJRT_Program::new();
    // PJRT declares `code` mutable, but Compile only reads it.
    prog.code = program.mlir.as_ptr().cast::<c_char>().cast_mut();
    prog.code_size = program.mlir.len();
    prog.format = format.as_ptr().cast::<c_char>();
    prog.format_size = format.len();
    let mut args = ffi::PJRT_Client_Compile_Args::new();
    args.client = client.raw();
    args.program = &prog;
    args.compile_options = options.as_ptr().cast::<c_char>();
    args.compile_options_size = options.len();
    // SAFETY: the client is live; the program text, format and options
    // (non-empty, a valid CompileOptionsProto setting replicas and
    // partitions) outlive the call; Compile does not write through `code`.
    unsafe { pjrt_call!(api, PJRT_Client_Compile, &mut args) }.map_err(|e| match e {
        // XLA's rejection of the program; out of memory and a plugin
        // without Compile stay what they are.
        DeviceError::Pjrt { message, .. } => compile_error(message.trim_end().to_string()),
        other => other.into(),
    })?;
    if args.executable.is_null() {
        return Err(compile_error(
            "PJRT_Client_Compile returned no executable".into(),
        ));
    }
    Ok(args.executable)
}

/// Queries a loaded executable and checks it against `program`; writes it
/// to the persistent cache under `store_as` once it passed.
fn finish(
    program: &Program,
    mut compiled: Compiled,
    store_as: Option<[u8; 32]>,
) -> Result<Executable> {
    let client = Arc::clone(&compiled.client);
    let client = &client;
    let api = client.api();
    let compile_error = |message: String| compile_error_of(program, message);

    let mut get = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
    get.loaded_executable = compiled.loaded;
    // SAFETY: the loaded executable is live; the executable the call returns
    // is owned (and destroyed) by `compiled`.
    unsafe { pjrt_call!(api, PJRT_LoadedExecutable_GetExecutable, &mut get) }?;
    compiled.executable = get.executable;
    if compiled.executable.is_null() {
        return Err(DeviceError::NoResult {
            call: "PJRT_LoadedExecutable_GetExecutable",
            what: "executable",
        }
        .into());
    }

    let mut n = ffi::PJRT_Executable_NumOutputs_Args::new();
    n.executable = compiled.executable;
    // SAFETY: the executable is live (checked non-null above, owned by `compiled`).
    unsafe { pjrt_call!(api, PJRT_Executable_NumOutputs, &mut n) }?;
    let num_outputs = n.num_outputs;
    if num_outputs != program.outputs.len() {
        return Err(compile_error(format!(
            "the program declares {} outputs but @main returns {num_outputs}",
            program.outputs.len()
        )));
    }

    let mut d = ffi::PJRT_LoadedExecutable_AddressableDevices_Args::new();
    d.executable = compiled.loaded;
    // SAFETY: the loaded executable is live (owned by `compiled`).
    unsafe { pjrt_call!(api, PJRT_LoadedExecutable_AddressableDevices, &mut d) }?;
    let raw_devices: &[*mut ffi::PJRT_Device] = if d.addressable_devices.is_null() {
        &[]
    } else {
        // SAFETY: the executable owns `num_addressable_devices` device pointers
        // at `addressable_devices`; copied just below.
        unsafe { std::slice::from_raw_parts(d.addressable_devices, d.num_addressable_devices) }
    };
    let devices = raw_devices
        .iter()
        .map(|p| client.device_index(*p))
        .collect::<Option<Vec<usize>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| DeviceError::UnexpectedResult {
            call: "PJRT_LoadedExecutable_AddressableDevices",
            message: format!(
                "kernel `{}` was compiled for devices this client cannot address",
                program.name
            ),
        })?;

    let inner = Inner {
        backend: Backend::Pjrt(compiled),
        name: program.name.clone(),
        inputs: program.inputs.clone(),
        outputs: program.outputs.clone(),
        num_outputs,
        num_partitions: program.num_partitions,
        num_replicas: program.num_replicas,
        devices,
        launch_seed: if client.is_multi_process() {
            launch::seed_of(&program.mlir)
        } else {
            0
        },
        checks: program.checks(),
        param_names: program.param_names(),
        output_tree: program.output_tree(),
    };
    if let Backend::Pjrt(compiled) = &inner.backend {
        if inner.devices.len() == 1 {
            check_output_types(&inner, compiled)?;
        }
        if let Some(key) = store_as {
            disk::store(client, &key, compiled.executable);
        }
    }
    Ok(Executable {
        inner: Arc::new(inner),
    })
}

/// The interpreter's "compilation" of `program`: its graph, checked against
/// the program's types, kept for evaluation.
pub(crate) fn for_interpreter(
    interpreter: &Arc<Interpreter>,
    program: &Program,
) -> Result<Executable> {
    let compile_error = |message: String| compile_error_of(program, message);
    let Some(graph) = &program.graph else {
        return Err(compile_error(
            "the interpreter runs programs traced by tessel; this one is StableHLO text only \
             (build it with Program::from_graph, or run it on a PJRT device)"
                .into(),
        ));
    };
    if program.num_partitions != 1 || program.num_replicas != 1 {
        return Err(compile_error(format!(
            "the interpreter runs single-device programs; this one has {} partitions x {} replicas",
            program.num_partitions, program.num_replicas
        )));
    }
    for spec in program.inputs.iter().chain(&program.outputs) {
        spec.check_size()
            .map_err(|e| compile_error(e.to_string()))?;
    }
    if graph.input_specs() != program.inputs || graph.output_specs() != program.outputs {
        return Err(compile_error(format!(
            "the program's types ({:?} -> {:?}) are not its graph's ({:?} -> {:?})",
            program.inputs,
            program.outputs,
            graph.input_specs(),
            graph.output_specs()
        )));
    }
    let inner = Inner {
        backend: Backend::Interpreter(InterpProgram::new(
            Arc::clone(graph),
            Arc::clone(interpreter),
        )),
        name: program.name.clone(),
        inputs: program.inputs.clone(),
        outputs: program.outputs.clone(),
        num_outputs: program.outputs.len(),
        num_partitions: 1,
        num_replicas: 1,
        devices: vec![0],
        launch_seed: 0,
        checks: program.checks(),
        param_names: program.param_names(),
        output_tree: program.output_tree(),
    };
    Ok(Executable {
        inner: Arc::new(inner),
    })
}

/// Checks the declared output element types against the compiled ones, so
/// that [`Executable::outputs`] is truthful. Skipped if the plugin lacks the query.
fn check_output_types(inner: &Inner, compiled: &Compiled) -> Result<()> {
    let api = compiled.client.api();
    let mut args = ffi::PJRT_Executable_OutputElementTypes_Args::new();
    args.executable = compiled.executable;
    // SAFETY: the executable is live (owned by `inner`).
    let queried = unsafe { pjrt_call!(api, PJRT_Executable_OutputElementTypes, &mut args) };
    if queried.is_err() || args.output_types.is_null() {
        return Ok(());
    }
    // SAFETY: the executable owns `num_output_types` types at `output_types`.
    let types = unsafe { std::slice::from_raw_parts(args.output_types, args.num_output_types) };
    for (i, (declared, actual)) in inner.outputs.iter().zip(types).enumerate() {
        if from_pjrt_type(*actual) != Some(declared.dtype) {
            return Err(DeviceError::Compile {
                kernel: inner.name.clone(),
                message: format!(
                    "result {i} of @main has element type {}, the program declares {declared}",
                    pjrt_type_name(*actual)
                ),
            }
            .into());
        }
    }
    check_output_shapes(inner, compiled)
}

/// As [`check_output_types`], for the result shapes.
fn check_output_shapes(inner: &Inner, compiled: &Compiled) -> Result<()> {
    let api = compiled.client.api();
    let mut args = ffi::PJRT_Executable_OutputDimensions_Args::new();
    args.executable = compiled.executable;
    // SAFETY: the executable is live (owned by `inner`).
    let queried = unsafe { pjrt_call!(api, PJRT_Executable_OutputDimensions, &mut args) };
    if queried.is_err() || args.dim_sizes.is_null() || args.num_outputs != inner.outputs.len() {
        return Ok(());
    }
    // SAFETY: the executable owns `num_outputs` ranks at `dim_sizes`.
    let ranks = unsafe { std::slice::from_raw_parts(args.dim_sizes, args.num_outputs) };
    let total: usize = ranks.iter().sum();
    let dims: &[i64] = if total == 0 {
        &[]
    } else if args.dims.is_null() {
        return Ok(());
    } else {
        // SAFETY: and the sum of those ranks of extents at `dims`.
        unsafe { std::slice::from_raw_parts(args.dims, total) }
    };
    let mut at = 0;
    for (i, (declared, rank)) in inner.outputs.iter().zip(ranks).enumerate() {
        let actual = &dims[at..at + rank];
        at += rank;
        let same = actual.len() == declared.rank()
            && actual
                .iter()
                .zip(&declared.shape)
                .all(|(a, d)| usize::try_from(*a).ok() == Some(*d));
        if !same {
            return Err(DeviceError::Compile {
                kernel: inner.name.clone(),
                message: format!(
                    "result {i} of @main has shape {actual:?}, the program declares {declared}"
                ),
            }
            .into());
        }
    }
    Ok(())
}

impl Executable {
    /// The PJRT client, executable and loaded executable; `None` on the
    /// interpreter.
    pub(crate) fn pjrt(
        &self,
    ) -> Option<(
        &Arc<Client>,
        *mut ffi::PJRT_Executable,
        *mut ffi::PJRT_LoadedExecutable,
    )> {
        match &self.inner.backend {
            Backend::Pjrt(c) => Some((&c.client, c.executable, c.loaded)),
            Backend::Interpreter(_) => None,
        }
    }

    /// The interpreter's program; `None` for a PJRT executable.
    pub(crate) fn interpreted(&self) -> Option<&InterpProgram> {
        match &self.inner.backend {
            Backend::Pjrt(_) => None,
            Backend::Interpreter(p) => Some(p),
        }
    }

    /// Whether this executable runs on the interpreter.
    pub fn is_interpreted(&self) -> bool {
        self.interpreted().is_some()
    }

    /// What the interpreter's checks found over every run of this
    /// executable so far, one entry per op and kind with the count summed
    /// (always empty for a PJRT executable). The macros' `compile`
    /// companion returns the cached executable its `run` uses, so
    /// `my_kernel::compile(&dev, ..)?.findings()` reads a kernel's findings.
    pub fn findings(&self) -> Vec<Finding> {
        self.interpreted()
            .map(InterpProgram::findings)
            .unwrap_or_default()
    }

    /// Results per device, from `PJRT_Executable_NumOutputs`.
    pub(crate) fn num_outputs(&self) -> usize {
        self.inner.num_outputs
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The argument types, in order.
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inner.inputs
    }

    /// The result types, in order: the body's (a program's
    /// [checks](crate::ir::CheckSite) are read and removed by each run).
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.inner.outputs[..self.inner.outputs.len() - check_outputs(&self.inner.checks)]
    }

    /// The name of parameter `i`, when the program was traced.
    pub(crate) fn param_name(&self, i: usize) -> Option<&str> {
        self.inner.param_names.get(i).map(String::as_str)
    }

    /// The structure of the body's results (a tensor, a tuple, a
    /// `#[derive(Tree)]` struct, ...) when the program was traced: what
    /// `tessel::kernel::KernelOutput` rebuilds from
    /// [`outputs`](Self::outputs).
    pub fn output_tree(&self) -> Option<&Arc<TreeDef>> {
        self.inner.output_tree.as_ref()
    }

    /// The program's checks (empty for most programs).
    pub fn check_sites(&self) -> &[CheckSite] {
        &self.inner.checks
    }

    /// SPMD partitions it was compiled for.
    pub fn num_partitions(&self) -> usize {
        self.inner.num_partitions
    }

    /// Replicas it was compiled for.
    pub fn num_replicas(&self) -> usize {
        self.inner.num_replicas
    }

    /// The device indices it runs on, in the order of
    /// [`execute_sharded`](Executable::execute_sharded)'s argument lists
    /// (`[0]` for a single-device program).
    pub fn devices(&self) -> &[usize] {
        &self.inner.devices
    }

    /// Where its launch ids start in a multi-process client.
    pub(crate) fn launch_seed(&self) -> u32 {
        self.inner.launch_seed
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable")
            .field("name", &self.inner.name)
            .field("inputs", &self.inner.inputs)
            .field("outputs", &self.inner.outputs)
            .field("devices", &self.inner.devices)
            .finish()
    }
}
