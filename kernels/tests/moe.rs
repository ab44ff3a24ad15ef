//! `#[expert_kernel]` and the MoE layer: the grouped layer against a
//! plain-Rust f64 reference of the same routing and against the dense
//! dispatch reference, including dropped tokens at low capacity.
//!
//! Tolerance: f32, 1e-4 relative to 1 + |reference| (router softmax and two
//! matmuls per expert).

extern crate tessel_dsl as tessel;

mod common;

use common::{close, dev, uniform};
use tessel_dsl::prelude::*;

#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 1.0)]
fn relu_ffn(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    x.matmul(w1).relu().matmul(w2)
}

#[expert_kernel(num_experts = 4, top_k = 1, capacity_factor = 0.5, renormalize = false)]
fn tight_ffn(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    x.matmul(w1).relu().matmul(w2)
}

struct Ref {
    out: Vec<f64>,
    aux: f64,
    z: f64,
    dropped: usize,
}

/// The routed layer in f64: softmax router, top-k (ties to the lower index),
/// optional renormalization, assignments ranked by (choice, token), capacity
/// per expert, relu FFN experts, gated sum.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &HostTensor,
    router: &HostTensor,
    w1: &HostTensor,
    w2: &HostTensor,
    e: usize,
    k: usize,
    cf: f64,
    renorm: bool,
) -> Ref {
    let (t, d) = (x.shape()[0], x.shape()[1]);
    let ff = w1.shape()[2];
    let (xv, rv, w1v, w2v) = (
        x.to_f64_vec(),
        router.to_f64_vec(),
        w1.to_f64_vec(),
        w2.to_f64_vec(),
    );
    let mut probs = vec![0.0; t * e];
    let mut z = 0.0;
    for i in 0..t {
        let logits: Vec<f64> = (0..e)
            .map(|j| (0..d).map(|p| xv[i * d + p] * rv[p * e + j]).sum())
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        for j in 0..e {
            probs[i * e + j] = (logits[j] - m).exp() / s;
        }
        z += (m + s.ln()).powi(2);
    }
    let mut choice = vec![Vec::new(); t];
    for i in 0..t {
        let mut idx: Vec<usize> = (0..e).collect();
        idx.sort_by(|&a, &b| {
            probs[i * e + b]
                .partial_cmp(&probs[i * e + a])
                .unwrap()
                .then(a.cmp(&b))
        });
        let chosen: Vec<usize> = idx[..k].to_vec();
        let total: f64 = chosen.iter().map(|&j| probs[i * e + j]).sum();
        choice[i] = chosen
            .iter()
            .map(|&j| {
                (
                    j,
                    if renorm {
                        probs[i * e + j] / total
                    } else {
                        probs[i * e + j]
                    },
                )
            })
            .collect();
    }
    let cap = ((cf * (t * k) as f64 / e as f64).ceil() as usize).max(1);
    let mut used = vec![0; e];
    let mut counts = vec![0; e];
    let mut out = vec![0.0; t * d];
    let mut dropped = 0;
    for slot in 0..k {
        for (i, ch) in choice.iter().enumerate() {
            let (j, g) = ch[slot];
            counts[j] += 1;
            if used[j] >= cap {
                dropped += 1;
                continue;
            }
            used[j] += 1;
            let h: Vec<f64> = (0..ff)
                .map(|f| {
                    (0..d)
                        .map(|p| xv[i * d + p] * w1v[j * d * ff + p * ff + f])
                        .sum::<f64>()
                        .max(0.0)
                })
                .collect();
            for o in 0..d {
                let y: f64 = (0..ff).map(|f| h[f] * w2v[j * ff * d + f * d + o]).sum();
                out[i * d + o] += g * y;
            }
        }
    }
    let aux = (0..e)
        .map(|j| {
            (0..t).map(|i| probs[i * e + j]).sum::<f64>() / t as f64 * counts[j] as f64
                / (t * k) as f64
        })
        .sum::<f64>()
        * e as f64;
    Ref {
        out,
        aux,
        z: z / t as f64,
        dropped,
    }
}

