//! Library kernels under `vmap`: flash attention over an extra batch axis
//! (values and gradients), the norms over a batch of sequences, and the
//! routed mixture-of-experts layer over a batch of token groups — each
//! against a loop over the examples in the same kernel.

extern crate tessel_dsl as tessel;

mod common;

use common::{dev, uniform};
use tessel::autodiff::grad;
use tessel::kernel::Kernel;
use tessel::prelude::*;
use tessel::vmap::{vmap, vmap_with, Axes};
use tessel_kernels::attention::{flash_attention, FlashOptions};
use tessel_kernels::moe::moe_moe;
use tessel_kernels::norm::{layer_norm, rms_norm};

/// Runs `body` (which returns the vmapped results, then the looped ones)
/// and asserts each pair equal within `tol` of the larger magnitude.
#[track_caller]
fn agree(name: &str, body: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[&HostTensor], tol: f64) {
    let out = Kernel::new(name.to_string(), body)
        .run(&dev(), args)
        .unwrap();
    let n = out.len() / 2;
    for k in 0..n {
        assert_eq!(out[k].spec(), out[n + k].spec(), "{name} result {k}");
        let (a, b) = (out[k].to_f64_vec(), out[n + k].to_f64_vec());
        let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        assert!(
            b.iter().any(|&v| v != 0.0),
            "{name} result {k} is all zeros"
        );
        for (j, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= tol * scale,
                "{name} result {k}[{j}]: vmap {x} vs loop {y}"
            );
        }
    }
}

/// Example `i` along axis 0.
fn at(t: Tensor, i: usize) -> Tensor {
    t.slice_axis(0, i, i + 1).squeeze(0)
}

/// `ys` stacked along a new axis 0.
fn stack(ys: Vec<Tensor>) -> Tensor {
    let ys: Vec<Tensor> = ys.into_iter().map(|y| y.expand_dims(0)).collect();
    concat(&ys, 0)
}

#[test]
fn flash_attention_over_an_extra_batch_axis_with_gradients() {
    // [N, B, H, S, D] with an odd sequence length and blocks that do not divide it.
    let shape = [3, 1, 2, 37, 8];
    let (q, k, v) = (
        uniform(&shape, F32, 1, 1.0),
        uniform(&shape, F32, 2, 1.0),
        uniform(&shape, F32, 3, 1.0),
    );
    let opts = FlashOptions::new().causal(true).block_sizes(16, 16);
    let body = move |a: &[Tensor]| {
        let attend = |(q, k, v): (Tensor, Tensor, Tensor)| flash_attention(q, k, v, opts);
        let loss = |qkv: (Tensor, Tensor, Tensor)| attend(qkv).square().sum(&[0, 1, 2, 3]);
        let batched = vmap(attend, (a[0], a[1], a[2]));
        let dq = vmap(
            |qkv: (Tensor, Tensor, Tensor)| grad(loss, qkv).0,
            (a[0], a[1], a[2]),
        );
        let looped = stack(
            (0..3)
                .map(|i| attend((at(a[0], i), at(a[1], i), at(a[2], i))))
                .collect(),
        );
        let dq_loop = stack(
            (0..3)
                .map(|i| grad(loss, (at(a[0], i), at(a[1], i), at(a[2], i))).0)
                .collect(),
        );
        vec![batched, dq, looped, dq_loop]
    };
    agree("vmap_flash", body, &[&q, &k, &v], 1e-5);
}

#[test]
fn norms_over_a_batch_of_sequences() {
    let (x, g, bias) = (
        uniform(&[4, 5, 19], F32, 4, 2.0),
        uniform(&[19], F32, 5, 1.0),
        uniform(&[19], F32, 6, 1.0),
    );
    let body = |a: &[Tensor]| {
        let (g, bias) = (a[1], a[2]);
        let axes = Axes::new().inputs([Some(0)]);
        let r = vmap_with(|x: Tensor| rms_norm(x, g, 1e-5), a[0], &axes);
        let l = vmap_with(|x: Tensor| layer_norm(x, g, bias, 1e-5), a[0], &axes);
        let r_loop = stack((0..4).map(|i| rms_norm(at(a[0], i), g, 1e-5)).collect());
        let l_loop = stack(
            (0..4)
                .map(|i| layer_norm(at(a[0], i), g, bias, 1e-5))
                .collect(),
        );
        vec![r, l, r_loop, l_loop]
    };
    agree("vmap_norms", body, &[&x, &g, &bias], 1e-6);
}

#[test]
fn routed_experts_over_a_batch_of_token_groups() {
    // Two groups of 16 tokens, d = 8, 8 experts with ff = 16, shared weights.
    let (x, router) = (
        uniform(&[2, 16, 8], F32, 7, 1.0),
        uniform(&[8, 8], F32, 8, 1.0),
    );
    let (w1, w2) = (
        uniform(&[8, 8, 16], F32, 9, 0.5),
        uniform(&[8, 16, 8], F32, 10, 0.5),
    );
    let body = |a: &[Tensor]| {
        let (router, w1, w2) = (a[1], a[2], a[3]);
        let layer = |x: Tensor| moe_moe(x, router, w1, w2).0;
        let batched = vmap(layer, a[0]);
        let looped = stack((0..2).map(|i| layer(at(a[0], i))).collect());
        vec![batched, looped]
    };
    agree("vmap_moe", body, &[&x, &router, &w1, &w2], 1e-5);
}
