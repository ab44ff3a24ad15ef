//! Size limits: element counts and byte sizes are computed with checked
//! arithmetic, and a spec beyond the limits (an extent above
//! `shape::MAX_EXTENT`, more than `shape::MAX_BYTES` bytes) is a typed error
//! wherever it enters tessel — host tensors, `.npy` data, kernel arguments,
//! op results, programs — instead of a wrapped size or an aborted process.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::{Device, Program};
use tessel_dsl::shape::{MAX_BYTES, MAX_EMPTY_PREFIX, MAX_EXTENT};
use tessel_dsl::{DeviceError, Error, HostError, HostTensor, Tensor, TensorSpec, F32, PRED, U8};

/// `f32[2^31, 2^31]`: 2^62 elements, 2^64 bytes (overflows `usize`).
fn huge() -> TensorSpec {
    TensorSpec::new([1 << 31, 1 << 31], F32)
}

#[track_caller]
fn too_large(r: Result<impl std::fmt::Debug, Error>, spec: &str) -> String {
    match r {
        Err(Error::Host(HostError::TooLarge { spec: s, reason })) => {
            assert_eq!(s, spec);
            reason
        }
        other => panic!("expected a TooLarge error for {spec}, got {other:?}"),
    }
}

#[test]
fn size_queries_are_checked_or_saturate() {
    let s = TensorSpec::new([1 << 40, 1 << 40], F32);
    assert_eq!(s.checked_num_elements(), None);
    assert_eq!(s.checked_size_in_bytes(), None);
    // Saturating, never a wrapped 0.
    assert_eq!(s.num_elements(), usize::MAX);
    assert_eq!(s.size_in_bytes(), usize::MAX);
    let reason = too_large(s.check_size(), "f32[1099511627776,1099511627776]");
    assert!(reason.contains("overflows"), "{reason}");

    // Elements fit, bytes do not: 2^61 f32 is 2^63 bytes.
    let s = TensorSpec::new([1 << 61], F32);
    assert_eq!(s.checked_num_elements(), Some(1 << 61));
    assert_eq!(s.checked_size_in_bytes(), Some(1 << 63));
    let reason = too_large(s.check_size(), "f32[2305843009213693952]");
    assert!(reason.contains(&MAX_BYTES.to_string()), "{reason}");

    // At the limit: isize::MAX bytes of u8.
    assert_eq!(
        TensorSpec::new([MAX_BYTES], U8).check_size().unwrap(),
        MAX_BYTES
    );
    // A zero extent makes the tensor empty, whatever the others are...
    let empty = TensorSpec::new([1 << 40, 1 << 40, 0], F32);
    assert_eq!(empty.checked_num_elements(), Some(0));
    assert_eq!(TensorSpec::new([0, 1 << 40], F32).check_size().unwrap(), 0);
    let at_limit = TensorSpec::new([MAX_EMPTY_PREFIX / 4, 4, 0, 1 << 40], F32);
    assert_eq!(at_limit.check_size().unwrap(), 0);
    // ... but XLA visits every index of the extents before the first 0 (it
    // aborted on f32[2^61, 0] and never finished compiling f32[2^30, 2^30, 0]).
    for shape in [
        vec![1 << 61, 0],
        vec![MAX_EMPTY_PREFIX + 1, 0],
        vec![1 << 40, 1 << 40, 0],
    ] {
        let spec = TensorSpec::new(shape, F32);
        let reason = too_large(spec.check_size(), &spec.to_string());
        assert!(reason.contains("before its first 0"), "{reason}");
    }
    // ... but every extent must still fit XLA's int64 extents.
    let wide = TensorSpec::new([0, MAX_EXTENT + 1], PRED);
    let reason = too_large(wide.check_size(), &wide.to_string());
    assert!(reason.contains("axis 1"), "{reason}");
    assert_eq!(TensorSpec::new([2, 3], F32).check_size().unwrap(), 24);
}

