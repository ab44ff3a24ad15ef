//! Integration tests of the PJRT runtime on the XLA CPU plugin.
//!
//! The plugin is found the way users find it (`Device::cpu()`): from
//! `TESSEL_PJRT_PLUGIN`, the cache, an installed Python package, or fetched
//! with pip. Tests that need a different environment re-run this test binary
//! as a child process with that environment (see `child`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use tessel_dsl::runtime::{cpu_plugin_path, Device, DeviceBuffer, Program};
use tessel_dsl::{DType, DeviceError, Error, HostTensor, TensorSpec, F32, S32};

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

/// `@main(a) = a` on `t`.
fn identity_program(t: &TensorSpec) -> Program {
    let ty = t.mlir_type();
    Program::new(
        format!("identity_{}", t.dtype),
        format!(
            "module {{\n  func.func @main(%a: {ty}) -> {ty} {{\n    return %a : {ty}\n  }}\n}}\n"
        ),
        vec![t.clone()],
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

/// Compiles `program` on the default device, expecting XLA to refuse it.
fn compile_error(program: &Program) -> String {
    match cpu().compile(program).unwrap_err() {
        Error::Device(DeviceError::Compile { kernel, message }) => {
            assert_eq!(kernel, program.name);
            message
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

fn arguments_message(err: Error) -> String {
    match err {
        Error::Device(DeviceError::Arguments { kernel, message }) => {
            assert_eq!(kernel, "add");
            message
        }
        other => panic!("expected an Arguments error, got {other:?}"),
    }
}

#[test]
fn cpu_device_describes_itself() {
    let dev = cpu();
    assert_eq!(dev.platform_name(), "cpu");
    assert_eq!(dev.device_count(), 1);
    assert!(dev.plugin_path().unwrap().is_file());
    let (major, minor) = dev.api_version().unwrap();
    assert_eq!(major, 0);
    assert!(minor >= 1, "PJRT minor version {minor}");
    let stablehlo = dev.stablehlo_version().expect("stablehlo_current_version");
    assert_eq!(stablehlo.split('.').count(), 3, "{stablehlo}");
    assert!(dev.stablehlo_minimum_version().is_some());
    assert!(!dev.plugin_attributes().is_empty());
    // The default device is shared; other clients are distinct.
    assert_eq!(dev, cpu());
    assert!(format!("{dev:?}").contains("cpu"));
}

#[test]
fn add_runs_and_gives_the_right_numbers() {
    let dev = cpu();
    let t = spec(&[2, 3], F32);
    let exe = dev.compile(&add_program(&t)).unwrap();
    assert_eq!(exe.name(), "add");
    assert_eq!(exe.inputs(), &[t.clone(), t.clone()]);
    assert_eq!(exe.outputs(), std::slice::from_ref(&t));
    assert_eq!(exe.devices(), &[0]);
    let a = f32_tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = f32_tensor(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
    let out = exe.run(&[&a, &b]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].spec(), &t);
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        vec![11.0, 22.0, 33.0, 44.0, 55.0, 66.0]
    );
}

#[test]
fn device_buffers_stay_on_the_device_between_calls() {
    let dev = cpu();
    let t = spec(&[4], S32);
    let exe = dev.compile(&add_program(&t)).unwrap();
    let x = dev
        .to_device(&HostTensor::from_vec(vec![1i32, 2, 3, 4], [4]).unwrap())
        .unwrap();
    assert_eq!(x.spec(), &t);
    assert_eq!(x.device_index(), 0);
    assert_eq!(x.device(), dev);
    let y = exe.execute(&[&x, &x]).unwrap().remove(0);
    let z = exe.execute(&[&y, &x]).unwrap().remove(0);
    assert_eq!(z.spec(), &t);
    assert_eq!(read::<i32>(&z), vec![3, 6, 9, 12]);
    // Reading a buffer twice is fine.
    assert_eq!(z.to_host().unwrap(), z.to_host().unwrap());
}

#[test]
fn executables_and_buffers_keep_their_client_alive() {
    let dev = Device::cpu_with_devices(1).unwrap();
    let t = spec(&[2], F32);
    let exe = dev.compile(&add_program(&t)).unwrap();
    let x = dev.to_device(&f32_tensor(&[1.0, 2.0], &[2])).unwrap();
    drop(dev);
    let y = exe.execute(&[&x, &x]).unwrap().remove(0);
    drop(exe);
    drop(x);
    assert_eq!(read::<f32>(&y), vec![2.0, 4.0]);
}

/// Bytes that exercise every bit of each element (any pattern is valid for a raw copy).
fn pattern(t: &TensorSpec) -> HostTensor {
    let pred = t.dtype.is_pred();
    let bytes: Vec<u8> = (0..t.size_in_bytes())
        .map(|i| {
            if pred {
                (i % 2) as u8
            } else {
                (i * 37 + 11) as u8
            }
        })
        .collect();
    HostTensor::from_bytes(t.clone(), bytes).unwrap()
}

#[test]
fn every_dtype_round_trips_host_device_host() {
    let dev = cpu();
    for dtype in DType::ALL {
        let t = spec(&[3, 5], dtype);
        let host = pattern(&t);
        let buf = dev.to_device(&host).unwrap();
        assert_eq!(buf.spec(), &t);
        let back = buf.to_host().unwrap();
        assert_eq!(back.as_bytes(), host.as_bytes(), "{dtype}");
        assert_eq!(back.spec(), &t);
    }
}

#[test]
fn every_dtype_passes_through_a_compiled_identity() {
    let dev = cpu();
    for dtype in DType::ALL {
        let t = spec(&[2, 3], dtype);
        // Small exact values (no NaN payloads for a computation to canonicalize).
        let host = HostTensor::from_fn(t.clone(), |i| {
            (i % if dtype.is_pred() { 2 } else { 6 }) as f64
        });
        let exe = dev.compile(&identity_program(&t)).unwrap();
        let out = exe.run(&[&host]).unwrap();
        assert_eq!(out[0].spec(), &t, "{dtype}");
        assert_eq!(out[0].as_bytes(), host.as_bytes(), "{dtype}");
    }
}

#[test]
fn scalars_and_empty_tensors_round_trip() {
    let dev = cpu();
    let s = HostTensor::scalar(2.5f64);
    assert_eq!(dev.to_device(&s).unwrap().to_host().unwrap(), s);
    let empty = HostTensor::zeros(spec(&[0, 3], F32));
    let buf = dev.to_device(&empty).unwrap();
    assert_eq!(buf.spec(), &spec(&[0, 3], F32));
    assert_eq!(buf.to_host().unwrap(), empty);
    let exe = dev.compile(&add_program(&TensorSpec::scalar(F32))).unwrap();
    let out = exe
        .run(&[&HostTensor::scalar(1.5f32), &HostTensor::scalar(2.0f32)])
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.5]);
}

#[test]
fn convert_and_multiple_results() {
    let dev = cpu();
    let input = spec(&[4], F32);
    let as_bf16 = spec(&[4], DType::BF16);
    let as_s32 = spec(&[4], S32);
    let program = Program::new(
        "convert",
        "module {\n  func.func @main(%a: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xi32>) {\n    \
         %0 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<4xbf16>\n    \
         %1 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<4xi32>\n    \
         return %0, %1 : tensor<4xbf16>, tensor<4xi32>\n  }\n}\n",
        vec![input],
        vec![as_bf16.clone(), as_s32.clone()],
    );
    let exe = dev.compile(&program).unwrap();
    let out = exe
        .run(&[&f32_tensor(&[1.5, -2.0, 3.0, 256.0], &[4])])
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].spec(), &as_bf16);
    assert_eq!(out[0].to_f64_vec(), vec![1.5, -2.0, 3.0, 256.0]);
    assert_eq!(out[1].spec(), &as_s32);
    assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![1, -2, 3, 256]);
}

