//! Compiling and running programs: results, buffers, dtypes, cost and memory analysis, threads.

use std::sync::Arc;

use tessel_dsl::runtime::{Device, Program};
use tessel_dsl::{DType, HostTensor, TensorSpec, F32, S32};

use super::{add_program, cpu, f32_tensor, read, spec};

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