#[test]
fn host_tensors_beyond_the_limits_are_errors() {
    let spec = TensorSpec::new([1 << 62, 8], F32);
    too_large(
        HostTensor::try_zeros(spec.clone()),
        "f32[4611686018427387904,8]",
    );
    too_large(
        HostTensor::try_from_fn(spec.clone(), |_| 0.0),
        "f32[4611686018427387904,8]",
    );
    // 2^65 elements once wrapped to 0, and an empty vector matched it.
    too_large(
        HostTensor::from_vec(Vec::<f32>::new(), [1 << 62, 8]),
        "f32[4611686018427387904,8]",
    );
    too_large(
        HostTensor::from_bytes(huge(), Vec::new()),
        &huge().to_string(),
    );
    let empty = HostTensor::from_vec(Vec::<f32>::new(), [0]).unwrap();
    too_large(
        empty.clone().reshape([1 << 40, 1 << 40]),
        &TensorSpec::new([1 << 40, 1 << 40], F32).to_string(),
    );
    assert_eq!(
        empty.clone().reshape([1 << 20, 0]).unwrap().shape(),
        &[1 << 20, 0]
    );
    too_large(
        empty.reshape([1 << 40, 0]),
        &TensorSpec::new([1 << 40, 0], F32).to_string(),
    );

    // The infallible constructors refuse loudly, naming the spec.
    let panic = std::panic::catch_unwind(|| HostTensor::zeros(huge())).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("f32[2147483648,2147483648] is too large"),
        "{message}"
    );
}

/// `bytes` with the first `from` replaced by `to` (header edits).
fn edit(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("pattern in header");
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(to.as_bytes());
    out.extend_from_slice(&bytes[at + from.len()..]);
    out
}

#[test]
fn npy_headers_beyond_the_limits_are_errors() {
    let empty = HostTensor::from_vec(Vec::<f32>::new(), [0])
        .unwrap()
        .to_npy_bytes();
    // 2^61 f32 elements fit in usize, their 2^63 bytes do not fit the limit;
    // an empty array with an extent beyond int64 used to be accepted.
    for shape in [
        "(2305843009213693952,)",
        "(0, 18446744073709551615)",
        "(2305843009213693952, 0)",
    ] {
        let bad = edit(&empty, "(0,)", shape);
        match HostTensor::from_npy_bytes(&bad) {
            Err(Error::Host(HostError::Npy { message, .. })) => {
                assert!(message.contains("is too large"), "{shape}: {message}");
            }
            other => panic!("{shape}: expected an npy error, got {other:?}"),
        }
    }
}

fn kernel_message(r: Result<impl std::fmt::Debug, Error>) -> (String, String) {
    match r {
        Err(Error::Kernel(k)) => (k.op.clone(), k.message.clone()),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

#[test]
fn oversized_arguments_and_results_never_reach_the_compiler() {
    let dev = Device::cpu().unwrap();
    let double = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0).params(["x"]);
    // This spec used to abort the process inside XLA's compiler.
    let (op, message) = kernel_message(double.compile(&dev, &[huge()]));
    assert_eq!(op, "argument");
    assert!(
        message.contains("parameter `x`: f32[2147483648,2147483648] is too large"),
        "{message}"
    );
    kernel_message(double.lower(&[huge()]));
    // Empty, but XLA aborted on the first and never finished the second.
    for shape in [vec![1 << 61, 0], vec![1 << 30, 1 << 30, 0]] {
        let (op, message) = kernel_message(double.compile(&dev, &[TensorSpec::new(shape, F32)]));
        assert_eq!(op, "argument");
        assert!(message.contains("before its first 0"), "{message}");
    }

    // A result made inside the kernel.
    let big = Kernel::new("big", |a: &[Tensor]| {
        a[0].reshape(&[1, 1]).broadcast_to([1 << 31, 1 << 31])
    });
    let (op, message) = kernel_message(big.compile(&dev, &[TensorSpec::new([1], F32)]));
    assert!(op.starts_with("broadcast"), "{op}");
    assert!(
        message.contains("the result f32[2147483648,2147483648] is too large"),
        "{message}"
    );

    // A reshape whose extents overflow is refused without wrapping.
    let reshape = Kernel::new("reshape", |a: &[Tensor]| a[0].reshape(&[1 << 40, 1 << 40]));
    let (op, message) = kernel_message(reshape.lower(&[TensorSpec::new([0], F32)]));
    assert_eq!(op, "reshape");
    assert!(message.contains("overflow"), "{message}");

    // Large but valid specs still compile (nothing is allocated).
    assert!(double
        .compile(&dev, &[TensorSpec::new([1 << 31], F32)])
        .is_ok());

    // A hand-written program is checked before PJRT sees it.
    let ty = huge().mlir_type();
    let program = Program::new(
        "identity",
        format!(
            "module {{\n  func.func @main(%a: {ty}) -> {ty} {{\n    return %a : {ty}\n  }}\n}}\n"
        ),
        vec![huge()],
        vec![huge()],
    );
    match dev.compile(&program) {
        Err(Error::Device(DeviceError::Compile { message, .. })) => {
            assert!(message.contains("is too large"), "{message}");
        }
        other => panic!("expected a compile error, got {:?}", other.map(|_| ())),
    }
}
