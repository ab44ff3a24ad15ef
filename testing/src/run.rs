//! Running closures as kernels on the XLA CPU device.

use std::sync::atomic::{AtomicUsize, Ordering};

use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::trace::Outputs;
use tessel_dsl::{Error, HostTensor, KernelError, Result, Tensor, TensorSpec};

/// The process-wide XLA CPU device (all tests share it and its compile cache).
pub fn device() -> Device {
    Device::cpu().expect("the XLA CPU plugin should be available")
}

/// A kernel name no other kernel of this test binary uses (the compile cache
/// is keyed by kernel name and argument specs).
pub fn fresh_name(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Traces, compiles and runs `body` on `args`.
#[track_caller]
pub fn try_run<O: Outputs>(
    body: impl Fn(&[Tensor]) -> O,
    args: &[&HostTensor],
) -> Result<Vec<HostTensor>> {
    Kernel::new(fresh_name("k"), body).run(&device(), args)
}

/// Runs `body` on `args` and returns all its results (panics on any error).
#[track_caller]
pub fn run<O: Outputs>(body: impl Fn(&[Tensor]) -> O, args: &[&HostTensor]) -> Vec<HostTensor> {
    match try_run(body, args) {
        Ok(v) => v,
        Err(e) => panic!("kernel failed: {e}"),
    }
}

/// Runs a one-result `body` on `args`.
#[track_caller]
pub fn run1(body: impl Fn(&[Tensor]) -> Tensor, args: &[&HostTensor]) -> HostTensor {
    run(body, args).remove(0)
}

/// Traces `body` for arguments of `specs` and returns its kernel error
/// (panics if tracing succeeds or fails otherwise).
#[track_caller]
pub fn trace_error<O: Outputs>(body: impl Fn(&[Tensor]) -> O, specs: &[TensorSpec]) -> KernelError {
    match Kernel::new(fresh_name("bad"), body).trace(specs) {
        Ok(_) => panic!("tracing should have failed"),
        Err(Error::Kernel(k)) => *k,
        Err(e) => panic!("expected a kernel error, got {e}"),
    }
}

/// The StableHLO text of `body` for arguments of `specs`.
#[track_caller]
pub fn lower<O: Outputs>(body: impl Fn(&[Tensor]) -> O, specs: &[TensorSpec]) -> String {
    match Kernel::new(fresh_name("l"), body).lower(specs) {
        Ok(t) => t,
        Err(e) => panic!("lowering failed: {e}"),
    }
}

/// The CPU device (an alias of [`device`]).
pub fn dev() -> Device {
    device()
}

/// The kernel error inside `r`, failing the test if `r` is not one.
#[track_caller]
pub fn kernel_error<T: std::fmt::Debug>(r: Result<T>) -> KernelError {
    match r {
        Err(Error::Kernel(k)) => *k,
        other => panic!("expected Error::Kernel, got {other:?}"),
    }
}
