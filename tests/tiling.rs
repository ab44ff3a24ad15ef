//! Tiling: `blocks()` and `grid()` loops, block reads and writes with
//! virtual auto-padding, block-size rules. Tiled results equal untiled ones
//! for block sizes 8..256 and extents that are and are not block multiples.

use tessel::prelude::*;

mod common;

use common::{assert_close, dev, matmul_ref};

fn rand(spec: TensorSpec, seed: u64) -> HostTensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    HostTensor::from_fn(spec, |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % 2001) as f64 / 1000.0 - 1.0
    })
}

/// GEMM over K blocks: one traced loop, K padded virtually with zeros.
#[cpu_kernel(block_size = 8)]
fn gemm_k(a: Tensor, b: Tensor) -> Tensor {
    let mut acc = Tensor::zeros([a.dim(0), b.dim(1)], F32);
    for kb in blocks(a.dim(1)) {
        acc = acc + a.block(1, kb).matmul(b.block(0, kb));
    }
    acc
}

/// GEMM over a grid of output tiles with an inner K loop (nested traced loops).
#[cpu_kernel(block_size = 8)]
fn gemm_grid(a: Tensor, b: Tensor) -> Tensor {
    let (m, k, n) = (a.dim(0), a.dim(1), b.dim(1));
    let bs = tessel::tile::block_size().unwrap_or(8);
    let mut c = Tensor::zeros([m, n], F32);
    for (i, j) in grid((blocks(m), blocks(n))) {
        let mut acc = Tensor::zeros([bs, bs], F32);
        for kb in blocks(k) {
            acc = acc
                + a.block(0, i)
                    .block(1, kb)
                    .matmul(b.block(0, kb).block(1, j));
        }
        c = c.set_block(0, i, c.block(0, i).set_block(1, j, acc));
    }
    c
}

/// Row blocks written back with `set_block`; padded rows never leak out.
#[cpu_kernel(block_size = 8)]
fn rowwise_softmax(x: Tensor) -> Tensor {
    let mut out = x.zeros_like();
    for rb in blocks(x.dim(0)) {
        out = out.set_block(0, rb, x.block_or(0, rb, -1.0).softmax(-1));
    }
    out
}

#[test]
fn tiled_gemm_equals_untiled_for_block_sizes_and_ragged_extents() {
    let d = dev();
    let shapes = [
        (1, 1, 1),
        (5, 7, 3),
        (16, 16, 16),
        (13, 31, 9),
        (24, 257, 17),
    ];
    for bs in [8, 16, 64, 128, 256] {
        let cfg = gemm_k::CONFIG.with_block_size(Some(bs));
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let a = rand(TensorSpec::new([m, k], F32), i as u64);
            let b = rand(TensorSpec::new([k, n], F32), 100 + i as u64);
            let want = matmul_ref(&a, &b);
            assert_close(&gemm_k::run_with(&cfg, &d, &a, &b).unwrap(), &want, 1e-5);
        }
    }
}

#[test]
fn grid_gemm_with_nested_loops() {
    let d = dev();
    for (m, k, n) in [(8, 8, 8), (13, 7, 19), (1, 17, 2)] {
        let a = rand(TensorSpec::new([m, k], F32), m as u64);
        let b = rand(TensorSpec::new([k, n], F32), n as u64);
        assert_close(
            &gemm_grid::run(&d, &a, &b).unwrap(),
            &matmul_ref(&a, &b),
            1e-5,
        );
    }
    let text = gemm_grid::lower(
        &TensorSpec::new([16, 16], F32),
        &TensorSpec::new([16, 16], F32),
    )
    .unwrap();
    assert_eq!(
        text.matches("stablehlo.while").count(),
        2,
        "grid loop and K loop"
    );
}