fn dot_program(n: usize) -> Program {
    let t = spec(&[n, n], F32);
    let ty = t.mlir_type();
    Program::new(
        "dot",
        format!(
            "module {{\n  func.func @main(%a: {ty}, %b: {ty}) -> {ty} {{\n    \
             %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : ({ty}, {ty}) -> {ty}\n    \
             return %0 : {ty}\n  }}\n}}\n"
        ),
        vec![t.clone(), t.clone()],
        vec![t],
    )
}

#[test]
fn cost_analysis_counts_the_flops_of_a_dot() {
    let exe = cpu().compile(&dot_program(64)).unwrap();
    let cost = exe.cost_analysis().unwrap();
    let flops = cost.flops.expect("flops");
    assert!(flops > 0.0, "{cost:?}");
    assert!(flops >= (64.0f64).powi(3), "{cost:?}");
    assert!(cost.bytes_accessed.unwrap_or(0.0) > 0.0, "{cost:?}");
    assert_eq!(cost.get("flops"), Some(flops));
    if let Some(fp) = exe.fingerprint() {
        assert!(!fp.is_empty());
    }
}

#[test]
fn memory_stats_are_readable() {
    let exe = cpu().compile(&dot_program(32)).unwrap();
    let stats = exe.memory_stats().unwrap();
    let bytes = (32 * 32 * 4) as i64;
    assert!(stats.argument_bytes >= 2 * bytes, "{stats:?}");
    assert!(stats.output_bytes >= bytes, "{stats:?}");
    assert!(stats.temp_bytes >= 0, "{stats:?}");
}

