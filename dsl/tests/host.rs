//! Host tensors and `.npy` files: constructors, conversions, and bad data
//! as typed errors.

use tessel_dsl::{DType, Error, HostError, HostTensor, TensorSpec};

fn sample(dtype: DType) -> HostTensor {
    let spec = TensorSpec::new([2, 3], dtype);
    HostTensor::from_fn(spec, |i| match dtype {
        DType::Pred => (i % 2) as f64,
        d if d.is_unsigned() => i as f64,
        _ => i as f64 - 2.0,
    })
}

#[test]
fn npy_round_trips_every_dtype() {
    let dir = std::env::temp_dir().join(format!("tessel-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for dtype in DType::ALL {
        let t = sample(dtype);
        let bytes = t.to_npy_bytes();
        assert_eq!(
            bytes.len() % 64,
            (6 * dtype.size_in_bytes()) % 64,
            "header padded to 64 bytes"
        );
        let back = HostTensor::from_npy_bytes(&bytes).unwrap();
        let back = if dtype == DType::F8E5M2 {
            assert_eq!(back.dtype(), DType::U8, "fp8 e5m2 is stored as uint8 bits");
            back.bitcast(dtype).unwrap()
        } else {
            back
        };
        assert_eq!(back, t, "{dtype}");
        let path = dir.join(format!("{dtype}.npy"));
        t.write_npy(&path).unwrap();
        let read = HostTensor::read_npy(&path).unwrap();
        assert_eq!(read.as_bytes(), t.as_bytes(), "{dtype}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn npy_scalars_vectors_big_endian_and_fortran_order() {
    let s = HostTensor::scalar(2.5f64);
    assert_eq!(HostTensor::from_npy_bytes(&s.to_npy_bytes()).unwrap(), s);
    let v = HostTensor::from_vec(vec![1i64, 2, 3], [3]).unwrap();
    assert_eq!(HostTensor::from_npy_bytes(&v.to_npy_bytes()).unwrap(), v);

    let npy = |descr: &str, fortran: &str, shape: &str, data: &[u8]| {
        let mut h =
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(data);
        b
    };
    let be: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|x| x.to_be_bytes())
        .collect();
    let t = HostTensor::from_npy_bytes(&npy(">f4", "False", "(2,)", &be)).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    // Column-major [[1, 2, 3], [4, 5, 6]] is stored as 1 4 2 5 3 6.
    let f: Vec<u8> = [1i32, 4, 2, 5, 3, 6]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let t = HostTensor::from_npy_bytes(&npy("<i4", "True", "(2, 3)", &f)).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    // A uint16 file is u16 data, also when it holds bf16 bit patterns
    // (reinterpreting them is explicit).
    let bits = half::bf16::from_f32(1.5).to_bits();
    let t = HostTensor::from_npy_bytes(&npy("<u2", "False", "(1,)", &bits.to_le_bytes())).unwrap();
    assert_eq!(t.dtype(), DType::U16);
    assert_eq!(t.to_vec::<u16>().unwrap(), vec![bits]);
    assert_eq!(t.bitcast(DType::BF16).unwrap().to_f64_vec(), vec![1.5]);
    let t = HostTensor::from_npy_bytes(&npy(">u8", "False", "(1,)", &u64::MAX.to_be_bytes()));
    assert_eq!(t.unwrap().to_vec::<u64>().unwrap(), vec![u64::MAX]);
    let t = HostTensor::from_npy_bytes(&npy(">i2", "False", "(1,)", &(-2i16).to_be_bytes()));
    assert_eq!(t.unwrap().to_vec::<i16>().unwrap(), vec![-2]);
}

/// The bytes `numpy.save` writes for a three-element vector of descriptor
/// `descr` (format 1.0, the header padded to 64 bytes).
fn numpy_saved(descr: &str, data: &[u8]) -> Vec<u8> {
    let mut b = b"\x93NUMPY\x01\x00v\x00".to_vec();
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3,), }}");
    h.push_str(&" ".repeat(117 - h.len()));
    h.push('\n');
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b
}