#[test]
fn set_block_writes_only_in_range_rows() {
    let d = dev();
    for rows in [1, 8, 13, 17] {
        let x = rand(TensorSpec::new([rows, 5], F32), rows as u64);
        let v = x.to_f64_vec();
        let want: Vec<f64> = v
            .chunks(5)
            .flat_map(|r| {
                let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = r.iter().map(|x| (x - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |x| x / s)
            })
            .collect();
        assert_close(&rowwise_softmax::run(&d, &x).unwrap(), &want, 1e-5);
    }
}

#[test]
fn block_reads_pad_with_the_chosen_value() {
    #[cpu_kernel(block_size = 8)]
    fn last_block(x: Tensor, b: Tensor) -> (Tensor, Tensor) {
        (x.block_or(0, b, -7.0), x.block(0, 1))
    }
    let x = HostTensor::from_vec((0..11).map(|i| i as f32).collect::<Vec<_>>(), [11]).unwrap();
    let (dynamic, fixed) = last_block::run(&dev(), &x, &HostTensor::scalar(1i32)).unwrap();
    let want = [8.0, 9.0, 10.0, -7.0, -7.0, -7.0, -7.0, -7.0];
    assert_eq!(dynamic.to_vec::<f32>().unwrap(), want);
    assert_eq!(
        fixed.to_vec::<f32>().unwrap(),
        [8.0, 9.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    let (first, _) = last_block::run(&dev(), &x, &HostTensor::scalar(0i32)).unwrap();
    assert_eq!(
        first.to_vec::<f32>().unwrap(),
        (0..8).map(|i| i as f32).collect::<Vec<_>>()
    );
}

#[test]
fn auto_pad_false_rejects_ragged_axes() {
    #[cpu_kernel(block_size = 8, auto_pad = false)]
    fn strict(a: Tensor, b: Tensor) -> Tensor {
        let mut acc = Tensor::zeros([a.dim(0), b.dim(1)], F32);
        for kb in blocks(a.dim(1)) {
            acc = acc + a.block(1, kb).matmul(b.block(0, kb));
        }
        acc
    }
    let d = dev();
    let ok = strict::run(
        &d,
        &rand(TensorSpec::new([2, 16], F32), 1),
        &rand(TensorSpec::new([16, 3], F32), 2),
    );
    assert!(ok.is_ok());
    let err = strict::run(
        &d,
        &rand(TensorSpec::new([2, 13], F32), 1),
        &rand(TensorSpec::new([13, 3], F32), 2),
    )
    .unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert_eq!(k.op, "block");
    assert!(
        k.message.contains("auto_pad = false") && k.message.contains("13"),
        "{}",
        k.message
    );
    assert!(k.location.file.ends_with("tiling.rs"));
}

#[test]
fn block_size_rules_at_trace_time() {
    #[tpu_kernel(block_size = 128)]
    fn tpu_rows(x: Tensor) -> Tensor {
        let mut y = x;
        for b in blocks(x.dim(-1)) {
            y = y.set_block(-1, b, x.block(-1, b) * 2.0);
        }
        y
    }
    let d = dev();
    let x = rand(TensorSpec::new([4, 300], F32), 3);
    let y = tpu_rows::run(&d, &x).unwrap();
    assert_close(
        &y,
        &x.to_f64_vec().iter().map(|v| v * 2.0).collect::<Vec<_>>(),
        0.0,
    );
    // 64 on the minor axis breaks the TPU rule; 12 breaks the multiple-of-8 rule everywhere.
    for (bs, needle) in [(64, "multiple of 128"), (12, "multiple of 8")] {
        let cfg = tpu_rows::CONFIG.with_block_size(Some(bs));
        let err = tpu_rows::run_with(&cfg, &d, &x).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(needle) && msg.contains(tessel::tile::TPU_RULE),
            "{msg}"
        );
    }
}

#[test]
fn unrolled_blocks_are_rust_loops() {
    #[cpu_kernel(block_size = 8)]
    fn unrolled_sum(x: Tensor) -> Tensor {
        let mut acc = Tensor::zeros([x.dim(1)], F32);
        #[unroll]
        for b in blocks(x.dim(0)) {
            acc = acc + x.block(0, b).sum(&[0]);
        }
        acc
    }
    let x = rand(TensorSpec::new([21, 3], F32), 9);
    let v = x.to_f64_vec();
    let want: Vec<f64> = (0..3)
        .map(|j| (0..21).map(|i| v[i * 3 + j]).sum())
        .collect();
    assert_close(&unrolled_sum::run(&dev(), &x).unwrap(), &want, 1e-5);
    assert!(!unrolled_sum::lower(x.spec()).unwrap().contains("while"));
}

#[test]
fn map_blocks_loop_and_batched_forms_agree() {
    use tessel::tile::BlockMode;
    #[cpu_kernel(block_size = 8)]
    fn normalize_rows(x: Tensor, batched: bool) -> Tensor {
        let mode = if batched {
            BlockMode::Batched
        } else {
            BlockMode::Loop
        };
        x.map_blocks_with(0, mode, |tile| {
            tile.softmax(-1) * 2.0 - tile.mean_keepdims(&[-1])
        })
    }
    let d = dev();
    for rows in [1, 8, 13, 24] {
        let x = rand(TensorSpec::new([rows, 6], F32), rows as u64);
        let looped = normalize_rows::run(&d, &x, false).unwrap();
        let batched = normalize_rows::run(&d, &x, true).unwrap();
        assert_close(&batched, &looped.to_f64_vec(), 1e-6);
        // And against a direct whole-tensor computation.
        let v = x.to_f64_vec();
        let want: Vec<f64> = v
            .chunks(6)
            .flat_map(|r| {
                let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = r.iter().map(|x| (x - m).exp()).collect();
                let s: f64 = e.iter().sum();
                let mean = r.iter().sum::<f64>() / 6.0;
                e.into_iter().map(move |x| x / s * 2.0 - mean)
            })
            .collect();
        assert_close(&looped, &want, 1e-5);
    }
    let spec = TensorSpec::new([13, 6], F32);
    assert!(normalize_rows::lower(&spec, false)
        .unwrap()
        .contains("stablehlo.while"));
    assert!(!normalize_rows::lower(&spec, true)
        .unwrap()
        .contains("stablehlo.while"));
}

/// The loop source's type decides, not its spelling: a user's function
/// returning `Blocks` drives one traced loop like `blocks(..)` itself.
fn row_blocks(x: &Tensor) -> tessel::tile::Blocks {
    blocks(x.dim(0))
}

#[test]
fn a_user_function_returning_blocks_drives_a_traced_loop() {
    #[cpu_kernel(block_size = 8)]
    fn traced_sum(x: Tensor) -> Tensor {
        let mut acc = Tensor::zeros([x.dim(1)], F32);
        for b in row_blocks(&x) {
            acc = acc + x.block(0, b).sum(&[0]);
        }
        let parts = blocks(x.dim(0));
        let mut again = Tensor::zeros([x.dim(1)], F32);
        for b in parts {
            again = again + x.block(0, b).sum(&[0]);
        }
        acc + again
    }
    let x = rand(TensorSpec::new([21, 3], F32), 10);
    let v = x.to_f64_vec();
    let want: Vec<f64> = (0..3)
        .map(|j| 2.0 * (0..21).map(|i| v[i * 3 + j]).sum::<f64>())
        .collect();
    assert_close(&traced_sum::run(&dev(), &x).unwrap(), &want, 1e-5);
    let text = traced_sum::lower(x.spec()).unwrap();
    assert_eq!(text.matches("stablehlo.while").count(), 2, "{text}");
}