#[test]
fn wrong_arguments_are_refused_before_running() {
    let dev = cpu();
    let t = spec(&[2, 3], F32);
    let exe = dev.compile(&add_program(&t)).unwrap();
    let a = HostTensor::zeros(t.clone());

    let msg = arguments_message(exe.run(&[&a]).unwrap_err());
    assert!(
        msg.contains("expected 2 arguments") && msg.contains("got 1"),
        "{msg}"
    );

    let wrong_dtype = HostTensor::zeros(spec(&[2, 3], S32));
    let msg = arguments_message(exe.run(&[&a, &wrong_dtype]).unwrap_err());
    assert!(
        msg.contains("argument 1") && msg.contains("f32[2,3]") && msg.contains("s32[2,3]"),
        "{msg}"
    );

    let wrong_shape = HostTensor::zeros(spec(&[3, 2], F32));
    let msg = arguments_message(exe.run(&[&wrong_shape, &a]).unwrap_err());
    assert!(
        msg.contains("argument 0") && msg.contains("f32[3,2]"),
        "{msg}"
    );

    let buf = dev.to_device(&a).unwrap();
    let bad = dev.to_device(&wrong_shape).unwrap();
    arguments_message(exe.execute(&[&buf]).unwrap_err());
    arguments_message(exe.execute(&[&buf, &buf, &buf]).unwrap_err());
    let msg = arguments_message(exe.execute(&[&buf, &bad]).unwrap_err());
    assert!(msg.contains("argument 1"), "{msg}");
    // The executable still works afterwards.
    assert_eq!(exe.execute(&[&buf, &buf]).unwrap().len(), 1);
}

#[test]
fn buffers_from_another_client_or_device_are_refused() {
    let t = spec(&[2], F32);
    let exe = cpu().compile(&add_program(&t)).unwrap();
    let other = Device::cpu_with_devices(2).unwrap();
    assert_ne!(other, cpu());
    let x = f32_tensor(&[1.0, 2.0], &[2]);
    let foreign = other.to_device(&x).unwrap();
    let local = cpu().to_device(&x).unwrap();
    let msg = arguments_message(exe.execute(&[&local, &foreign]).unwrap_err());
    assert!(
        msg.contains("argument 1") && msg.contains("client"),
        "{msg}"
    );

    let exe2 = other.compile(&add_program(&t)).unwrap();
    let on_device_1 = other.to_device_on(&x, 1).unwrap();
    assert_eq!(on_device_1.device_index(), 1);
    let msg = arguments_message(exe2.execute(&[&foreign, &on_device_1]).unwrap_err());
    assert!(msg.contains("device 1"), "{msg}");
}

#[test]
fn malformed_mlir_is_a_compile_error() {
    let t = spec(&[2], F32);
    let mut program = add_program(&t);
    program.name = "broken".into();
    program.mlir =
        "module { func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> { this is not mlir } }"
            .into();
    assert!(!compile_error(&program).is_empty());
    // Empty text, too.
    program.mlir = String::new();
    compile_error(&program);
}

