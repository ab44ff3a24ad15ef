//! `#[ffi_function]`: a Rust function over typed buffers and attributes,
//! called from a kernel on the CPU plugin and the interpreter, against the
//! same function called directly; a buffer of another element type is an
//! error naming the function and the argument.

use tessel::ffi::FfiBuffer;
use tessel::prelude::*;
use tessel::{ffi_function, kernel::Kernel};

/// Softmax of each row at temperature `t`, and the index of each row's largest entry.
#[ffi_function]
fn row_softmax(
    x: FfiBuffer<f32>,
    #[attr] t: f64,
    #[attr] tag: String,
) -> Result<(FfiBuffer<f32>, FfiBuffer<i32>), String> {
    if tag != "rows" {
        return Err(format!("unexpected tag {tag}"));
    }
    let cols = *x.shape.last().ok_or("x must have rows")?;
    let (mut y, mut best) = (Vec::new(), Vec::new());
    for row in x.data.chunks(cols) {
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = row.iter().map(|v| ((v - m) / t as f32).exp()).collect();
        let z: f32 = e.iter().sum();
        y.extend(e.iter().map(|v| v / z));
        best.push(
            row.iter()
                .enumerate()
                .fold(0, |b, (i, v)| if *v > row[b] { i } else { b }) as i32,
        );
    }
    let rows = x.shape[0];
    Ok((
        FfiBuffer::new(x.shape.clone(), y),
        FfiBuffer::new([rows], best),
    ))
}

#[cpu_kernel]
fn softmax_native(x: Tensor, t: f64) -> (Tensor, Tensor) {
    let rows = x.dim(0);
    let specs = [x.spec(), TensorSpec::new([rows], S32)];
    let out = row_softmax::call(x * 1.0, t, "rows".to_string(), &specs);
    (out[0], out[1])
}

#[test]
fn an_ffi_function_runs_in_a_kernel_on_both_devices() {
    let v: Vec<f32> = (0..12).map(|i| ((i * 7 % 5) as f32) - 1.5).collect();
    let x = HostTensor::from_vec(v.clone(), [3, 4]).unwrap();
    let (want_y, want_i) = row_softmax(FfiBuffer::new([3, 4], v), 0.5, "rows".into()).unwrap();
    for dev in [Device::cpu().unwrap(), Device::interpreter()] {
        let (y, i) = softmax_native::run(&dev, &x, 0.5).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), want_y.data);
        assert_eq!(i.to_vec::<i32>().unwrap(), want_i.data);
    }
}

#[test]
fn a_buffer_of_another_type_is_an_error_naming_the_function() {
    row_softmax::register();
    let k = Kernel::new("ffi_wrong_type", |a: &[Tensor]| {
        let specs = [a[0].spec(), TensorSpec::new([2], S32)];
        tessel::ffi::ffi_call_with(
            row_softmax::NAME,
            &[a[0]],
            &specs,
            &[
                ("t", tessel::ffi::FfiAttr::F64(1.0)),
                ("tag", tessel::ffi::FfiAttr::Str("rows".into())),
            ],
        )
    });
    let x = HostTensor::from_vec(vec![1i32, 2, 3, 4], [2, 2]).unwrap();
    for dev in [Device::cpu().unwrap(), Device::interpreter()] {
        let e = k.run(&dev, &[&x]).unwrap_err().to_string();
        assert!(e.contains("row_softmax`: argument 0 (s32[2,2])"), "{e}");
    }
    // A failure the function reports.
    let k = Kernel::new("ffi_bad_tag", |a: &[Tensor]| {
        row_softmax::call(
            a[0],
            1.0,
            "columns".into(),
            &[a[0].spec(), TensorSpec::new([2], S32)],
        )
    });
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    let e = k
        .run(&Device::cpu().unwrap(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unexpected tag columns"), "{e}");
}
