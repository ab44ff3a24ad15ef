//! Native functions inside kernels (`tessel::ops::ffi`): called on the CPU
//! plugin (through its FFI extension) and on the interpreter, against a
//! plain-Rust reference; attributes; errors from the function, a result of
//! the wrong type and an unregistered name; gradients (none, or one given
//! with `custom_vjp`); `vmap` (one call per example); `pure_callback`.

mod common;

use common::*;
use tessel_dsl::autodiff::{custom_vjp, grad};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::ffi::{ffi_call, ffi_call_with, pure_callback, register, FfiAttr};
use tessel_dsl::runtime::Device;
use tessel_dsl::vmap::vmap;
use tessel_dsl::{HostTensor, Tensor, TensorSpec, F32, S32};

fn devices() -> [Device; 2] {
    [device(), Device::interpreter()]
}

fn err(e: impl ToString) -> String {
    e.to_string()
}

/// `y[i] = x[i] * scale + shift` and `argmax(x)` (s32), in Rust.
fn register_affine_argmax() {
    register("test_affine_argmax", |c| {
        let x = c.args[0].to_vec::<f32>().map_err(err)?;
        let (scale, shift) = (c.f64("scale")? as f32, c.i64("shift")? as f32);
        let y: Vec<f32> = x.iter().map(|v| v * scale + shift).collect();
        let best = (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b });
        Ok(vec![
            HostTensor::from_vec(y, c.args[0].shape().to_vec()).map_err(err)?,
            HostTensor::from_vec(vec![best as i32], Vec::<usize>::new()).map_err(err)?,
        ])
    });
}

#[test]
fn a_native_function_runs_on_the_plugin_and_the_interpreter() {
    register_affine_argmax();
    let k = Kernel::new(fresh_name("ffi"), |a: &[Tensor]| {
        let x = a[0].exp();
        let attrs = [("scale", FfiAttr::F64(0.5)), ("shift", FfiAttr::I64(3))];
        let specs = [x.spec(), TensorSpec::scalar(S32)];
        let r = ffi_call_with("test_affine_argmax", &[x], &specs, &attrs);
        (r[0] - 1.0, r[1])
    });
    let xs = vec![0.25f32, -1.0, 2.0, 0.5, 1.5];
    let x = HostTensor::from_vec(xs.clone(), [5]).unwrap();
    for dev in devices() {
        let out = k.run(&dev, &[&x]).unwrap();
        let want: Vec<f64> = xs
            .iter()
            .map(|v| (v.exp() * 0.5 + 3.0 - 1.0) as f64)
            .collect();
        assert_close(&out[0], &want, Class::Simple, "y");
        assert_eq!(out[1].to_vec::<i32>().unwrap(), vec![2]);
    }
}

#[test]
fn failures_inside_the_function_are_errors_naming_it() {
    register("test_fails", |c| {
        let x = c.args[0].to_vec::<f32>().map_err(err)?;
        if x.iter().any(|v| *v < 0.0) {
            return Err(format!("negative input {:?}", x));
        }
        Ok(vec![c.args[0].clone()])
    });
    register("test_wrong_type", |_| {
        Ok(vec![HostTensor::from_vec(vec![1i32], [1]).map_err(err)?])
    });
    register("test_panics", |_| panic!("boom"));
    let run = |name: &'static str, v: f32, dev: &Device| {
        let k = Kernel::new(fresh_name("ffi_err"), move |a: &[Tensor]| {
            ffi_call(name, &[a[0]], &[a[0].spec()])[0]
        });
        let x = HostTensor::from_vec(vec![v, 1.0], [2]).unwrap();
        k.run(dev, &[&x]).map(|_| ()).map_err(|e| e.to_string())
    };
    for dev in devices() {
        assert!(run("test_fails", 1.0, &dev).is_ok());
        let e = run("test_fails", -1.0, &dev).unwrap_err();
        assert!(
            e.contains("native function `test_fails`: negative input [-1.0, 1.0]"),
            "{e}"
        );
        let e = run("test_wrong_type", 1.0, &dev).unwrap_err();
        assert!(
            e.contains("result 0 is s32[1] but the call declares f32[2]"),
            "{e}"
        );
        let e = run("test_panics", 1.0, &dev).unwrap_err();
        assert!(
            e.contains("native function `test_panics`: panicked: boom"),
            "{e}"
        );
    }
}

