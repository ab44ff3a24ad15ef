//! Autotuning: a kernel's tunable static arguments (block sizes) chosen by
//! measurement on first use.
//!
//! With [`KernelConfig::autotune`] on, a companion's `run`, `call` and
//! `profile` ask each static argument for its
//! [`tuning_candidates`](super::StaticArg::tuning_candidates) under the
//! actual argument specs, run the kernel once with each (trace, compile and
//! a first run; a candidate that fails, such as a block size the shapes do
//! not allow, is skipped), time up to three more runs of each, and keep the
//! fastest by its minimum. The choice is remembered per kernel, argument
//! specs, static arguments, configuration and device: in memory, and as a
//! `.tuned` file beside the persistent cache's executables (see
//! [`executable_cache_dir`](crate::runtime::executable_cache_dir)), so a
//! second process measures nothing. A stored choice that is no longer
//! among the candidates is measured again. On the interpreter nothing is
//! tuned, and neither is a `call` that donates buffers (timing runs the
//! kernel several times on the same buffers).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{Kernel, KernelConfig, StaticKey};
use crate::error::Result;
use crate::host::HostTensor;
use crate::runtime::{read_tuning, write_tuning, Device, DeviceBuffer};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::Outputs;

/// Timed runs per candidate after the first (untimed) one.
const TIMED_RUNS: usize = 3;
/// A candidate whose first timed run takes longer than this is timed once.
const SLOW_RUN_SECONDS: f64 = 0.5;

/// What is being tuned: one static argument of one kernel call.
#[derive(Debug)]
pub struct TuneRequest<'a> {
    /// The kernel's identity (its cache key).
    pub kernel: &'a str,
    /// The argument's name.
    pub param: &'a str,
    /// The configuration it runs under.
    pub config: &'a KernelConfig,
    /// The device it runs on.
    pub device: &'a Device,
    /// The specs of its tensor arguments.
    pub inputs: &'a [TensorSpec],
    /// Its static arguments as given.
    pub statics: &'a StaticKey,
}

impl TuneRequest<'_> {
    /// The key of the choice: SHA-256 over everything that can change it.
    fn key(&self) -> String {
        let d = self.device;
        let text = format!(
            "{}\u{0}{}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{}\u{0}{}\u{0}{:?}",
            self.kernel,
            self.param,
            self.inputs,
            self.statics,
            self.config,
            d.platform_name(),
            d.device_count(),
            d.plugin_path(),
        );
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn memory() -> &'static Mutex<HashMap<String, String>> {
    static CHOICES: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    CHOICES.get_or_init(Mutex::default)
}

/// The choice remembered for `key`, in memory or on disk.
fn remembered(key: &str) -> Option<String> {
    if let Some(label) = memory().lock().ok()?.get(key) {
        return Some(label.clone());
    }
    read_tuning(key)?.lines().next().map(str::to_string)
}

/// Remembers `label` for `key`, with the timings as a note for people.
fn remember(req: &TuneRequest<'_>, key: &str, label: &str, timings: &[(String, Option<f64>)]) {
    if let Ok(mut m) = memory().lock() {
        m.insert(key.to_string(), label.to_string());
    }
    let mut text = format!(
        "{label}\n# {} {} on {:?}\n",
        req.kernel, req.param, req.inputs
    );
    for (l, t) in timings {
        let _ = match t {
            Some(t) => writeln!(text, "# {:.3} ms  {l}", t * 1e3),
            None => writeln!(text, "# failed  {l}"),
        };
    }
    write_tuning(key, &text);
}

/// One argument of an autotuned entry point (what a companion's `run_with`,
/// `call_with` and `profile_with` do for each parameter): when `enabled`,
/// the `candidates` of `current` are labelled, timed through `run` (given
/// each by reference) and the fastest (or the one remembered) is returned,
/// its `param: label` line pushed on `tuned`; otherwise `current` as given.
///
/// # Errors
///
/// The first candidate's error when every candidate fails.
#[doc(hidden)]
pub fn tune_arg<V, R>(
    req: &TuneRequest<'_>,
    current: V,
    enabled: bool,
    candidates: impl FnOnce(&V) -> Vec<V>,
    label: impl Fn(&V) -> String,
    tuned: &mut Vec<String>,
    mut run: impl FnMut(&V) -> Result<R>,
) -> Result<V> {
    if !enabled {
        return Ok(current);
    }
    let mut cands = candidates(&current);
    let labels: Vec<String> = cands.iter().map(label).collect();
    match choose(req, &labels, |j| run(&cands[j]))? {
        Some(j) => {
            tuned.push(format!("{}: {}", req.param, labels[j]));
            Ok(cands.swap_remove(j))
        }
        None => Ok(current),
    }
}

