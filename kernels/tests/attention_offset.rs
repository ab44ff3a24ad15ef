//! A traced query offset (`AttentionExtras::q_offset`, a scalar or one per
//! sequence) gives what the same static `FlashOptions::q_offset` gives —
//! outputs, logsumexps and gradients, f64 (1e-10 relative) — with one
//! compiled program for every offset.

extern crate tessel_dsl as tessel;

use tessel::autodiff::vjp;
use tessel::kernel::{with_call_log, Kernel};
use tessel::prelude::*;
use tessel_kernels::attention::{
    attention_reference_with, flash_attention_with, AttentionExtras, FlashOptions,
};
use tessel_testing::{dev, random, Rng};

const TOL: f64 = 1e-10;

fn close(got: &HostTensor, want: &HostTensor, what: &str) {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a == b) || (a - b).abs() <= TOL * (1.0 + b.abs());
        assert!(ok, "{what}: element {i}: {a} vs {b}");
    }
}

fn options(causal: bool, window: Option<usize>, offset: i64) -> FlashOptions {
    FlashOptions::new()
        .causal(causal)
        .window(window, None)
        .q_offset(offset)
        .block_sizes(8, 8)
}

#[test]
fn traced_offsets_equal_static_offsets_with_one_program() {
    let (b, h, sq, skv, d) = (2, 2, 5, 21, 8);
    let mut rng = Rng::new(9);
    let q = random(&mut rng, &[b, h, sq, d], F64, -1.0, 1.0);
    let k = random(&mut rng, &[b, h, skv, d], F64, -1.0, 1.0);
    let v = random(&mut rng, &[b, h, skv, d], F64, -1.0, 1.0);
    let dev = dev();
    for (causal, window) in [(true, None), (true, Some(6)), (false, Some(3))] {
        let traced = Kernel::new(
            format!("offset_{causal}_{window:?}"),
            move |a: &[Tensor]| {
                let x = AttentionExtras {
                    q_offset: Some(a[3]),
                    ..AttentionExtras::default()
                };
                let o = options(causal, window, 0);
                let (out, lse) = flash_attention_with(a[0], a[1], a[2], &x, o);
                let (ref_out, _) = attention_reference_with(a[0], a[1], a[2], &x, o);
                vec![out, lse, ref_out]
            },
        )
        .statics(window.unwrap_or(usize::MAX))
        .statics(causal);
        // Scalar offsets, then one per sequence.
        let offsets: Vec<(HostTensor, Vec<i64>)> = vec![
            (HostTensor::scalar(0i32), vec![0, 0]),
            (HostTensor::scalar(16i32), vec![16, 16]),
            (HostTensor::scalar(-3i32), vec![-3, -3]),
            (
                HostTensor::from_vec(vec![2i32, 11], [2]).unwrap(),
                vec![2, 11],
            ),
        ];
        for (i, (off, per_seq)) in offsets.iter().enumerate() {
            let (got, calls) = with_call_log(|| traced.run(&dev, &[&q, &k, &v, off]).unwrap());
            // One program for every scalar offset, one for every [B] one:
            // only the first call of each shape compiles.
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].compiled, i == 0 || i == 3, "case {i}");
            for (s, &o) in per_seq.iter().enumerate() {
                let want = Kernel::new(
                    format!("static_{causal}_{window:?}_{o}"),
                    move |a: &[Tensor]| {
                        let opts = options(causal, window, o);
                        let (out, lse) = flash_attention_with(
                            a[0],
                            a[1],
                            a[2],
                            &AttentionExtras::default(),
                            opts,
                        );
                        vec![out, lse]
                    },
                )
                .run(&dev, &[&q, &k, &v])
                .unwrap();
                let row = |t: &HostTensor| {
                    let all = t.to_f64_vec();
                    let n = all.len() / b;
                    HostTensor::from_vec(all[s * n..(s + 1) * n].to_vec(), [n]).unwrap()
                };
                let what = format!("causal {causal} window {window:?} offset {o} (case {i})");
                close(&row(&got[0]), &row(&want[0]), &format!("{what}: output"));
                close(&row(&got[1]), &row(&want[1]), &format!("{what}: lse"));
                close(&row(&got[2]), &row(&want[0]), &format!("{what}: reference"));
            }
        }
    }
}

#[test]
fn traced_offset_gradients_equal_static_ones() {
    let (b, h, sq, skv, d) = (1, 2, 6, 14, 8);
    let mut rng = Rng::new(4);
    let q = random(&mut rng, &[b, h, sq, d], F64, -1.0, 1.0);
    let k = random(&mut rng, &[b, h, skv, d], F64, -1.0, 1.0);
    let v = random(&mut rng, &[b, h, skv, d], F64, -1.0, 1.0);
    let dout = random(&mut rng, &[b, h, sq, d], F64, -1.0, 1.0);
    let grads = |traced: bool| {
        Kernel::new(format!("grad_offset_{traced}"), move |a: &[Tensor]| {
            let x = AttentionExtras {
                q_offset: traced.then(|| a[4]),
                ..AttentionExtras::default()
            };
            let o = options(true, Some(5), if traced { 0 } else { 7 });
            let (_, pull) = vjp(
                |p: Vec<Tensor>| flash_attention_with(p[0], p[1], p[2], &x, o).0,
                vec![a[0], a[1], a[2]],
            );
            pull.call(a[3])
        })
    };
    let off = HostTensor::scalar(7i32);
    let got = grads(true).run(&dev(), &[&q, &k, &v, &dout, &off]).unwrap();
    let want = grads(false)
        .run(&dev(), &[&q, &k, &v, &dout, &off])
        .unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        close(g, w, &format!("gradient {i}"));
    }
}

#[test]
fn block_sparse_attention_refuses_a_traced_offset() {
    use tessel_kernels::attention::{block_sparse_attention_with, AttentionMask};
    let spec = |s: &[usize], dt: DType| TensorSpec::new(s.to_vec(), dt);
    let mask = AttentionMask::from(tessel::tile::Mask::causal(8, 8));
    let e = Kernel::new("sparse_offset", move |a: &[Tensor]| {
        let x = AttentionExtras {
            q_offset: Some(a[1]),
            ..AttentionExtras::default()
        };
        block_sparse_attention_with(a[0], a[0], a[0], &mask, &x, options(true, None, 0)).0
    })
    .compile(&dev(), &[spec(&[1, 1, 8, 8], F32), spec(&[], S32)])
    .map(|_| ())
    .expect_err("a kernel error");
    let text = e.to_string();
    assert!(
        text.contains("block_sparse_attention") && text.contains("q_offset"),
        "{text}"
    );
}

#[test]
fn a_bad_offset_is_a_kernel_error_at_the_callers_line() {
    let spec = |s: &[usize], dt: DType| TensorSpec::new(s.to_vec(), dt);
    let e = Kernel::new("bad_offset", |a: &[Tensor]| {
        let x = AttentionExtras {
            q_offset: Some(a[1]),
            ..AttentionExtras::default()
        };
        flash_attention_with(a[0], a[0], a[0], &x, options(true, None, 0)).0
    })
    .compile(&dev(), &[spec(&[2, 1, 8, 8], F32), spec(&[3], S32)])
    .map(|_| ())
    .expect_err("a kernel error");
    let text = e.to_string();
    assert!(
        text.contains("q_offset must be an integer scalar or [2]"),
        "{text}"
    );
    assert!(text.contains("attention_offset.rs"), "{text}");
}
