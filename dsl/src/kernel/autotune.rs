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

use super::{KernelConfig, StaticKey};
use crate::error::Result;
use crate::runtime::{read_tuning, write_tuning, Device};
use crate::shape::TensorSpec;

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