/// Picks the fastest of the candidates labelled `labels` by running each
/// through `run(i)`, or the one remembered for this request. `None` when
/// nothing is tuned (no candidates, or the kernel runs on the interpreter).
///
/// # Errors
///
/// The first candidate's error when every candidate fails.
pub fn choose<R>(
    req: &TuneRequest<'_>,
    labels: &[String],
    mut run: impl FnMut(usize) -> Result<R>,
) -> Result<Option<usize>> {
    if labels.is_empty() || req.config.interpret || req.device.is_interpreter() {
        return Ok(None);
    }
    let key = req.key();
    if let Some(known) = remembered(&key) {
        if let Some(i) = labels.iter().position(|l| *l == known) {
            return Ok(Some(i));
        }
    }
    let mut timings = Vec::with_capacity(labels.len());
    let mut best: Option<(usize, f64)> = None;
    let mut first_error = None;
    for (i, label) in labels.iter().enumerate() {
        if let Err(e) = run(i) {
            first_error.get_or_insert(e);
            timings.push((label.clone(), None));
            continue;
        }
        let mut fastest = f64::INFINITY;
        for _ in 0..TIMED_RUNS {
            let t0 = Instant::now();
            run(i)?;
            let t = t0.elapsed().as_secs_f64();
            fastest = fastest.min(t);
            if t > SLOW_RUN_SECONDS {
                break;
            }
        }
        timings.push((label.clone(), Some(fastest)));
        if best.is_none_or(|(_, b)| fastest < b) {
            best = Some((i, fastest));
        }
    }
    match (best, first_error) {
        (Some((i, _)), _) => {
            remember(req, &key, &labels[i], &timings);
            Ok(Some(i))
        }
        (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}

/// The device-resident copies of a host call's arguments, made by the first
/// [`run_host`] of a tuning and reused by the others.
///
/// ```no_run
/// use tessel_dsl::kernel::{autotune, Kernel};
/// use tessel_dsl::{runtime::Device, HostTensor, Tensor};
/// let k = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0).params(["x"]);
/// let (dev, x) = (Device::cpu()?, HostTensor::from_vec(vec![1.0f32, 2.0], [2])?);
/// let mut uploads = autotune::Uploads::default();
/// autotune::run_host(&k, &dev, &[&x], &mut uploads)?; // copies `x`, runs
/// autotune::run_host(&k, &dev, &[&x], &mut uploads)?; // runs on the same copy
/// assert_eq!(uploads.len(), 1);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Uploads(Option<Vec<DeviceBuffer>>);

impl Uploads {
    /// How many arguments are held on the device (0 before the first run,
    /// and for a kernel that donates them).
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, Vec::len)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Runs `kernel` once on the host tensors `args` for timing a candidate.
/// The arguments are copied to the program's device (where
/// [`Kernel::run`] would put them) on the first call and kept in `uploads`
/// for the next, so what is timed is the program, not the copies; the
/// results are waited for and dropped. A kernel that donates its arguments,
/// or one that runs on the interpreter, runs as [`Kernel::run`] does.
///
/// # Errors
///
/// What tracing, compiling, copying or running the kernel returns.
#[track_caller]
pub fn run_host<F, O>(
    kernel: &Kernel<F>,
    device: &Device,
    args: &[&HostTensor],
    uploads: &mut Uploads,
) -> Result<()>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    if kernel.donates() {
        return kernel.run(device, args).map(drop);
    }
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let exe = kernel.compile(device, &specs)?;
    if exe.is_interpreted() {
        return kernel.run(device, args).map(drop);
    }
    let buffers = match &mut uploads.0 {
        Some(b) => b,
        slot => {
            let on = exe.devices().first().copied().unwrap_or(0);
            let copies = args
                .iter()
                .map(|h| device.to_device_on(h, on))
                .collect::<Result<Vec<_>>>()?;
            slot.insert(copies)
        }
    };
    let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
    wait_for(exe.execute(&refs)?)
}

/// Runs `kernel` once on the device buffers `args` for timing a candidate,
/// as [`Kernel::call`] does, and waits for the results.
///
/// # Errors
///
/// What tracing, compiling or running the kernel returns.
#[track_caller]
pub fn call_buffers<F, O>(kernel: &Kernel<F>, device: &Device, args: &[&DeviceBuffer]) -> Result<()>
where
    F: Fn(&[Tensor]) -> O,
    O: Outputs,
{
    wait_for(kernel.call(device, args)?)
}

fn wait_for(outs: Vec<DeviceBuffer>) -> Result<()> {
    for out in &outs {
        out.block_until_ready()?;
    }
    Ok(())
}
