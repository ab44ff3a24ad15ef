//! Bad mask input is a typed host error, and in a trace a kernel error.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::tile::mask::{Mask, MultiHeadMask};
use tessel_dsl::{Error, HostError, Tensor, TensorSpec, S32};

fn host_message(e: Error) -> String {
    match e {
        Error::Host(HostError::InvalidInput {
            what: "mask",
            message,
        }) => message,
        other => panic!("expected an invalid-mask error, got {other:?}"),
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let m = host_message(Mask::from_dense(3, 4, vec![true; 11]).unwrap_err());
    assert!(m.contains("needs 12 bits, got 11"), "{m}");
    let a = Mask::causal(3, 4);
    let b = Mask::full(4, 3);
    let m = host_message(a.and(&b).unwrap_err());
    assert!(
        m.contains("cannot and a 3 x 4 mask with a 4 x 3 mask"),
        "{m}"
    );
    assert!(a.or(&b).is_err());
    for (bq, bk) in [(0, 4), (4, 0), (0, 0)] {
        let m = host_message(a.classify(bq, bk).unwrap_err());
        assert!(m.contains("block sizes must be positive"), "{m}");
    }
    host_message(Mask::chunked_causal(4, 4, 0).unwrap_err());
    host_message(MultiHeadMask::new(vec![]).unwrap_err());
    let m = host_message(MultiHeadMask::new(vec![a.clone(), b]).unwrap_err());
    assert!(m.contains("head 1"), "{m}");
    host_message(MultiHeadMask::shared(a.clone(), 0).unwrap_err());
    assert!(MultiHeadMask::shared(a.clone(), 2)
        .unwrap()
        .classify(0, 1)
        .is_err());

    // In a trace: recorded as kernel errors, not panics.
    let trace_err = |name: &'static str, specs: &[TensorSpec], f: &dyn Fn(&[Tensor]) -> Tensor| {
        let e = Kernel::new(name, f).trace(specs).unwrap_err();
        e.as_kernel_error().expect("a kernel error").message.clone()
    };
    let m = trace_err("zero_block", &[], &|_| a.block_mask(0usize, 0usize, 0, 4));
    assert!(m.contains("block sizes must be positive"), "{m}");
    let f32_scalar = [TensorSpec::new(Vec::<usize>::new(), tessel_dsl::F32)];
    let m = trace_err("float_index", &f32_scalar, &|x| {
        a.block_mask(x[0], 0usize, 2, 2)
    });
    assert!(m.contains("integer scalar"), "{m}");
    let vector = [TensorSpec::new([2], S32)];
    let m = trace_err("vector_index", &vector, &|x| {
        a.block_mask(0usize, x[0], 2, 2)
    });
    assert!(m.contains("integer scalar"), "{m}");
    let mh = MultiHeadMask::shared(a.clone(), 2).unwrap();
    let m = trace_err("bad_head", &[], &|_| mh.block_mask(2, 0usize, 0usize, 2, 2));
    assert!(m.contains("head 2 is out of range"), "{m}");
}

/// Masks too large to lay out or expand: errors, never an abort
/// allocating a TiB or a capacity-overflow panic.
#[test]
fn huge_masks_are_errors_not_aborts() {
    let big = Mask::causal(1 << 20, 1 << 20);
    let e = big.classify(1, 1).unwrap_err();
    assert!(e.to_string().contains("use larger blocks"), "{e}");
    // The same mask in blocks of 1024 lays out fine (2^20 blocks).
    assert!(big.classify(1024, 1024).is_ok());
    let full = Mask::full(1 << 32, 1 << 32);
    let e = full.to_host_tensor().unwrap_err();
    assert!(
        matches!(
            e,
            tessel_dsl::Error::Host(tessel_dsl::HostError::TooLarge { .. })
        ),
        "{e:?}"
    );
}