#[test]
fn routed_layer_matches_the_reference() {
    let d = dev();
    // t = 600: capacity 300, so an expert's rows take two tiles of 256,
    // the second read at a clamped start.
    for (t, dm, ff, seed) in [(1, 3, 5, 1), (7, 4, 6, 2), (33, 8, 16, 3), (600, 4, 6, 4)] {
        let x = uniform(&[t, dm], F32, seed, 1.0);
        let router = uniform(&[dm, 4], F32, seed + 10, 2.0);
        let w1 = uniform(&[4, dm, ff], F32, seed + 20, 0.5);
        let w2 = uniform(&[4, ff, dm], F32, seed + 30, 0.5);
        let (out, aux, z, dropped) = relu_ffn::run(&d, &x, &router, &w1, &w2).unwrap();
        let r = reference(&x, &router, &w1, &w2, 4, 2, 1.0, true);
        close(&out, &r.out, 1e-4);
        close(&aux, &[r.aux], 1e-5);
        close(&z, &[r.z], 1e-5);
        assert_eq!(
            dropped.to_vec::<i32>().unwrap(),
            vec![r.dropped as i32],
            "t = {t}"
        );
    }
}

#[test]
fn experts_that_get_no_tokens_compute_nothing_and_stay_correct() {
    // Feature 0 is 1 for every token and expert 0 weighs it -50: expert 0
    // is never chosen (the grouped layer's first tile is then all padding).
    let d = dev();
    let (t, dm, ff) = (520, 5, 7);
    let mut xv = common::data(t * dm, 40, -1.0, 1.0);
    for row in 0..t {
        xv[row * dm] = 1.0;
    }
    let x = common::host(F32, &[t, dm], &xv);
    let mut rv = common::data(dm * 4, 41, -1.0, 1.0);
    rv[0] = -50.0;
    let router = common::host(F32, &[dm, 4], &rv);
    let w1 = uniform(&[4, dm, ff], F32, 42, 0.5);
    let w2 = uniform(&[4, ff, dm], F32, 43, 0.5);
    let (out, _, _, dropped) = relu_ffn::run(&d, &x, &router, &w1, &w2).unwrap();
    let r = reference(&x, &router, &w1, &w2, 4, 2, 1.0, true);
    close(&out, &r.out, 1e-4);
    assert_eq!(dropped.to_vec::<i32>().unwrap(), vec![r.dropped as i32]);
    assert!(r.dropped > 0, "three experts share all the assignments");
}

#[test]
fn low_capacity_drops_tokens_and_matches_dense_dispatch() {
    let d = dev();
    let (t, dm, ff) = (24, 6, 8);
    let x = uniform(&[t, dm], F32, 5, 1.0);
    let router = uniform(&[dm, 4], F32, 6, 3.0);
    let w1 = uniform(&[4, dm, ff], F32, 7, 0.5);
    let w2 = uniform(&[4, ff, dm], F32, 8, 0.5);
    let (out, _, _, dropped) = tight_ffn::run(&d, &x, &router, &w1, &w2).unwrap();
    let r = reference(&x, &router, &w1, &w2, 4, 1, 0.5, false);
    assert!(
        r.dropped > 0,
        "the test routes more tokens than the capacity"
    );
    assert_eq!(dropped.to_vec::<i32>().unwrap(), vec![r.dropped as i32]);
    close(&out, &r.out, 1e-4);
    // The dense-dispatch reference gives the same layer.
    let dense = tessel_dsl::kernel::Kernel::new("dense", |a: &[Tensor]| {
        let (o, aux, z, dr) = tight_ffn_moe_dense(a[0], a[1], a[2], a[3]);
        vec![o, aux, z, dr]
    });
    let outs = dense.run(&d, &[&x, &router, &w1, &w2]).unwrap();
    close(&outs[0], &out.to_f64_vec(), 1e-5);
    assert_eq!(outs[3].to_vec::<i32>().unwrap(), vec![r.dropped as i32]);
}

