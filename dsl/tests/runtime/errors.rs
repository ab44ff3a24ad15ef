//! What the runtime refuses: wrong arguments, foreign buffers, bad or mismatched programs.

use tessel_dsl::runtime::{Device, Program};
use tessel_dsl::{DeviceError, Error, HostTensor, F32, S32};

use super::{add_program, cpu, f32_tensor, spec};

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

/// A buffer donated to an earlier call, passed again: an error naming the
/// kernel and the parameter, before the plugin's own text.
#[test]
fn a_donated_buffer_passed_again_names_the_kernel_and_the_argument() {
    use tessel_dsl::kernel::{Kernel, KernelConfig};
    use tessel_dsl::Tensor;
    let dev = cpu();
    let config = KernelConfig {
        donate: &["state"],
        ..KernelConfig::default()
    };
    let step = Kernel::new("step", |a: &[Tensor]| a[0] + a[1])
        .params(["state", "delta"])
        .config(config);
    let state = dev.to_device(&f32_tensor(&[1.0, 2.0], &[2])).unwrap();
    let delta = dev.to_device(&f32_tensor(&[0.5, 0.5], &[2])).unwrap();
    assert!(!state.is_deleted().unwrap());
    let next = step.call(&dev, &[&state, &delta]).unwrap();
    assert!(state.is_deleted().unwrap());
    assert!(!delta.is_deleted().unwrap());
    let e = step.call(&dev, &[&state, &delta]).unwrap_err();
    assert!(
        matches!(e, Error::Device(DeviceError::Arguments { .. })),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(
        m.contains("`step`") && m.contains("argument 0 (`state`)"),
        "{m}"
    );
    assert!(m.contains("donated"), "{m}");
    // The result carries on.
    let again = step.call(&dev, &[&next[0], &delta]).unwrap();
    assert_eq!(
        again[0].to_host().unwrap().to_vec::<f32>().unwrap(),
        [2.0, 3.0]
    );
}

/// Donation by argument index (JAX's `donate_argnums`): the state is
/// updated in place and consumed; the compile key tells donating and
/// non-donating programs apart; a bad index is a kernel error.
#[test]
fn donation_by_argument_index() {
    use tessel_dsl::kernel::Kernel;
    use tessel_dsl::Tensor;
    let dev = cpu();
    let body = |a: &[Tensor]| (a[0] * 2.0, a[1] + 1.0);
    let both = Kernel::new("donate_both", body).donate_args([1, 0]);
    let state = dev.to_device(&f32_tensor(&[1.0, 2.0], &[2])).unwrap();
    let other = dev.to_device(&f32_tensor(&[5.0, 6.0], &[2])).unwrap();
    let out = both.call(&dev, &[&state, &other]).unwrap();
    assert!(state.is_deleted().unwrap() && other.is_deleted().unwrap());
    assert_eq!(
        out[0].to_host().unwrap().to_vec::<f32>().unwrap(),
        [2.0, 4.0]
    );
    assert_eq!(
        out[1].to_host().unwrap().to_vec::<f32>().unwrap(),
        [6.0, 7.0]
    );
    let two = [spec(&[2], F32), spec(&[2], F32)];
    let g = both.trace(&two).unwrap();
    assert_eq!(g.aliases, [(0, 0), (1, 1)]);
    let e = both.call(&dev, &[&out[0], &state]).unwrap_err().to_string();
    assert!(e.contains("argument 1") && e.contains("donated"), "{e}");
    // An index past the arguments, or with no result of its type.
    let past = Kernel::new("donate_past", body).donate_args([2]);
    let untyped = Kernel::new("donate_untyped", |a: &[Tensor]| a[0].sum(&[0])).donate_args([0]);
    for e in [
        past.trace(&two).unwrap_err(),
        untyped.trace(&two).unwrap_err(),
    ] {
        let k = e.as_kernel_error().expect("a kernel error");
        assert_eq!(k.op, "donate", "{e}");
    }
}