#[test]
fn declared_results_must_match_the_program() {
    let t = spec(&[2], F32);
    let mut program = add_program(&t);
    for outputs in [
        vec![t.clone(), t.clone()],
        vec![spec(&[2], S32)],
        vec![spec(&[3], F32)],
    ] {
        program.outputs = outputs;
        let message = compile_error(&program);
        assert!(message.contains("declares"), "{message}");
    }
}

#[test]
fn partitions_beyond_the_device_count_are_refused() {
    let mut program = add_program(&spec(&[2], F32));
    program.num_partitions = 2;
    let message = compile_error(&program);
    assert!(message.contains("need 2 devices"), "{message}");
    program.num_partitions = 0;
    compile_error(&program);
}

#[test]
fn spmd_program_runs_sharded_on_two_devices() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let sharding = "{mhlo.sharding = \"{devices=[2,1]<=[2]}\"}";
    let ty = "tensor<4x2xf32>";
    let program = Program {
        name: "sharded_add".into(),
        mlir: format!(
            "module {{\n  func.func @main(%a: {ty} {sharding}, %b: {ty} {sharding}) -> ({ty} {sharding}) {{\n    \
             %0 = stablehlo.add %a, %b : {ty}\n    return %0 : {ty}\n  }}\n}}\n"
        ),
        inputs: vec![spec(&[4, 2], F32); 2],
        outputs: vec![spec(&[4, 2], F32)],
        num_partitions: 2,
        num_replicas: 1,
        hints: Default::default(),
        graph: None,
    };
    let exe = dev.compile(&program).unwrap();
    assert_eq!(exe.devices().len(), 2);
    let shard = |d: usize, v: f32| {
        dev.to_device_on(&f32_tensor(&[v; 4], &[2, 2]), exe.devices()[d])
            .unwrap()
    };
    let (a0, a1, b0, b1) = (shard(0, 1.0), shard(1, 2.0), shard(0, 10.0), shard(1, 20.0));
    // The single-device entry points refuse a multi-device program.
    assert!(exe.execute(&[&a0, &b0]).is_err());
    let out = exe
        .execute_sharded(&[vec![&a0, &b0], vec![&a1, &b1]])
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(read::<f32>(&out[0][0]), vec![11.0; 4]);
    assert_eq!(read::<f32>(&out[1][0]), vec![22.0; 4]);
    assert_eq!(out[1][0].device_index(), exe.devices()[1]);
    // Shards on the wrong devices are refused.
    assert!(matches!(
        exe.execute_sharded(&[vec![&a1, &b1], vec![&a0, &b0]])
            .unwrap_err(),
        Error::Device(DeviceError::Arguments { .. })
    ));
}

#[test]
fn cpu_clients_with_several_devices() {
    let none = Device::cpu_with_devices(0).unwrap_err();
    assert!(
        matches!(
            none,
            Error::Device(DeviceError::DeviceCount { requested: 0 })
        ),
        "{none:?}"
    );
    assert!(none.to_string().ends_with("got 0"), "{none}");
    // A create option of the wrong type: refused before the plugin aborts.
    let path = cpu().plugin_path().unwrap().to_path_buf();
    let bad = Device::from_plugin_with_options(
        &path,
        &[(
            "cpu_device_count",
            tessel_dsl::runtime::CreateOption::String("4".into()),
        )],
    )
    .unwrap_err();
    assert!(
        matches!(bad, Error::Device(DeviceError::CreateOptionType { .. })),
        "{bad:?}"
    );
    assert!(
        bad.to_string().contains("takes an int64, got a string"),
        "{bad}"
    );
    // Too many devices: an error before the plugin builds them.
    let many = Device::cpu_with_devices(100_000).unwrap_err();
    assert!(
        matches!(
            many,
            Error::Device(DeviceError::DeviceCount { requested: 100_000 })
        ),
        "{many:?}"
    );
    let dev = Device::cpu_with_devices(4).unwrap();
    assert_eq!(dev.device_count(), 4);
    assert_eq!(dev.plugin_path(), cpu().plugin_path());
    let x = f32_tensor(&[1.0, 2.0], &[2]);
    let buf = dev.to_device_on(&x, 3).unwrap();
    assert_eq!(buf.device_index(), 3);
    assert_eq!(buf.to_host().unwrap(), x);
    let beyond = dev.to_device_on(&x, 4).unwrap_err();
    match &beyond {
        Error::Device(DeviceError::DeviceIndex {
            index: 4,
            platform,
            count: 4,
        }) => assert_eq!(platform, "cpu"),
        other => panic!("expected a device index error, got {other:?}"),
    }
    assert_eq!(
        beyond.to_string(),
        "device index 4 is out of range: the cpu client has 4 addressable devices"
    );
    // The same plugin (loaded once) with its default options: 4 CPU devices.
    assert_eq!(
        Device::from_plugin(dev.plugin_path().unwrap())
            .unwrap()
            .device_count(),
        4
    );
}

