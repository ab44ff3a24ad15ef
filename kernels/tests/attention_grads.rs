//! The flash and block-sparse attention backward passes (FlashAttention-2,
//! `custom_vjp` of the forward) against reverse-mode autodiff of the
//! whole-tensor reference, in f64 (tolerance 1e-9 relative), over causal,
//! windowed, GQA/MQA, soft-cap, bias, mask, segment and dropout cases with
//! ragged block edges.

extern crate tessel_dsl as tessel;

use tessel::autodiff::vjp;
use tessel::prelude::*;
use tessel::tile::Mask;
use tessel_kernels::attention::{
    attention_reference_with, block_sparse_attention_with, flash_attention_with, AttentionExtras,
    AttentionMask, FlashOptions,
};
use tessel_testing::{random, Rng};

const TOL: f64 = 1e-9;

/// Which optional inputs a case passes.
#[derive(Clone, Copy, Debug, Default)]
struct Use {
    bias: bool,
    mask: bool,
    segments: bool,
    seed: bool,
}

/// The forward of each implementation, differentiated with respect to q,
/// k, v (and the bias) for the cotangents `dout` and `dlse`.
fn grads_of(
    a: &[Tensor],
    opts: &FlashOptions,
    u: Use,
    which: u8,
    sparse: Option<&AttentionMask>,
) -> Vec<Tensor> {
    let (dout, dlse) = (a[3], a[4]);
    let x = |p: &[Tensor]| AttentionExtras {
        bias: u.bias.then(|| p[3]),
        mask: u.mask.then(|| a[6]),
        segment_ids: u.segments.then(|| (a[7], a[8])),
        dropout_seed: u.seed.then(|| a[9]),
        q_offset: None,
    };
    let mut primals = vec![a[0], a[1], a[2]];
    if u.bias {
        primals.push(a[5]);
    }
    let (_, pb) = vjp(
        |p: Vec<Tensor>| {
            let (o, lse) = match (which, sparse) {
                (0, _) => attention_reference_with(p[0], p[1], p[2], &x(&p), *opts),
                (_, Some(m)) => block_sparse_attention_with(p[0], p[1], p[2], m, &x(&p), *opts),
                _ => flash_attention_with(p[0], p[1], p[2], &x(&p), *opts),
            };
            vec![o, lse.cast(F64)]
        },
        primals,
    );
    pb.call(vec![dout, dlse])
}

struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
}

fn inputs(c: &Case, seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng::new(seed);
    let mut t = |shape: &[usize]| random(&mut rng, shape, F64, -1.0, 1.0);
    let q = t(&[c.b, c.hq, c.sq, c.d]);
    let k = t(&[c.b, c.hkv, c.skv, c.d]);
    let v = t(&[c.b, c.hkv, c.skv, c.d]);
    let dout = t(&[c.b, c.hq, c.sq, c.d]);
    let dlse = t(&[c.b, c.hq, c.sq]);
    let bias = t(&[1, c.hq, c.sq, c.skv]);
    // Every row keeps its diagonal key (when it has one), so no row is
    // hidden whole: the reference's gradient is NaN on such rows (0/0).
    let mask_v: Vec<bool> = (0..c.sq * c.skv)
        .map(|i| i / c.skv == i % c.skv || (i * 7 + 3) % 5 != 0)
        .collect();
    let mask = HostTensor::from_vec(mask_v, vec![1, 1, c.sq, c.skv]).unwrap();
    let qseg: Vec<i32> = (0..c.b * c.sq)
        .map(|i| ((i % c.sq) * 3 / c.sq) as i32)
        .collect();
    let kseg: Vec<i32> = (0..c.b * c.skv)
        .map(|i| ((i % c.skv) * 3 / c.skv) as i32)
        .collect();
    let qseg = HostTensor::from_vec(qseg, vec![c.b, c.sq]).unwrap();
    let kseg = HostTensor::from_vec(kseg, vec![c.b, c.skv]).unwrap();
    let seed = HostTensor::scalar(11i32);
    vec![q, k, v, dout, dlse, bias, mask, qseg, kseg, seed]
}

fn run(
    dev: &Device,
    name: &str,
    hosts: &[HostTensor],
    opts: &FlashOptions,
    u: Use,
    which: u8,
    sparse: Option<AttentionMask>,
) -> Vec<Vec<f64>> {
    let o = *opts;
    let kernel = tessel::kernel::Kernel::new(name.to_string(), move |a: &[Tensor]| {
        grads_of(a, &o, u, which, sparse.as_ref())
    });
    let refs: Vec<&HostTensor> = hosts.iter().collect();
    let outs = kernel.run(dev, &refs).unwrap();
    outs.iter().map(|t| t.to_f64_vec()).collect()
}

fn compare(what: &str, got: &[Vec<f64>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let names = ["dq", "dk", "dv", "dbias"];
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what} {}", names[n]);
        let scale = w.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= TOL * scale,
                "{what} {}[{i}]: {a} vs {b}",
                names[n]
            );
        }
    }
}

