//! Block-sparse attention (static and dynamic layouts) against dense masks; empty blocks skipped.

use tessel_dsl::tile::{Mask, MultiHeadMask};
use tessel_dsl::{HostTensor, TensorSpec, F32};
use tessel_kernels::attention::*;

use super::{close, data, dev, inputs, naive, noise, Extra, TOL_F32};

/// Empty key blocks are never read: values the band hides from every query
/// are NaN, which poisons the whole-tensor reference (0 · NaN) but not
/// flash or block-sparse attention.
#[test]
fn empty_blocks_are_skipped() {
    let dev = dev();
    let (s, d) = (64, 8);
    let q = data(&[1, 2, s, d], F32, 1);
    let k = data(&[1, 2, s, d], F32, 2);
    // Keys 32.. are visible to no query when query i sits at key i - 32.
    let v = HostTensor::from_fn(TensorSpec::new([1, 2, s, d], F32), |i| {
        if (i / d) % s >= 32 {
            f64::NAN
        } else {
            ((i % 13) as f64) / 13.0
        }
    });
    let o = FlashOptions::new()
        .causal(true)
        .q_offset(-32)
        .block_sizes(16, 16);
    let (want, _) = naive(&q, &k, &v, &o, &Extra::default());
    let flash = flash_attention::run(&dev, &q, &k, &v, o).unwrap();
    close(&flash, &want, TOL_F32, "flash with NaN in hidden values");
    let mask = AttentionMask::from(Mask::causal_offset(s, s, -32));
    let opts = FlashOptions::new().block_sizes(16, 16);
    let sparse = block_sparse_attention::run(&dev, &q, &k, &v, mask, opts).unwrap();
    close(
        &sparse,
        &want,
        TOL_F32,
        "block-sparse with NaN in hidden values",
    );
    let reference = attention_reference::run(&dev, &q, &k, &v, o).unwrap();
    assert!(reference
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .any(|x| x.is_nan()));
}

/// Block-sparse attention (static and dynamic layouts) against the
/// reference given the same dense mask, and against plain Rust.
#[test]
fn block_sparse_matches_the_dense_mask() {
    let dev = dev();
    let (b, hq, hkv, s, t, d) = (1, 4, 2, 37, 45, 8);
    let q = data(&[b, hq, s, d], F32, 1);
    let k = data(&[b, hkv, t, d], F32, 2);
    let v = data(&[b, hkv, t, d], F32, 3);
    let o = FlashOptions::new().block_sizes(16, 16);
    let dense = Mask::from_dense(s, t, noise(s * t, 3)).unwrap();
    let tiles: Vec<bool> = (0..s * t)
        .map(|e| ((e / t) / 8 + (e % t) / 16) % 3 != 0)
        .collect();
    let masks: Vec<(&str, AttentionMask, FlashOptions)> = vec![
        ("local", Mask::local(s, t, Some(9), Some(2)).into(), o),
        ("chunked", Mask::chunked_causal(s, t, 16).unwrap().into(), o),
        ("dense", dense.clone().into(), o),
        (
            "tiles & band",
            Mask::from_dense(s, t, tiles).unwrap().into(),
            o.causal(true).window(Some(20), None),
        ),
        (
            "per head",
            MultiHeadMask::new(vec![
                Mask::causal(s, t),
                Mask::local(s, t, Some(4), Some(0)),
                dense.and(&Mask::causal(s, t)).unwrap(),
                Mask::full(s, t),
            ])
            .unwrap()
            .into(),
            o.soft_cap(3.0),
        ),
    ];
    for (name, mask, opts) in &masks {
        let bits = mask.to_host_tensor(*opts).unwrap();
        let mh = bits.shape()[0];
        let bits4 = bits.clone().reshape([1, mh, s, t]).unwrap();
        let x = Extra {
            mask: Some(&bits4),
            ..Default::default()
        };
        let plain = FlashOptions {
            causal: false,
            window: (None, None),
            ..*opts
        };
        let (want, want_lse) = naive(&q, &k, &v, &plain, &x);
        let reference = Attention::Reference
            .run(&dev, &q, &k, &v, &inputs(&x), plain)
            .unwrap();
        close(
            &reference.out,
            &want,
            TOL_F32,
            &format!("{name}: reference"),
        );
        let sparse = Attention::BlockSparse(mask.clone())
            .run(&dev, &q, &k, &v, &AttentionInputs::new(), *opts)
            .unwrap();
        close(
            &sparse.out,
            &want,
            TOL_F32,
            &format!("{name}: block-sparse"),
        );
        close(
            &sparse.lse,
            &want_lse,
            TOL_F32,
            &format!("{name}: block-sparse lse"),
        );
        let t = DynamicMask::new(mask, *opts).unwrap();
        let dynamic = block_sparse_attention_dynamic::run(
            &dev,
            &q,
            &k,
            &v,
            &t.bits,
            &t.num_nonempty,
            &t.kv_block_ids,
            &t.block_kinds,
            *opts,
        )
        .unwrap();
        close(&dynamic, &want, TOL_F32, &format!("{name}: dynamic layout"));
    }
}

/// One dynamic-layout program serves every mask whose tables have the same
/// width; the block-sparse kernels equal flash attention on the band.
#[test]
fn dynamic_layout_reuses_one_program() {
    let dev = dev();
    let (s, d) = (40, 8);
    let q = data(&[2, 2, s, d], F32, 1);
    let k = data(&[2, 2, s, d], F32, 2);
    let o = FlashOptions::new().block_sizes(8, 8);
    let flash_opts = o.causal(true).window(Some(10), None);
    let flash = flash_attention::run(&dev, &q, &k, &k, flash_opts).unwrap();
    let band = flash_opts.band_mask(s, s).unwrap();
    let sparse = block_sparse_attention::run(&dev, &q, &k, &k, band.clone().into(), o).unwrap();
    close(
        &sparse,
        &flash.to_f64_vec(),
        TOL_F32,
        "block-sparse vs flash",
    );
    let a = DynamicMask::new(&band.into(), o).unwrap();
    let b = DynamicMask::new(&Mask::local(s, s, Some(3), Some(8)).into(), o).unwrap();
    assert_eq!(a.kv_block_ids.shape(), b.kv_block_ids.shape());
    let run = |t: &DynamicMask| {
        block_sparse_attention_dynamic::run(
            &dev,
            &q,
            &k,
            &k,
            &t.bits,
            &t.num_nonempty,
            &t.kv_block_ids,
            &t.block_kinds,
            o,
        )
        .unwrap()
    };
    let first = run(&a);
    close(&first, &flash.to_f64_vec(), TOL_F32, "dynamic vs flash");
    let traces = tessel_dsl::thread_trace_count();
    let second = run(&b);
    assert_eq!(
        tessel_dsl::thread_trace_count(),
        traces,
        "a second mask recompiled"
    );
    let x = Extra {
        mask: Some(&b.bits.clone().reshape([1, 1, s, s]).unwrap()),
        ..Default::default()
    };
    let (want, _) = naive(&q, &k, &k, &o, &x);
    close(&second, &want, TOL_F32, "second dynamic mask");
}
