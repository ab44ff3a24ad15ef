//! Profiles of compiled kernels: trace and compile time, run time over
//! repeated executions, FLOPs and bytes (from XLA's cost analysis, or counted
//! from the graph), achieved throughput, and compiled memory.

mod scope;

use std::fmt::Write;
use std::time::{Duration, Instant};

pub use scope::{profile_kernel, KernelCalls, ScopeReport};

use crate::error::{Location, Result};
use crate::host::HostTensor;
use crate::ir::{Graph, Op};
use crate::kernel::Kernel;
use crate::runtime::{Device, MemoryStats, Program};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::Outputs;

/// How many times to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs (at least 1).
    pub runs: usize,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            warmup: 3,
            runs: 20,
        }
    }
}

/// Run-time statistics, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Timing {
    /// Fastest run.
    pub min: f64,
    /// Median run.
    pub median: f64,
    /// Slowest run.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl Timing {
    fn of(mut d: Vec<Duration>) -> Timing {
        d.sort();
        let s: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
        let n = s.len().max(1);
        Timing {
            min: s.first().copied().unwrap_or(0.0),
            median: s.get(s.len() / 2).copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
            mean: s.iter().sum::<f64>() / n as f64,
        }
    }
}

/// Where the FLOP and byte counts came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum CostSource {
    /// XLA's cost analysis of the compiled program.
    Xla,
    /// Counted from the traced graph (the plugin has no cost analysis).
    Graph,
}

/// A kernel's profile. [`Profile::summary`] prints it as a table,
/// [`Profile::to_json`] serializes it.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Profile {
    /// The kernel.
    pub kernel: String,
    /// Argument types.
    pub inputs: Vec<TensorSpec>,
    /// Result types.
    pub outputs: Vec<TensorSpec>,
    /// Tracing and lowering time.
    pub trace_seconds: f64,
    /// PJRT compile time.
    pub compile_seconds: f64,
    /// Untimed runs.
    pub warmup: usize,
    /// Timed runs.
    pub runs: usize,
    /// Execution time on device-resident arguments, until the results are ready.
    pub run: Timing,
    /// Floating-point operations per run.
    pub flops: f64,
    /// Bytes read and written per run.
    pub bytes_accessed: f64,
    /// Transcendental operations per run.
    pub transcendentals: f64,
    /// The arguments chosen by autotuning, as `name: value` (empty unless
    /// [`KernelConfig::autotune`](crate::config::KernelConfig::autotune) is on and
    /// the kernel has a tunable argument).
    pub tuned: Vec<String>,
    /// Where `flops`/`bytes_accessed` came from.
    pub cost_source: CostSource,
    /// Compiled memory (when the plugin reports it).
    pub memory: Option<MemoryStats>,
}

impl Profile {
    /// Achieved GFLOP/s at the median run time.
    pub fn gflops_per_second(&self) -> f64 {
        if self.run.median > 0.0 {
            self.flops / self.run.median / 1e9
        } else {
            0.0
        }
    }

    /// Achieved GB/s at the median run time.
    pub fn gb_per_second(&self) -> f64 {
        if self.run.median > 0.0 {
            self.bytes_accessed / self.run.median / 1e9
        } else {
            0.0
        }
    }