#[test]
fn misuse_is_a_kernel_error_at_the_call() {
    let specs = [spec(&[3], F32)];
    let e = trace_error(
        |a| ffi_call("nobody_registered_this", &[a[0]], &[a[0].spec()])[0],
        &specs,
    );
    assert_eq!(e.op, "ffi_call");
    assert!(
        e.message
            .contains("no native function `nobody_registered_this` is registered"),
        "{e}"
    );
    register("test_identity", |c| Ok(c.args.to_vec()));
    let e = trace_error(|a| ffi_call("test_identity", &[a[0]], &[])[0], &specs);
    assert!(e.message.contains("at least one result"), "{e}");
    let e = trace_error(
        |a| {
            ffi_call_with(
                "test_identity",
                &[a[0]],
                &[a[0].spec()],
                &[("bad name", FfiAttr::I64(1))],
            )[0]
        },
        &specs,
    );
    assert!(
        e.message.contains("`bad name` cannot name an attribute"),
        "{e}"
    );
    // No gradient through native code, unless the call is given one.
    let e = trace_error(
        |a| {
            grad(
                |x: Tensor| ffi_call("test_identity", &[x], &[x.spec()])[0].sum(&[0]),
                a[0],
            )
        },
        &specs,
    );
    assert!(e.message.contains("has no gradient"), "{e}");
}

#[test]
fn custom_vjp_gives_a_native_call_its_gradient() {
    register("test_cube", |c| {
        let x = c.args[0].to_vec::<f32>().map_err(err)?;
        let y: Vec<f32> = x.iter().map(|v| v * v * v).collect();
        Ok(vec![HostTensor::from_vec(y, [x.len()]).map_err(err)?])
    });
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 0.5], [3]).unwrap();
    let out = run(
        |a: &[Tensor]| {
            grad(
                |x: Tensor| {
                    let y = custom_vjp(
                        x,
                        |x| (ffi_call("test_cube", &[x], &[x.spec()])[0], x),
                        |x: &Tensor, g: Tensor| g * *x * *x * 3.0,
                    );
                    y.sum(&[0])
                },
                a[0],
            )
        },
        &[&x],
    );
    assert_close(&out[0], &[3.0, 12.0, 0.75], Class::Simple, "d/dx x^3");
}

#[test]
fn vmap_calls_the_function_once_per_example() {
    register("test_sort_row", |c| {
        let mut x = c.args[0].to_vec::<f32>().map_err(err)?;
        x.sort_by(f32::total_cmp);
        Ok(vec![
            HostTensor::from_vec(x.clone(), [x.len()]).map_err(err)?
        ])
    });
    let xs = random(&mut Rng::new(5), &[4, 6], F32, -2.0, 2.0);
    let k = Kernel::new(fresh_name("ffi_vmap"), |a: &[Tensor]| {
        vmap(
            |x: Tensor| ffi_call("test_sort_row", &[x], &[x.spec()])[0],
            a[0],
        )
    });
    for dev in devices() {
        let out = k.run(&dev, &[&xs]).unwrap();
        let mut want = Vec::new();
        for row in xs.to_f64_vec().chunks(6) {
            let mut r = row.to_vec();
            r.sort_by(f64::total_cmp);
            want.extend(r);
        }
        assert_eq!(out[0].to_f64_vec(), want);
    }
}

#[test]
fn pure_callbacks_run_a_closure() {
    let offset = 10.0f32;
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let k = Kernel::new(fresh_name("callback"), move |a: &[Tensor]| {
        let f = move |args: &[HostTensor]| {
            let v = args[0].to_vec::<f32>().map_err(err)?;
            Ok(vec![HostTensor::from_vec(
                v.iter().map(|x| x + offset).collect::<Vec<_>>(),
                [2],
            )
            .map_err(err)?])
        };
        pure_callback(f, &[a[0]], &[a[0].spec()])[0] * 2.0
    });
    for dev in devices() {
        assert_eq!(
            k.run(&dev, &[&x]).unwrap()[0].to_vec::<f32>().unwrap(),
            vec![22.0, 24.0]
        );
    }
}

#[test]
fn a_native_call_whose_result_is_unused_runs_nowhere() {
    // Only what the results depend on is computed, on the plugin (lowering
    // prints live ops only) and on the interpreter alike: a dead call to a
    // function that always fails fails neither.
    register("test_always_fails", |_| {
        Err("this function always fails".into())
    });
    let k = Kernel::new(fresh_name("ffi_dead"), |a: &[Tensor]| {
        let _unused = ffi_call("test_always_fails", &[a[0]], &[a[0].spec()]);
        a[0] * 2.0
    });
    let x = HostTensor::from_vec(vec![1.0f32, -2.0], [2]).unwrap();
    for dev in devices() {
        let out = k.run(&dev, &[&x]).unwrap();
        assert_eq!(
            out[0].to_vec::<f32>().unwrap(),
            vec![2.0, -4.0],
            "{}",
            dev.platform_name()
        );
    }
    // Used, it fails on both.
    let used = Kernel::new(fresh_name("ffi_live"), |a: &[Tensor]| {
        ffi_call("test_always_fails", &[a[0]], &[a[0].spec()])[0] * 2.0
    });
    for dev in devices() {
        let e = used.run(&dev, &[&x]).unwrap_err().to_string();
        assert!(e.contains("always fails"), "{e}");
    }
}