/// uint16, int16 and uint64 files (`np.array([0, 1, 65535], np.uint16)`,
/// `np.array([-32768, -1, 32767], np.int16)`, `np.array([0, 2**63 + 1,
/// 2**64 - 1], np.uint64)`) read as u16, s16 and u64 with their extremes,
/// and are written back byte for byte.
#[test]
fn npy_uint16_int16_uint64_files_round_trip() {
    let le = |v: &[u64], w: usize| -> Vec<u8> {
        v.iter()
            .flat_map(|x| x.to_le_bytes()[..w].to_vec())
            .collect()
    };
    let u16s = numpy_saved("<u2", &le(&[0, 1, 65535], 2));
    let s16s = numpy_saved("<i2", &[0x00, 0x80, 0xff, 0xff, 0xff, 0x7f]);
    let u64s = numpy_saved("<u8", &le(&[0, (1 << 63) + 1, u64::MAX], 8));
    let t = HostTensor::from_npy_bytes(&u16s).unwrap();
    assert_eq!(t.dtype(), DType::U16, "uint16 is u16, not bf16");
    assert_eq!(t.to_vec::<u16>().unwrap(), vec![0, 1, 65535]);
    assert_eq!(t.to_npy_bytes(), u16s);
    let t = HostTensor::from_npy_bytes(&s16s).unwrap();
    assert_eq!(t.dtype(), DType::S16);
    assert_eq!(t.to_vec::<i16>().unwrap(), vec![-32768, -1, 32767]);
    assert_eq!(t.to_npy_bytes(), s16s);
    let t = HostTensor::from_npy_bytes(&u64s).unwrap();
    assert_eq!(t.dtype(), DType::U64);
    assert_eq!(t.to_vec::<u64>().unwrap(), vec![0, (1 << 63) + 1, u64::MAX]);
    assert_eq!(t.to_npy_bytes(), u64s);

    // Written by tessel, then read back from a file.
    let dir = std::env::temp_dir().join(format!("tessel-npy-ints-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tensors = [
        HostTensor::from_vec(vec![65535u16, 0, 7, 32768], [2, 2]).unwrap(),
        HostTensor::from_vec(vec![i16::MIN, i16::MAX, -1, 0], [2, 2]).unwrap(),
        HostTensor::from_vec(vec![u64::MAX, 1 << 63, 0, 42], [2, 2]).unwrap(),
    ];
    for (t, descr) in tensors.iter().zip(["'<u2'", "'<i2'", "'<u8'"]) {
        let bytes = t.to_npy_bytes();
        let header = String::from_utf8_lossy(&bytes[10..64]);
        assert!(
            header.starts_with(&format!("{{'descr': {descr},")),
            "{header}"
        );
        let path = dir.join(format!("{}.npy", t.dtype()));
        t.write_npy(&path).unwrap();
        assert_eq!(&HostTensor::read_npy(&path).unwrap(), t);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The bytes `numpy.save` writes for JAX's `ml_dtypes` arrays
/// (`np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)` and the two fp8
/// types), read as bf16 and fp8; bf16 and e4m3fn are written back the
/// same way, byte for byte.
#[test]
fn ml_dtypes_npy_files_round_trip() {
    let saved = numpy_saved;
    let bf16 = saved("<V2", &[0xc0, 0x3f, 0x00, 0xc0, 0x80, 0x3e]);
    let t = HostTensor::from_npy_bytes(&bf16).unwrap();
    assert_eq!(t.dtype(), DType::BF16);
    assert_eq!(t.to_f64_vec(), vec![1.5, -2.0, 0.25]);
    assert_eq!(t.to_npy_bytes(), bf16);
    let e4m3 = saved("<V1", &[0x3c, 0xc0, 0x28]);
    let t = HostTensor::from_npy_bytes(&e4m3).unwrap();
    assert_eq!(t.dtype(), DType::F8E4M3FN);
    assert_eq!(t.to_f64_vec(), vec![1.5, -2.0, 0.25]);
    assert_eq!(
        HostTensor::from_npy_bytes(&t.to_npy_bytes()).unwrap(),
        t,
        "e4m3fn round-trips through its own file"
    );
    let e5m2 = saved("<f1", &[0x3e, 0xc0, 0x34]);
    let t = HostTensor::from_npy_bytes(&e5m2).unwrap();
    assert_eq!(t.dtype(), DType::F8E5M2);
    assert_eq!(t.to_f64_vec(), vec![1.5, -2.0, 0.25]);
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

fn assert_npy_error(bytes: &[u8], needle: &str) {
    match HostTensor::from_npy_bytes(bytes) {
        Err(Error::Host(HostError::Npy { message, .. })) => {
            assert!(
                message.contains(needle),
                "{message:?} should mention {needle:?}"
            )
        }
        other => panic!("expected an npy error, got {other:?}"),
    }
}

#[test]
fn corrupt_npy_is_a_typed_error() {
    let good = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])
        .unwrap()
        .to_npy_bytes();
    assert_npy_error(b"", "magic");
    assert_npy_error(b"PK\x03\x04 not numpy", "magic");
    assert_npy_error(&good[..20], "truncated");
    assert_npy_error(&good[..good.len() - 3], "needs 16 data bytes");
    let mut v9 = good.clone();
    v9[6] = 9;
    assert_npy_error(&v9, "version 9");
    assert_npy_error(&edit(&good, "<f4", "<c8"), "unsupported dtype");
    // A non-ASCII byte-order character or code (a panic on a char boundary
    // once); same byte length, so the header length still holds.
    assert_npy_error(&edit(&good, "<f4", "é4"), "unsupported dtype");
    assert_npy_error(&edit(&good, "<f4", "<é"), "unsupported dtype");
    assert_npy_error(&edit(&good, "'<f4'", "''   "), "unsupported dtype");
    assert_npy_error(&edit(&good, "(2, 2)", "(2, x)"), "bad shape");
    assert_npy_error(&edit(&good, "False", "Maybe"), "fortran_order");
    assert_npy_error(
        &edit(&good, "(2, 2), }", "(99999999999, 99999999999, 99), }"),
        "too large",
    );
    let missing = std::env::temp_dir().join("tessel-no-such-file.npy");
    assert!(matches!(
        HostTensor::read_npy(&missing),
        Err(Error::Io { .. })
    ));
}

#[test]
fn data_length_and_dtype_mismatches_are_errors() {
    assert!(matches!(
        HostTensor::from_vec(vec![1.0f32; 5], [2, 3]),
        Err(Error::Host(HostError::DataLength {
            expected: 24,
            actual: 20,
            ..
        }))
    ));
    assert!(HostTensor::from_bytes(TensorSpec::new([2], DType::F64), vec![0; 15]).is_err());
    let t = HostTensor::from_vec(vec![1i32, 2], [2]).unwrap();
    assert!(matches!(
        t.to_vec::<f32>(),
        Err(Error::Host(HostError::DTypeMismatch { .. }))
    ));
    let reshape = t.clone().reshape([3]).unwrap_err();
    assert!(
        matches!(&reshape, Error::Host(HostError::Reshape { from, to }) if from == "s32[2]" && to == "s32[3]"),
        "{reshape:?}"
    );
    assert_eq!(
        reshape.to_string(),
        "cannot reshape s32[2] to s32[3]: element counts differ"
    );
    assert_eq!(t.clone().reshape([1, 2]).unwrap().shape(), &[1, 2]);
    let bitcast = t.bitcast(DType::F16).unwrap_err();
    assert!(
        matches!(&bitcast, Error::Host(HostError::Bitcast { from, to }) if from == "s32[2]" && to == "f16"),
        "{bitcast:?}"
    );
}

#[test]
fn conversions_between_host_types() {
    let v = vec![half::bf16::from_f32(0.5), half::bf16::from_f32(-3.0)];
    let t = HostTensor::from_slice(&v, [2]).unwrap();
    assert_eq!(t.to_vec::<half::bf16>().unwrap(), v);
    assert_eq!(t.cast(DType::F32).to_vec::<f32>().unwrap(), vec![0.5, -3.0]);
    let f8 = HostTensor::from_vec(vec![float8::F8E4M3::from_f32(1.5)], [1]).unwrap();
    assert_eq!(f8.dtype(), DType::F8E4M3FN);
    assert_eq!(f8.to_f64_vec(), vec![1.5]);
    let p = HostTensor::from_vec(vec![true, false, true], [3]).unwrap();
    assert_eq!(p.to_vec::<bool>().unwrap(), vec![true, false, true]);
    assert_eq!(format!("{p:?}"), "HostTensor(pred[3]: [1, 0, 1])");
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_round_trip() {
    use tessel_dsl::ndarray;
    let a = ndarray::Array2::from_shape_vec((2, 3), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let t = HostTensor::from_ndarray(&a.t().to_owned()).unwrap();
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let back = t.to_ndarray::<f32>().unwrap();
    assert_eq!(back.shape(), &[3, 2]);
    assert!(t.to_ndarray::<i32>().is_err());
    // Views (strided ones too), shared arrays and TryFrom both ways.
    let view = HostTensor::from_ndarray(&a.slice(ndarray::s![.., ..;2])).unwrap();
    assert_eq!(view.to_vec::<f32>().unwrap(), vec![1.0, 3.0, 4.0, 6.0]);
    let shared = HostTensor::try_from(a.clone().into_shared()).unwrap();
    assert_eq!(shared.shape(), &[2, 3]);
    let from_ref: HostTensor = (&a.view()).try_into().unwrap();
    assert_eq!(from_ref, shared);
    let arr: ndarray::ArrayD<f32> = (&t).try_into().unwrap();
    assert_eq!(arr, back);
    let wrong: Result<ndarray::ArrayD<u8>, _> = (&t).try_into();
    assert!(wrong.is_err());
}