#[test]
fn concurrent_runs_agree_with_a_single_run() {
    let n = 48;
    let exe = Arc::new(cpu().compile(&dot_program(n)).unwrap());
    let a = HostTensor::from_fn(spec(&[n, n], F32), |i| ((i % 7) as f64) - 3.0);
    let b = HostTensor::from_fn(spec(&[n, n], F32), |i| ((i % 5) as f64) * 0.5);
    let expected = exe.run(&[&a, &b]).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (exe, a, b) = (Arc::clone(&exe), a.clone(), b.clone());
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| exe.run(&[&a, &b]).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for h in handles {
        for out in h.join().unwrap() {
            assert_eq!(out, expected);
        }
    }
}

#[test]
fn a_missing_plugin_file_is_plugin_not_found() {
    let missing = std::env::temp_dir()
        .join("tessel-no-such-plugin")
        .join("plugin.so");
    let err = Device::from_plugin(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Device(DeviceError::PluginNotFound(m)) if m.contains("plugin.so")),
        "{err:?}"
    );
}

#[test]
fn a_file_that_is_not_a_plugin_is_plugin_load() {
    let dir = scratch_dir("not-a-plugin");
    let text = dir.join("readme.so");
    std::fs::write(&text, "this is a text file, not a shared library\n").unwrap();
    let err = Device::from_plugin(&text).unwrap_err();
    assert!(
        matches!(&err, Error::Device(DeviceError::PluginLoad { .. })),
        "{err:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// Other environments: the test binary re-runs itself (test `child_entry`)
// with one scenario below and a changed environment.

const CHILD_VAR: &str = "TESSEL_TEST_CHILD";

fn scratch_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("tessel-rt-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scenario` in a child process with `set` added to and `remove`
/// removed from the environment; panics if it fails, else returns its stderr.
fn child(scenario: &str, set: &[(&str, OsString)], remove: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_VAR, scenario);
    for var in remove {
        cmd.env_remove(var);
    }
    for (var, value) in set {
        cmd.env(var, value);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {scenario} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stderr
}

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

#[test]
fn plugin_variables_pointing_nowhere_are_reported() {
    let missing = std::env::temp_dir().join("tessel-missing").join("lib.so");
    let set: Vec<(&str, OsString)> = [
        "TESSEL_PJRT_PLUGIN",
        "TESSEL_PJRT_GPU_PLUGIN",
        "TPU_LIBRARY_PATH",
    ]
    .into_iter()
    .map(|var| (var, missing.clone().into()))
    .collect();
    child("missing_paths", &set, &[]);
}

fn child_missing_paths() {
    let err = Device::cpu().unwrap_err().to_string();
    assert!(
        err.contains("TESSEL_PJRT_PLUGIN") && err.contains("tessel-missing"),
        "{err}"
    );
    let err = cpu_plugin_path().unwrap_err();
    assert!(matches!(err, Error::Device(DeviceError::PluginNotFound(_))));
    let err = Device::gpu().unwrap_err().to_string();
    assert!(err.contains("TESSEL_PJRT_GPU_PLUGIN"), "{err}");
    // TPU_LIBRARY_PATH points nowhere, so nothing is loaded.
    let err = Device::tpu().unwrap_err().to_string();
    assert!(err.contains("TPU_LIBRARY_PATH"), "{err}");
}

#[test]
fn a_corrupt_cached_plugin_is_discarded_not_loaded() {
    let cache = scratch_dir("corrupt-cache");
    let dir = cache.join("xla-cpu-pjrt-0.0.1");
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("xla_cpu_pjrt.so");
    std::fs::write(&plugin, b"\x7fELF truncated").unwrap();
    // No Python: the refetch fails cleanly instead of downloading.
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("TESSEL_PYTHON", cache.join("no-such-python").into()),
    ];
    child("corrupt_cache", &set, &["TESSEL_PJRT_PLUGIN"]);
    assert!(!plugin.exists(), "the damaged plugin was not removed");
    std::fs::remove_dir_all(&cache).unwrap();
}

fn child_corrupt_cache() {
    // Never mapped (a truncated .so would crash the process): verified,
    // discarded, and fetched again, which fails here without Python.
    match Device::cpu().unwrap_err() {
        Error::Device(DeviceError::PluginNotFound(message)) => {
            assert!(message.contains("TESSEL_PJRT_PLUGIN"), "{message}");
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
}

#[test]
fn without_python_the_error_says_what_to_do() {
    let cache = scratch_dir("no-python");
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("TESSEL_PYTHON", cache.join("no-such-python").into()),
    ];
    child("no_python", &set, &["TESSEL_PJRT_PLUGIN"]);
    std::fs::remove_dir_all(&cache).unwrap();
}

fn child_no_python() {
    match Device::cpu().unwrap_err() {
        Error::Device(DeviceError::PluginNotFound(message)) => {
            assert!(message.contains("TESSEL_PJRT_PLUGIN"), "{message}");
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
}

#[cfg(unix)]
#[test]
fn an_installed_python_package_is_found() {
    if Command::new("python3")
        .arg("-c")
        .arg("pass")
        .output()
        .is_err()
    {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let real = cpu_plugin_path().unwrap();
    let site = scratch_dir("site");
    let package = site.join("xla_plugins").join("xla_cpu_pjrt");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("__init__.py"), "").unwrap();
    std::os::unix::fs::symlink(&real, package.join("xla_cpu_pjrt.so")).unwrap();
    let cache = scratch_dir("empty-cache");
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("PYTHONPATH", site.clone().into()),
        ("TESSEL_TEST_SITE", site.clone().into()),
    ];
    child("python_package", &set, &["TESSEL_PJRT_PLUGIN"]);
    std::fs::remove_dir_all(&site).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
}

fn child_python_package() {
    let site = PathBuf::from(std::env::var_os("TESSEL_TEST_SITE").unwrap());
    let path = cpu_plugin_path().unwrap();
    assert!(path.starts_with(&site), "{}", path.display());
    assert_eq!(Device::cpu().unwrap().platform_name(), "cpu");
}

/// Fetches the 63 MB wheel with pip into an empty cache from two processes
/// at once: both must succeed and only one may download.
#[test]
#[ignore = "downloads the 63 MB xla-cpu-pjrt wheel"]
fn fetch_into_an_empty_cache() {
    let cache = scratch_dir("fetch");
    let set = [("TESSEL_CACHE_DIR", OsString::from(cache.as_os_str()))];
    let logs: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(|| child("fetch", &set, &["TESSEL_PJRT_PLUGIN"])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let fetches = logs
        .iter()
        .filter(|l| l.contains("tessel: fetching"))
        .count();
    assert_eq!(fetches, 1, "{logs:?}");
    // Nothing but the plugin directory and the lock file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["xla-cpu-pjrt-0.0.1", "xla-cpu-pjrt-0.0.1.lock"]);
    std::fs::remove_dir_all(&cache).unwrap();
}

fn child_fetch() {
    let cache = PathBuf::from(std::env::var_os("TESSEL_CACHE_DIR").unwrap());
    let path = cpu_plugin_path().unwrap();
    assert_eq!(
        path,
        cache.join("xla-cpu-pjrt-0.0.1").join("xla_cpu_pjrt.so")
    );
    assert!(path.is_file());
    let t = spec(&[2], F32);
    let exe = Device::cpu().unwrap().compile(&add_program(&t)).unwrap();
    let out = exe
        .run(&[
            &f32_tensor(&[1.0, 2.0], &[2]),
            &f32_tensor(&[3.0, 4.0], &[2]),
        ])
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
}
