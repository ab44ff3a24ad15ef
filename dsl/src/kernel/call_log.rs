//! The per-thread log of kernel calls: `run` and `call` append one record to
//! every log open on the calling thread (none is open unless a profiling
//! scope asked for one, so a call costs nothing extra then).

use std::cell::RefCell;
use std::time::Duration;

/// One `run` or `call` of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// The kernel's name.
    pub kernel: String,
    /// Wall time of the call (host calls include the copies).
    pub elapsed: Duration,
    /// Whether the call traced and compiled (a compile-cache miss).
    pub compiled: bool,
}

thread_local! {
    static LOGS: RefCell<Vec<Vec<CallRecord>>> = const { RefCell::new(Vec::new()) };
}

/// Appends a call to every log open on this thread.
pub(crate) fn record(kernel: &str, elapsed: Duration, compiled: bool) {
    LOGS.with(|logs| {
        let mut logs = logs.borrow_mut();
        for log in logs.iter_mut() {
            log.push(CallRecord {
                kernel: kernel.to_string(),
                elapsed,
                compiled,
            });
        }
    });
}

/// Closes the innermost log when dropped (also when `body` panics).
struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        LOGS.with(|logs| logs.borrow_mut().pop());
    }
}

/// Runs `body` with a call log open on this thread and returns its value
/// with every kernel call made inside it, in order. Logs nest: an outer log
/// also sees the calls of an inner one.
pub fn with_call_log<R>(body: impl FnOnce() -> R) -> (R, Vec<CallRecord>) {
    LOGS.with(|logs| logs.borrow_mut().push(Vec::new()));
    let close = Close;
    let out = body();
    let calls = LOGS.with(|logs| logs.borrow_mut().last_mut().map(std::mem::take));
    drop(close);
    (out, calls.unwrap_or_default())
}