#[test]
fn the_library_layer_runs_and_has_no_dense_dispatch_tensor() {
    use tessel_kernels::moe::moe;
    let d = dev();
    let (t, dm, ff) = (16, 8, 12);
    let x = uniform(&[t, dm], F32, 9, 1.0);
    let router = uniform(&[dm, 8], F32, 10, 1.0);
    let w1 = uniform(&[8, dm, ff], F32, 11, 0.3);
    let w2 = uniform(&[8, ff, dm], F32, 12, 0.3);
    let (out, aux, _, _) = moe::run(&d, &x, &router, &w1, &w2).unwrap();
    assert_eq!(out.shape(), &[t, dm]);
    assert!(aux.to_f64_vec()[0] > 0.0);
    let cap = (1.25f64 * (t * 2) as f64 / 8.0).ceil() as usize;
    let text = moe::lower(x.spec(), router.spec(), w1.spec(), w2.spec()).unwrap();
    assert!(
        !text.contains(&format!("tensor<{t}x8x{cap}x")),
        "no T x E x C tensor in the grouped layer"
    );
}

#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 0.75)]
fn gelu_ffn(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    x.matmul(w1).tanh().matmul(w2)
}

/// The grouped layer's gradients (autodiff through its gathers, scatters
/// and batched expert matmuls) against those of the dense dispatch layer,
/// at a capacity that drops assignments. f32 tolerance as above.
#[test]
fn grouped_gradients_match_dense_dispatch_gradients() {
    fn grads(a: &[Tensor], dense: bool) -> Vec<Tensor> {
        let (_, pb) = tessel::autodiff::vjp(
            |(x, r, w1, w2): (Tensor, Tensor, Tensor, Tensor)| {
                let out = if dense {
                    gelu_ffn_moe_dense(x, r, w1, w2)
                } else {
                    gelu_ffn_moe(x, r, w1, w2)
                };
                (out.0, out.1, out.2)
            },
            (a[0], a[1], a[2], a[3]),
        );
        let (dx, dr, d1, d2) = pb.call((a[4], a[5], a[6]));
        vec![dx, dr, d1, d2]
    }
    let dev = dev();
    let (t, d, ff, e) = (19, 6, 5, 4);
    let hosts = [
        uniform(&[t, d], F32, 1, 1.0),
        uniform(&[d, e], F32, 2, 1.0),
        uniform(&[e, d, ff], F32, 3, 1.0),
        uniform(&[e, ff, d], F32, 4, 1.0),
        uniform(&[t, d], F32, 5, 1.0),
        HostTensor::scalar(0.5f32),
        HostTensor::scalar(0.25f32),
    ];
    let refs: Vec<&HostTensor> = hosts.iter().collect();
    let run = |dense: bool| {
        let k = tessel::kernel::Kernel::new(format!("moe_grads_{dense}"), move |a: &[Tensor]| {
            grads(a, dense)
        });
        k.run(&dev, &refs).unwrap()
    };
    let (grouped, dense) = (run(false), run(true));
    for (name, (g, w)) in ["dx", "drouter", "dw1", "dw2"]
        .iter()
        .zip(grouped.iter().zip(&dense))
    {
        let want = w.to_f64_vec();
        assert!(want.iter().any(|&x| x != 0.0), "{name}");
        close(g, &want, 1e-4);
    }
}

/// A user kernel calling the routed layer with a router of the wrong width.
#[cpu_kernel]
fn misuse_layer(x: Tensor, router: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    tessel_kernels::moe::moe_moe(x, router, w1, w2).0
}

/// An expert whose output drops the expert axis.
#[expert_kernel(num_experts = 2, top_k = 1)]
fn flattening_expert(x: Tensor) -> Tensor {
    x.sum(&[0])
}

#[test]
fn misused_layers_name_the_layer_and_the_callers_line() {
    let f = |s: &[usize]| TensorSpec::new(s.to_vec(), F32);
    let err = misuse_layer::lower(&f(&[16, 8]), &f(&[8, 7]), &f(&[8, 8, 16]), &f(&[8, 16, 8]))
        .expect_err("the router is [8, 7], not [8, 8]");
    let e = err.as_kernel_error().expect("a kernel error");
    assert_eq!(e.op, "expert_kernel", "{e}");
    assert!(e.message.contains("[d, num_experts] = [8, 8]"), "{e}");
    assert!(e.location.file.ends_with("tests/moe.rs"), "{e}");
    let err = flattening_expert::lower(&f(&[6, 4]), &f(&[4, 2])).expect_err("rank-2 expert output");
    let e = err.as_kernel_error().expect("a kernel error");
    assert!(e.message.contains("to [E, C, d_out], got f32[4,4]"), "{e}");
}