#[test]
fn flash_backward_matches_autodiff_of_the_reference() {
    let dev = Device::cpu().unwrap();
    let base = FlashOptions::new().block_sizes(8, 8);
    let cases: Vec<(&str, Case, FlashOptions, Use)> = vec![
        (
            "plain ragged",
            Case {
                b: 1,
                hq: 2,
                hkv: 2,
                sq: 13,
                skv: 21,
                d: 4,
            },
            base,
            Use::default(),
        ),
        (
            "causal gqa",
            Case {
                b: 2,
                hq: 4,
                hkv: 2,
                sq: 19,
                skv: 19,
                d: 3,
            },
            base.causal(true),
            Use::default(),
        ),
        (
            "window mqa soft-cap",
            Case {
                b: 1,
                hq: 3,
                hkv: 1,
                sq: 25,
                skv: 25,
                d: 4,
            },
            base.window(Some(6), Some(2)).soft_cap(2.0),
            Use::default(),
        ),
        (
            "bias mask segments",
            Case {
                b: 2,
                hq: 2,
                hkv: 1,
                sq: 19,
                skv: 19,
                d: 5,
            },
            base.causal(true).soft_cap(3.0),
            Use {
                bias: true,
                mask: true,
                segments: true,
                seed: false,
            },
        ),
        (
            "dropout",
            Case {
                b: 1,
                hq: 2,
                hkv: 2,
                sq: 16,
                skv: 24,
                d: 4,
            },
            base.dropout(0.25),
            Use {
                seed: true,
                ..Use::default()
            },
        ),
        (
            // Two whole query blocks in the traced loop, and no whole key
            // block: the key loops' bodies once did not fit into dk and dv.
            "key blocks wider than the keys",
            Case {
                b: 1,
                hq: 2,
                hkv: 1,
                sq: 17,
                skv: 17,
                d: 4,
            },
            FlashOptions::new().block_sizes(8, 64).causal(true),
            Use::default(),
        ),
    ];
    for (i, (what, c, opts, u)) in cases.into_iter().enumerate() {
        let hosts = inputs(&c, 100 + i as u64);
        let want = run(&dev, &format!("ref_{i}"), &hosts, &opts, u, 0, None);
        let got = run(&dev, &format!("flash_{i}"), &hosts, &opts, u, 1, None);
        compare(what, &got, &want);
    }
}

#[test]
fn block_sparse_backward_matches_autodiff_of_the_dense_mask() {
    let dev = Device::cpu().unwrap();
    let c = Case {
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 20,
        skv: 28,
        d: 4,
    };
    let opts = FlashOptions::new().block_sizes(8, 8);
    let dense: Vec<bool> = (0..c.sq * c.skv)
        .map(|i| {
            let (q, k) = (i / c.skv, i % c.skv);
            k <= q + 4 && (k / 8 + q / 8) % 3 != 1
        })
        .collect();
    let mask = AttentionMask::from(Mask::from_dense(c.sq, c.skv, dense.clone()).unwrap());
    let mut hosts = inputs(&c, 7);
    hosts[6] = HostTensor::from_vec(dense, vec![1, 1, c.sq, c.skv]).unwrap();
    let u_ref = Use {
        mask: true,
        ..Use::default()
    };
    let want = run(&dev, "sparse_ref", &hosts, &opts, u_ref, 0, None);
    let got = run(&dev, "sparse", &hosts, &opts, Use::default(), 2, Some(mask));
    compare("block sparse", &got, &want);
}

#[test]
fn rows_that_see_no_key_get_zero_gradients() {
    let dev = Device::cpu().unwrap();
    // Causal with segments that start after a row's last visible key: some
    // rows see nothing (output 0, logsumexp -inf).
    let c = Case {
        b: 1,
        hq: 2,
        hkv: 2,
        sq: 17,
        skv: 23,
        d: 4,
    };
    let opts = FlashOptions::new().block_sizes(8, 8).causal(true);
    let u = Use {
        segments: true,
        ..Use::default()
    };
    let hosts = inputs(&c, 5);
    let got = run(&dev, "empty_rows", &hosts, &opts, u, 1, None);
    for g in &got {
        assert!(g.iter().all(|x| x.is_finite()), "{g:?}");
    }
    // Row 6 (segment 1) sees no key: its query gradient is zero.
    let dq = &got[0];
    assert!(dq[6 * c.d..7 * c.d].iter().all(|&x| x == 0.0));
    assert!(dq.iter().any(|&x| x != 0.0));
}

