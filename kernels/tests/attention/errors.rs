//! Bad shapes, dtypes, options and optional inputs are kernel errors that name the problem.

use tessel_dsl::tile::{Mask, MultiHeadMask};
use tessel_dsl::{Error, HostTensor, TensorSpec, F32, S32};
use tessel_kernels::attention::*;

use super::{data, dev};

fn kernel_error(e: Error) -> String {
    match e.as_kernel_error() {
        Some(k) => k.message.clone(),
        None => panic!("expected a kernel error, got {e}"),
    }
}

#[test]
fn bad_inputs_are_kernel_errors() {
    let spec = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    let o = FlashOptions::new().block_sizes(8, 8);
    let (q, k) = (spec(&[1, 6, 16, 8]), spec(&[1, 4, 16, 8]));
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o).unwrap_err());
    assert!(m.contains("multiple of the key/value heads"), "{m}");
    let m = kernel_error(attention_reference::lower(&q, &k, &k, o).unwrap_err());
    assert!(m.contains("multiple of the key/value heads"), "{m}");
    let (q, k) = (spec(&[1, 4, 16, 8]), spec(&[1, 2, 16, 16]));
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o).unwrap_err());
    assert!(m.contains("head dimension"), "{m}");
    let k = spec(&[1, 2, 16, 8]);
    let m = kernel_error(flash_attention::lower(&q, &k, &spec(&[1, 2, 15, 8]), o).unwrap_err());
    assert!(m.contains("same heads and length"), "{m}");
    let m = kernel_error(flash_attention::lower(&spec(&[4, 16, 8]), &k, &k, o).unwrap_err());
    assert!(m.contains("rank-4"), "{m}");
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.block_sizes(0, 8)).unwrap_err());
    assert!(m.contains("block sizes"), "{m}");
    // The tile rule the guide states: multiples of 8.
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.block_sizes(12, 8)).unwrap_err());
    assert!(
        m.contains("positive multiples of 8") && m.contains("12 x 8"),
        "{m}"
    );
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.dropout(0.1)).unwrap_err());
    assert!(m.contains("needs a seed"), "{m}");
    let m = kernel_error(flash_attention::lower(&q, &k, &k, o.soft_cap(-1.0)).unwrap_err());
    assert!(m.contains("soft-cap"), "{m}");

    // Optional inputs of the wrong shapes or dtypes, through the host runner.
    let dev = dev();
    let (qh, kh) = (data(&[1, 4, 16, 8], F32, 1), data(&[1, 2, 16, 8], F32, 2));
    let run = |x: AttentionInputs<'_>| {
        kernel_error(
            Attention::Flash
                .run(&dev, &qh, &kh, &kh, &x, o)
                .unwrap_err(),
        )
    };
    let bias = data(&[1, 3, 16, 16], F32, 3);
    assert!(run(AttentionInputs::new().bias(&bias)).contains("bias must have shape"));
    let short = data(&[1, 4, 16, 15], F32, 3);
    assert!(run(AttentionInputs::new().bias(&short)).contains("bias must have shape"));
    let float_mask = data(&[1, 1, 16, 16], F32, 3);
    assert!(run(AttentionInputs::new().mask(&float_mask)).contains("mask must be pred"));
    let bad_mask = HostTensor::from_vec(vec![true; 16 * 17], [1, 1, 16, 17]).unwrap();
    assert!(run(AttentionInputs::new().mask(&bad_mask)).contains("mask must have shape"));
    let seg = HostTensor::from_vec(vec![0i32; 15], [1, 15]).unwrap();
    assert!(run(AttentionInputs::new().segment_ids(&seg, &seg)).contains("segment ids"));

    // Block-sparse: mask shape and head count; dynamic tables.
    let m = kernel_error(
        block_sparse_attention::lower(&q, &k, &k, Mask::causal(16, 15).into(), o).unwrap_err(),
    );
    assert!(m.contains("the mask is 16 x 15"), "{m}");
    let two = MultiHeadMask::new(vec![Mask::causal(16, 16), Mask::full(16, 16)]).unwrap();
    let m = kernel_error(block_sparse_attention::lower(&q, &k, &k, two.into(), o).unwrap_err());
    assert!(m.contains("2 heads"), "{m}");
    let t = DynamicMask::new(&Mask::causal(16, 16).into(), o).unwrap();
    let wide = TensorSpec::new([3], S32);
    let m = kernel_error(
        block_sparse_attention_dynamic::lower(
            &q,
            &k,
            &k,
            t.bits.spec(),
            &wide,
            t.kv_block_ids.spec(),
            t.block_kinds.spec(),
            o,
        )
        .unwrap_err(),
    );
    assert!(m.contains("num_nonempty must be s32[2]"), "{m}");
    let bits = TensorSpec::new([1, 16, 16], F32);
    let m = kernel_error(
        block_sparse_attention_dynamic::lower(
            &q,
            &k,
            &k,
            &bits,
            t.num_nonempty.spec(),
            t.kv_block_ids.spec(),
            t.block_kinds.spec(),
            o,
        )
        .unwrap_err(),
    );
    assert!(m.contains("pred"), "{m}");
}

/// The reference at S = 2^40: an error naming the kernel and its logits,
/// not one inside a `dot_general` the user never wrote.
#[test]
fn the_reference_refuses_logits_past_the_size_limits() {
    let q = TensorSpec::new([1, 1, 1 << 40, 2], F32);
    let e = attention_reference::lower(&q, &q, &q, FlashOptions::new()).unwrap_err();
    let k = e.as_kernel_error().expect("a kernel error");
    assert_eq!(k.op, "attention_reference");
    assert!(k.message.contains("use flash_attention"), "{}", k.message);
}