/// No tokens: an empty output, nothing dropped, and zero gradients (the
/// backward once took from an empty routing table and did not trace).
#[test]
fn a_layer_with_no_tokens() {
    let d = dev();
    let x = uniform(&[0, 8], F32, 1, 1.0);
    let router = uniform(&[8, 8], F32, 2, 1.0);
    let w1 = uniform(&[8, 8, 16], F32, 3, 0.5);
    let w2 = uniform(&[8, 16, 8], F32, 4, 0.5);
    let (out, _, _, dropped) = tessel_kernels::moe::moe::run(&d, &x, &router, &w1, &w2).unwrap();
    assert_eq!(out.shape(), &[0, 8]);
    assert_eq!(dropped.to_vec::<i32>().unwrap(), vec![0]);
    let dout = uniform(&[0, 8], F32, 5, 1.0);
    let (dx, drouter, dw1, dw2) =
        tessel_kernels::grads::moe_vjp::run(&d, &x, &router, &w1, &w2, &dout).unwrap();
    assert_eq!(dx.shape(), &[0, 8]);
    for g in [drouter, dw1, dw2] {
        assert!(g.to_f64_vec().iter().all(|&v| v == 0.0), "{:?}", g.spec());
    }
}

/// One expert with a bias, written for that expert alone: `x` is `[C, d]`,
/// `w1` `[d, ff]`, `b1` `[ff]`; the layer batches it over the experts.
#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 1.0, per_expert = true)]
fn biased_ffn(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor) -> Tensor {
    (x.matmul(w1) + b1).relu().matmul(w2)
}

/// The same expert written over every expert at once: `x` is `[E, C, d]`,
/// the bias `[E, ff]` broadcast over the capacity axis by hand.
#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 1.0)]
fn biased_ffn_stacked(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor) -> Tensor {
    (x.matmul(w1) + b1.expand_dims(1)).relu().matmul(w2)
}

#[test]
fn an_expert_written_for_one_expert_matches_the_stacked_form_at_the_same_cost() {
    let d = dev();
    let (t, dm, ff) = (37, 8, 12);
    let x = uniform(&[t, dm], F32, 41, 1.0);
    let router = uniform(&[dm, 4], F32, 42, 2.0);
    let w1 = uniform(&[4, dm, ff], F32, 43, 0.5);
    let b1 = uniform(&[4, ff], F32, 44, 0.5);
    let w2 = uniform(&[4, ff, dm], F32, 45, 0.5);
    let one = biased_ffn::run(&d, &x, &router, &w1, &b1, &w2).unwrap();
    let all = biased_ffn_stacked::run(&d, &x, &router, &w1, &b1, &w2).unwrap();
    close(&one.0, &all.0.to_f64_vec(), 1e-6);
    assert!(all.0.to_f64_vec().iter().any(|&v| v.abs() > 1e-3));
    // The same program cost: as many dots in the lowered programs (one
    // batched dot per matmul), and the same flops as XLA counts them.
    let specs = [x.spec(), router.spec(), w1.spec(), b1.spec(), w2.spec()];
    let text_one = biased_ffn::lower(specs[0], specs[1], specs[2], specs[3], specs[4]).unwrap();
    let text_all =
        biased_ffn_stacked::lower(specs[0], specs[1], specs[2], specs[3], specs[4]).unwrap();
    let dots = |t: &str| t.matches("stablehlo.dot_general").count();
    assert_eq!(dots(&text_one), dots(&text_all));
    let flops = |e: std::sync::Arc<tessel::runtime::Executable>| {
        e.cost_analysis().unwrap().flops.unwrap_or(0.0)
    };
    let f_one =
        flops(biased_ffn::compile(&d, specs[0], specs[1], specs[2], specs[3], specs[4]).unwrap());
    let f_all = flops(
        biased_ffn_stacked::compile(&d, specs[0], specs[1], specs[2], specs[3], specs[4]).unwrap(),
    );
    assert!(
        f_all > 0.0 && (f_one - f_all).abs() <= 0.02 * f_all,
        "flops: per expert {f_one}, stacked {f_all}"
    );
}