    /// A human-readable table.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let ins: Vec<String> = self.inputs.iter().map(|t| t.to_string()).collect();
        let outs: Vec<String> = self.outputs.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(
            s,
            "kernel {}({}) -> ({})",
            self.kernel,
            ins.join(", "),
            outs.join(", ")
        );
        let row = |s: &mut String, k: &str, v: String| {
            let _ = writeln!(s, "  {k:<22} {v}");
        };
        row(&mut s, "trace + lower", ms(self.trace_seconds));
        row(&mut s, "compile", ms(self.compile_seconds));
        row(
            &mut s,
            &format!("run ({} runs)", self.runs),
            format!(
                "min {}  median {}  max {}",
                ms(self.run.min),
                ms(self.run.median),
                ms(self.run.max)
            ),
        );
        let src = match self.cost_source {
            CostSource::Xla => "XLA",
            CostSource::Graph => "graph",
        };
        row(&mut s, "flops", format!("{:.4e} ({src})", self.flops));
        row(
            &mut s,
            "bytes accessed",
            format!("{:.4e}", self.bytes_accessed),
        );
        row(
            &mut s,
            "throughput",
            format!(
                "{:.2} GFLOP/s, {:.2} GB/s",
                self.gflops_per_second(),
                self.gb_per_second()
            ),
        );
        for t in &self.tuned {
            row(&mut s, "tuned", t.clone());
        }
        if let Some(m) = &self.memory {
            row(
                &mut s,
                "memory",
                format!(
                    "peak {}  temp {}  arguments {}  outputs {}",
                    mib(m.peak_bytes),
                    mib(m.temp_bytes),
                    mib(m.argument_bytes),
                    mib(m.output_bytes)
                ),
            );
        }
        s
    }

    /// The profile as a JSON object (seconds, counts and bytes as numbers).
    pub fn to_json(&self) -> String {
        let specs = |v: &[TensorSpec]| {
            v.iter()
                .map(|t| json_str(&t.to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = String::from("{");
        let _ = write!(
            s,
            "\"kernel\": {}, \"inputs\": [{}], \"outputs\": [{}], \"trace_seconds\": {}, \"compile_seconds\": {}, \
             \"warmup\": {}, \"runs\": {}, \"run_seconds\": {{\"min\": {}, \"median\": {}, \"max\": {}, \"mean\": {}}}, \
             \"flops\": {}, \"bytes_accessed\": {}, \"transcendentals\": {}, \"cost_source\": \"{}\", \
             \"gflops_per_second\": {}, \"gb_per_second\": {}",
            json_str(&self.kernel),
            specs(&self.inputs),
            specs(&self.outputs),
            num(self.trace_seconds),
            num(self.compile_seconds),
            self.warmup,
            self.runs,
            num(self.run.min),
            num(self.run.median),
            num(self.run.max),
            num(self.run.mean),
            num(self.flops),
            num(self.bytes_accessed),
            num(self.transcendentals),
            if self.cost_source == CostSource::Xla { "xla" } else { "graph" },
            num(self.gflops_per_second()),
            num(self.gb_per_second()),
        );
        match &self.memory {
            Some(m) => {
                let _ = write!(
                    s,
                    ", \"memory\": {{\"peak_bytes\": {}, \"temp_bytes\": {}, \"argument_bytes\": {}, \"output_bytes\": {}, \"generated_code_bytes\": {}}}",
                    m.peak_bytes, m.temp_bytes, m.argument_bytes, m.output_bytes, m.generated_code_bytes
                );
            }
            None => s.push_str(", \"memory\": null"),
        }
        let tuned: Vec<String> = self.tuned.iter().map(|t| json_str(t)).collect();
        let _ = write!(s, ", \"tuned\": [{}]", tuned.join(", "));
        s.push('}');
        s
    }
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn mib(b: i64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".to_string()
    }
}

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    json_str(s)
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// (flops, bytes accessed, transcendentals) counted from the graph: 2·M·N·K
/// per dot, one per element for elementwise ops and reductions, the
/// parameters and results as bytes.
pub fn graph_cost(g: &Graph) -> (f64, f64, f64) {
    let (mut flops, mut trans) = (0.0, 0.0);
    for n in &g.nodes {
        let out: f64 = n
            .results
            .iter()
            .map(|&v| g.values[v].spec.num_elements() as f64)
            .sum();
        match &n.op {
            Op::DotGeneral { dims, .. } => {
                let a = &g.values[n.operands[0]].spec;
                let k: usize = dims.lhs_contract.iter().map(|&d| a.shape[d]).product();
                flops += 2.0 * out * k as f64;
            }
            Op::Unary(u) => {
                use crate::ir::UnaryOp::*;
                flops += out;
                if matches!(
                    u,
                    Exp | Expm1
                        | Log
                        | Log1p
                        | Tanh
                        | Logistic
                        | Sin
                        | Cos
                        | Tan
                        | Erf
                        | Rsqrt
                        | Sqrt
                        | Cbrt
                ) {
                    trans += out;
                }
            }
            Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp => flops += out,
            Op::Reduce { .. } | Op::ArgReduce { .. } => {
                flops += g.values[n.operands[0]].spec.num_elements() as f64;
            }
            _ => {}
        }
    }
    let bytes: f64 = g
        .input_specs()
        .iter()
        .chain(g.output_specs().iter())
        .map(|s| s.size_in_bytes() as f64)
        .sum();
    (flops, bytes, trans)
}

/// Traces (with `trace`), compiles afresh and runs a kernel on `args`,
/// timing each stage. The executable is not taken from or put into the
/// compile cache, so the compile time is real.
pub fn profile_graph(
    device: &Device,
    trace: impl FnOnce() -> Result<Graph>,
    args: &[&HostTensor],
    options: ProfileOptions,
) -> Result<Profile> {
    let t0 = Instant::now();
    let graph = std::sync::Arc::new(trace()?);
    let program = Program::for_device(graph.clone(), device);
    let trace_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let exe = device.compile(&program)?;
    let compile_seconds = t1.elapsed().as_secs_f64();
    let bufs = args
        .iter()
        .map(|a| device.to_device(a))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<_> = bufs.iter().collect();
    let once = || -> Result<Duration> {
        let t = Instant::now();
        let outs = exe.execute(&refs)?;
        for o in &outs {
            o.block_until_ready()?;
        }
        Ok(t.elapsed())
    };
    for _ in 0..options.warmup {
        once()?;
    }
    let times = (0..options.runs.max(1))
        .map(|_| once())
        .collect::<Result<Vec<_>>>()?;
    let (gf, gb, gt) = graph_cost(&graph);
    let (flops, bytes_accessed, transcendentals, cost_source) = match exe.cost_analysis() {
        Ok(c) if c.flops.is_some() => (
            c.flops.unwrap_or(gf),
            c.bytes_accessed.unwrap_or(gb),
            c.transcendentals.unwrap_or(gt),
            CostSource::Xla,
        ),
        _ => (gf, gb, gt, CostSource::Graph),
    };
    Ok(Profile {
        kernel: graph.name.clone(),
        inputs: program.inputs,
        outputs: program.outputs,
        trace_seconds,
        compile_seconds,
        warmup: options.warmup,
        runs: options.runs.max(1),
        run: Timing::of(times),
        flops,
        bytes_accessed,
        transcendentals,
        tuned: Vec::new(),
        cost_source,
        memory: exe.memory_stats().ok(),
    })
}

impl<F, O> Kernel<F>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    /// Traces, compiles afresh (bypassing the cache) and times the kernel on
    /// `args`; see [`Profile`].
    #[track_caller]
    pub fn profile(
        &self,
        device: &Device,
        args: &[&HostTensor],
        options: ProfileOptions,
    ) -> Result<Profile> {
        let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
        let loc = Location::caller();
        self.check_arity(specs.len(), loc.clone())?;
        profile_graph(
            &self.target(device),
            || self.trace_at(&specs, loc),
            args,
            options,
        )
    }
}
