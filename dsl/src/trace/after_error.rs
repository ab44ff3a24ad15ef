//! Panics that follow a kernel error.
//!
//! Ops never panic: a failed op records the trace's first error and returns
//! poisoned tensors whose types are a guess (the first operand's, or a
//! scalar). Rust code in a kernel body that relies on those types (slicing
//! `t.shape()`, indexing a list by an axis) can then panic where the kernel
//! would otherwise have gone on to return the error. Such a panic is a
//! consequence of the recorded error, not a failure of its own: the trace
//! returns the error, and the panic's message is not printed. A panic in a
//! trace with no error recorded unwinds as usual.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use super::STACK;

/// Runs `body`. If it panics after the innermost trace on this thread has
/// recorded an error, returns `None` (the caller returns that error);
/// any other panic is resumed.
pub(crate) fn catching<R>(body: impl FnOnce() -> R) -> Option<R> {
    install_hook();
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => Some(r),
        Err(_) if innermost_has_error() => None,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Whether the innermost trace on this thread has recorded an error (false
/// while the trace stack is borrowed, as it is inside an op's checks).
fn innermost_has_error() -> bool {
    STACK
        .try_with(|s| {
            s.try_borrow()
                .ok()
                .and_then(|s| s.last().map(|t| t.error.is_some()))
        })
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Wraps the process's panic hook once, so that a panic following a
/// recorded error prints nothing; every other panic reaches the hook that
/// was set before (or is set later, replacing this one).
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !innermost_has_error() {
                previous(info)
            }
        }));
    });
}
