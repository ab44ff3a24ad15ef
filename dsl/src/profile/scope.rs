//! `profile_kernel`: a scope that records every kernel call made inside it
//! on this thread (count, time, compiles) and reports them together.

use crate::kernel::{with_call_log, CallRecord};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One kernel's calls inside a scope.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCalls {
    /// How many calls.
    pub calls: usize,
    /// How many of them traced and compiled (cache misses).
    pub compiles: usize,
    /// Total wall time of the calls, in seconds (host calls include copies).
    pub total_seconds: f64,
    /// Fastest call.
    pub min_seconds: f64,
    /// Slowest call.
    pub max_seconds: f64,
}

/// What a [`profile_kernel`] scope saw, by kernel name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScopeReport {
    /// Per kernel.
    pub kernels: BTreeMap<String, KernelCalls>,
}

/// Runs `body`, recording every kernel call it makes on this thread
/// (`run`, `call`), and returns its value with the report.
///
/// ```no_run
/// use tessel_dsl::{kernel::Kernel, profile::profile_kernel, runtime::Device, HostTensor, Tensor};
/// let dev = Device::cpu()?;
/// let k = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0);
/// let x = HostTensor::from_vec(vec![1.0f32; 4], [4])?;
/// let (_, report) = profile_kernel(|| (0..3).map(|_| k.run(&dev, &[&x])).collect::<Vec<_>>());
/// assert_eq!(report.kernels["double"].calls, 3);
/// println!("{}", report.summary());
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn profile_kernel<R>(body: impl FnOnce() -> R) -> (R, ScopeReport) {
    let (out, calls) = with_call_log(body);
    (out, ScopeReport::from_calls(&calls))
}

impl ScopeReport {
    /// Totals per kernel of a list of calls.
    pub fn from_calls(calls: &[CallRecord]) -> ScopeReport {
        let mut report = ScopeReport::default();
        for c in calls {
            let e = report.kernels.entry(c.kernel.clone()).or_default();
            let s = c.elapsed.as_secs_f64();
            e.min_seconds = if e.calls == 0 {
                s
            } else {
                e.min_seconds.min(s)
            };
            e.max_seconds = e.max_seconds.max(s);
            e.calls += 1;
            e.total_seconds += s;
            e.compiles += usize::from(c.compiled);
        }
        report
    }

    /// A table: calls, compiles, total, mean, min and max per kernel.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{:<24} {:>6} {:>9} {:>12} {:>11} {:>11} {:>11}\n",
            "kernel", "calls", "compiles", "total ms", "mean ms", "min ms", "max ms"
        );
        for (name, k) in &self.kernels {
            let _ = writeln!(
                s,
                "{:<24} {:>6} {:>9} {:>12.3} {:>11.3} {:>11.3} {:>11.3}",
                name,
                k.calls,
                k.compiles,
                k.total_seconds * 1e3,
                k.total_seconds * 1e3 / k.calls.max(1) as f64,
                k.min_seconds * 1e3,
                k.max_seconds * 1e3
            );
        }
        s
    }

    /// The report as a JSON object keyed by kernel name.
    pub fn to_json(&self) -> String {
        let items: Vec<String> = self
            .kernels
            .iter()
            .map(|(n, k)| {
                format!(
                    "{}: {{\"calls\": {}, \"compiles\": {}, \"total_seconds\": {}, \"min_seconds\": {}, \"max_seconds\": {}}}",
                    super::json_str(n),
                    k.calls,
                    k.compiles,
                    k.total_seconds,
                    k.min_seconds,
                    k.max_seconds
                )
            })
            .collect();
        format!("{{{}}}", items.join(", "))
    }
}