#[test]
fn the_vjp_kernels_agree_with_vjp_of_the_forward() {
    use tessel_kernels::grads::{block_sparse_attention_vjp, flash_attention_vjp};
    let dev = Device::cpu().unwrap();
    let c = Case {
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 12,
        skv: 12,
        d: 4,
    };
    let hosts = inputs(&c, 21);
    let opts = FlashOptions::new().block_sizes(8, 8).causal(true);
    let (q, k, v, dout) = (&hosts[0], &hosts[1], &hosts[2], &hosts[3]);
    // dlse = 0: the cotangent of the output alone.
    let mut zero = hosts.clone();
    zero[4] = HostTensor::from_vec(vec![0.0f64; c.hq * c.sq], vec![1, c.hq, c.sq]).unwrap();
    let want = run(&dev, "vjp_ref", &zero, &opts, Use::default(), 0, None);
    let (dq, dk, dv) = flash_attention_vjp::run(&dev, q, k, v, dout, opts).unwrap();
    let got: Vec<Vec<f64>> = [dq, dk, dv].iter().map(|t| t.to_f64_vec()).collect();
    compare("flash_attention_vjp", &got, &want);
    let mask = AttentionMask::from(Mask::causal(c.sq, c.skv));
    let (dq, dk, dv) = block_sparse_attention_vjp::run(
        &dev,
        q,
        k,
        v,
        dout,
        mask,
        FlashOptions::new().block_sizes(8, 8),
    )
    .unwrap();
    let got: Vec<Vec<f64>> = [dq, dk, dv].iter().map(|t| t.to_f64_vec()).collect();
    compare("block_sparse_attention_vjp", &got, &want);
}

#[test]
fn the_backward_kernel_alone_matches_the_vjp() {
    use tessel_kernels::attention::{flash_attention_backward, flash_attention_lse};
    use tessel_kernels::grads::flash_attention_lse_vjp;
    let dev = Device::cpu().unwrap();
    let c = Case {
        b: 1,
        hq: 4,
        hkv: 2,
        sq: 21,
        skv: 21,
        d: 4,
    };
    let hosts = inputs(&c, 31);
    let f32s: Vec<HostTensor> = hosts[..5]
        .iter()
        .map(|t| {
            HostTensor::from_fn(TensorSpec::new(t.shape().to_vec(), F32), |i| {
                t.to_f64_vec()[i]
            })
        })
        .collect();
    let (q, k, v, dout, dlse) = (&f32s[0], &f32s[1], &f32s[2], &f32s[3], &f32s[4]);
    let opts = FlashOptions::new().block_sizes(8, 8).causal(true);
    let (out, lse) = flash_attention_lse::run(&dev, q, k, v, opts).unwrap();
    let alone = flash_attention_backward::run(&dev, q, k, v, &out, &lse, dout, dlse, opts).unwrap();
    let with_fwd = flash_attention_lse_vjp::run(&dev, q, k, v, dout, dlse, opts).unwrap();
    for (a, b) in [
        (alone.0, with_fwd.0),
        (alone.1, with_fwd.1),
        (alone.2, with_fwd.2),
    ] {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
}

/// The dynamic-layout kernel has no backward of its own: reverse-mode
/// autodiff differentiates its loops over the traced block tables (exact,
/// but it re-runs the forward of a loop body for each reverse step).
#[test]
fn dynamic_block_sparse_attention_differentiates_by_autodiff() {
    use tessel_kernels::attention::{block_sparse_attention_dynamic_with, DynamicMask};
    let dev = Device::cpu().unwrap();
    let c = Case {
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 16,
        skv: 24,
        d: 4,
    };
    let opts = FlashOptions::new().block_sizes(8, 8);
    let mask = Mask::local(c.sq, c.skv, Some(6), Some(3));
    let t = DynamicMask::new(&mask.clone().into(), opts).unwrap();
    let mut hosts = inputs(&c, 41);
    let bits = t.bits.to_vec::<bool>().unwrap();
    hosts[6] = HostTensor::from_vec(bits, vec![1, 1, c.sq, c.skv]).unwrap();
    let u_ref = Use {
        mask: true,
        ..Use::default()
    };
    let want = run(&dev, "dyn_ref", &hosts, &opts, u_ref, 0, None);
    let o = opts;
    let kernel = tessel::kernel::Kernel::new("dyn_grads", move |a: &[Tensor]| {
        let tables = [a[5], a[6], a[7], a[8]];
        let (_, pb) = vjp(
            |p: Vec<Tensor>| {
                let x = AttentionExtras::default();
                let (out, lse) =
                    block_sparse_attention_dynamic_with(p[0], p[1], p[2], tables, &x, o);
                vec![out, lse.cast(F64)]
            },
            vec![a[0], a[1], a[2]],
        );
        pb.call(vec![a[3], a[4]])
    });
    let args = [
        &hosts[0],
        &hosts[1],
        &hosts[2],
        &hosts[3],
        &hosts[4],
        &t.bits,
        &t.num_nonempty,
        &t.kv_block_ids,
        &t.block_kinds,
    ];
    let got: Vec<Vec<f64>> = kernel
        .run(&dev, &args)
        .unwrap()
        .iter()
        .map(|t| t.to_f64_vec())
        .collect();
    // The kernel's logsumexp is f32: f32-level agreement.
    let scale_tol = |g: &[Vec<f64>], w: &[Vec<f64>]| {
        for (a, b) in g.iter().zip(w) {
            let s = b.iter().fold(1.0f64, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 1e-5 * s, "{x} vs {y}");
            }
        }
    };
    scale_tol(&got, &want);
}
