//! The interpreter as a device: `Device::interpreter()` runs kernels
//! (`run`, `call`, `compile`, `profile`) without a plugin, its buffers are
//! host tensors, its checks warn, fail or collect, and
//! `KernelConfig::interpret` sends one kernel there from any device.

mod common;

use common::*;
use tessel_dsl::config::KernelConfig;
use tessel_dsl::interp::{Checks, FindingKind};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::profile::ProfileOptions;
use tessel_dsl::runtime::{Device, InterpreterOptions, OnFinding, Program};
use tessel_dsl::{fori_loop, DeviceError, Error, HostTensor, InterpError, Tensor, TensorSpec, F32};

/// `got` and `want` have one spec and agree within `tol` (relative to 1).
#[track_caller]
fn near(got: &HostTensor, want: &HostTensor, tol: f64) {
    assert_eq!(got.spec(), want.spec());
    for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{g} vs {w}");
    }
}

fn affine(a: &[Tensor]) -> Tensor {
    (a[0].matmul(a[1]) + 0.5).tanh().sum(&[1])
}

fn operands() -> (HostTensor, HostTensor) {
    let x = HostTensor::from_fn(TensorSpec::new([5, 7], F32), |i| (i as f64).sin());
    let w = HostTensor::from_fn(TensorSpec::new([7, 3], F32), |i| (i as f64 * 0.37).cos());
    (x, w)
}

#[test]
fn kernels_run_on_the_interpreter_as_on_the_plugin() {
    let k = Kernel::new("affine", affine);
    let (x, w) = operands();
    let interp = Device::interpreter();
    assert!(interp.is_interpreter());
    assert_eq!(interp.platform_name(), "interpreter");
    assert_eq!(interp.device_count(), 1);
    assert!(interp.plugin_path().is_none() && interp.api_version().is_none());
    let got = k.run(&interp, &[&x, &w]).unwrap();
    let want = k.run(&device(), &[&x, &w]).unwrap();
    near(&got[0], &want[0], 1e-5);

    // One program per specs, cached as on any device.
    let exe = k
        .compile(&interp, &[x.spec().clone(), w.spec().clone()])
        .unwrap();
    assert!(exe.is_interpreted());
    assert!(exe.findings().is_empty());
    assert!(matches!(
        exe.cost_analysis(),
        Err(Error::Device(DeviceError::NotCompiled { .. }))
    ));
    assert!(exe.fingerprint().is_none());
}

#[test]
fn buffers_stay_on_the_interpreter_between_calls() {
    let k = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0);
    let dev = Device::interpreter();
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 3.5], [3]).unwrap();
    let b = dev.to_device(&x).unwrap();
    assert_eq!(b.device(), dev);
    let once = k.call(&dev, &[&b]).unwrap();
    let twice = k.call(&dev, &[&once[0]]).unwrap();
    assert_eq!(twice[0].spec(), x.spec());
    twice[0].block_until_ready().unwrap();
    assert_eq!(
        twice[0].to_host().unwrap().to_vec::<f32>().unwrap(),
        vec![4.0, -8.0, 14.0]
    );

    // Device 1 does not exist; a plugin buffer is another client's.
    assert!(matches!(
        dev.to_device_on(&x, 1),
        Err(Error::Device(DeviceError::DeviceIndex { count: 1, .. }))
    ));
    let on_cpu = device().to_device(&x).unwrap();
    let exe = k.compile(&dev, &[x.spec().clone()]).unwrap();
    let err = exe.execute(&[&on_cpu]).unwrap_err().to_string();
    assert!(err.contains("another client"), "{err}");
    let err = exe.run(&[]).unwrap_err().to_string();
    assert!(err.contains("expected 1 argument"), "{err}");
}

#[test]
fn text_only_programs_are_a_compile_error_on_the_interpreter() {
    let spec = TensorSpec::new([2], F32);
    let text = Program::new(
        "double",
        "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n\
           %0 = stablehlo.add %a, %a : tensor<2xf32>\n\
           return %0 : tensor<2xf32>\n\
         }",
        vec![spec.clone()],
        vec![spec.clone()],
    );
    let err = Device::interpreter().compile(&text).unwrap_err();
    assert!(
        matches!(&err, Error::Device(DeviceError::Compile { message, .. }) if message.contains("traced by tessel")),
        "{err}"
    );

    // A traced program carries its graph and runs on both.
    let k = Kernel::new("double", |a: &[Tensor]| a[0] + a[0]);
    let program = Program::from_graph(k.trace(&[spec]).unwrap());
    let x = HostTensor::from_vec(vec![1.5f32, -4.0], [2]).unwrap();
    for dev in [Device::interpreter(), device()] {
        let out = dev.compile(&program).unwrap().run(&[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, -8.0]);
    }
}

