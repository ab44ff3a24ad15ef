//! `profile_kernel`: a scope that records every kernel call made inside it
//! on this thread (count, time, compiles) and reports them together.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

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

thread_local! {
    static ACTIVE: RefCell<Vec<ScopeReport>> = const { RefCell::new(Vec::new()) };
}

/// Records one call in every open scope on this thread.
pub(crate) fn record(kernel: &str, elapsed: Duration, compiled: bool) {
    ACTIVE.with(|a| {
        for r in a.borrow_mut().iter_mut() {
            let e = r.kernels.entry(kernel.to_string()).or_default();
            let s = elapsed.as_secs_f64();
            e.min_seconds = if e.calls == 0 {
                s
            } else {
                e.min_seconds.min(s)
            };
            e.max_seconds = e.max_seconds.max(s);
            e.calls += 1;
            e.total_seconds += s;
            e.compiles += usize::from(compiled);
        }
    });
}

struct Pop;

impl Drop for Pop {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().pop());
    }
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
    ACTIVE.with(|a| a.borrow_mut().push(ScopeReport::default()));
    let pop = Pop;
    let out = body();
    let report = ACTIVE
        .with(|a| a.borrow().last().cloned())
        .unwrap_or_default();
    drop(pop);
    (out, report)
}

impl ScopeReport {
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