/// `x / (0 * x)` at a line this test can name.
fn divide_by_zero(a: &[Tensor]) -> Tensor {
    let zero = a[0] * 0.0;
    a[0] / zero // the finding's line
}

fn line_of(marker: &str) -> u32 {
    let src = include_str!("interp_device.rs");
    let i = src
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of"))
        .expect("marker");
    i as u32 + 1
}

#[test]
fn findings_are_collected_per_executable_or_fail_the_run() {
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let line = line_of("// the finding's line");

    let quiet = Device::interpreter_with(InterpreterOptions {
        checks: Checks::ALL,
        on_finding: OnFinding::Collect,
    });
    let k = Kernel::new("divide_by_zero", divide_by_zero);
    for _ in 0..3 {
        let y = k.run(&quiet, &[&x]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![f32::INFINITY; 2]);
    }
    let findings = k.compile(&quiet, &[x.spec().clone()]).unwrap().findings();
    assert_eq!(findings.len(), 1, "{findings:?}");
    let f = &findings[0];
    assert_eq!((f.op, f.kernel.as_str()), ("divide", "divide_by_zero"));
    assert_eq!(f.location.line, line);
    assert!(matches!(f.kind, FindingKind::NonFinite { .. }));
    assert_eq!(f.count, 6, "two elements in each of three runs");

    let strict = Device::interpreter_with(InterpreterOptions {
        checks: Checks::ALL,
        on_finding: OnFinding::Error,
    });
    let err = k.run(&strict, &[&x]).unwrap_err();
    match &err {
        Error::Interp(e) => match &**e {
            InterpError::Findings { kernel, findings } => {
                assert_eq!(kernel, "divide_by_zero");
                assert!(findings[0].contains("divide at"), "{findings:?}");
                assert!(findings[0].contains(&format!(":{line}:")), "{findings:?}");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }

    // Checks off: nothing found, nothing failed.
    let unchecked = Device::interpreter_with(InterpreterOptions {
        checks: Checks::NONE,
        on_finding: OnFinding::Error,
    });
    k.run(&unchecked, &[&x]).unwrap();
    assert!(k
        .compile(&unchecked, &[x.spec().clone()])
        .unwrap()
        .findings()
        .is_empty());
}

#[test]
fn one_kernel_can_be_interpreted_on_any_device() {
    let config = KernelConfig::default().interpret(true);
    let k = Kernel::new("affine", affine).config(config);
    let (x, w) = operands();
    let cpu = device();
    let exe = k
        .compile(&cpu, &[x.spec().clone(), w.spec().clone()])
        .unwrap();
    assert!(exe.is_interpreted());
    let got = k.run(&cpu, &[&x, &w]).unwrap();
    let want = Kernel::new("affine", affine).run(&cpu, &[&x, &w]).unwrap();
    near(&got[0], &want[0], 1e-5);

    // Device buffers in, device buffers of the same device out.
    let bx = cpu.to_device(&x).unwrap();
    let bw = cpu.to_device(&w).unwrap();
    let out = k.call(&cpu, &[&bx, &bw]).unwrap();
    assert_eq!(out[0].device(), cpu);
    near(&out[0].to_host().unwrap(), &want[0], 1e-5);
}

#[test]
fn profiles_and_loops_work_on_the_interpreter() {
    let k = Kernel::new("count", |a: &[Tensor]| {
        fori_loop(0, 100, a[0], |_, acc: Tensor| acc * 0.5 + 1.0)
    });
    let x = HostTensor::from_vec(vec![0.0f32; 4], [4]).unwrap();
    let dev = Device::interpreter();
    let y = k.run(&dev, &[&x]).unwrap();
    near(
        &y[0],
        &HostTensor::from_vec(vec![2.0f32; 4], [4]).unwrap(),
        1e-6,
    );
    let p = k
        .profile(&dev, &[&x], ProfileOptions { warmup: 0, runs: 2 })
        .unwrap();
    assert!(p.flops > 0.0, "{p:?}");
    assert!(p.memory.is_none());
}

#[test]
fn devices_are_named_as_the_environment_names_them() {
    assert!(Device::from_name("interpreter").unwrap().is_interpreter());
    assert_eq!(
        Device::from_name("interpreter").unwrap(),
        Device::interpreter()
    );
    assert_eq!(Device::from_name("cpu:2").unwrap().device_count(), 2);
    assert_eq!(Device::from_name("").unwrap().platform_name(), "cpu");
    for bad in ["cpux", "cpu:", "cpu:two", "interpreterx"] {
        let err = Device::from_name(bad).unwrap_err();
        assert!(
            matches!(&err, Error::Device(DeviceError::InvalidDevice { name }) if name == bad),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("interpreter"), "{err}");
    }
    assert!(matches!(
        Device::from_name("cpu:0"),
        Err(Error::Device(DeviceError::DeviceCount { requested: 0 }))
    ));
}
