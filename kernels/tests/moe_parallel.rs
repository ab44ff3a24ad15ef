//! The expert-parallel MoE layer (`moe_parallel`) on 2- and 4-device CPU
//! clients against the one-device routed layer with a capacity that drops
//! nothing: the same output, aux loss and z loss, including experts that
//! receive no tokens at all; and the same gradients (`vjp` through the two
//! `all_to_all`s, the replicated router's gradient `psum`med afterwards).
//!
//! Tolerance: f32, 1e-5 relative to 1 + |one-device value| (the two compute
//! the same products in different groupings).

extern crate tessel_dsl as tessel;

use tessel_dsl::autodiff::vjp;
use tessel_dsl::prelude::*;
use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};
use tessel_kernels::activation::gelu;
use tessel_kernels::moe_parallel::{expert_parallel_layer, ExpertParallel};

#[expert_kernel(
    num_experts = 8,
    top_k = 2,
    capacity_factor = 4.0,
    precision = "highest"
)]
fn one_device(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor {
    gelu(x.matmul(w1), true).matmul(w2)
}

#[cpu_kernel(precision = "highest")]
fn per_device(
    x: Tensor,
    router: Tensor,
    w1: Tensor,
    w2: Tensor,
    devices: usize,
    tokens: usize,
) -> (Tensor, Tensor, Tensor) {
    let p = ExpertParallel {
        axis: "expert",
        devices,
        top_k: 2,
        tokens,
    };
    let o = expert_parallel_layer(x, router, w1, w2, &p);
    (o.output, o.aux_loss, o.z_loss)
}

type Grads = (Tensor, Tensor, Tensor, Tensor);

/// `(dx, drouter, dw1, dw2)` of the one-device layer's output.
#[cpu_kernel(precision = "highest")]
fn one_device_grads(x: Tensor, router: Tensor, w1: Tensor, w2: Tensor, dout: Tensor) -> Grads {
    let (_, pb) = vjp(
        |(x, r, w1, w2): Grads| one_device_moe(x, r, w1, w2).0,
        (x, router, w1, w2),
    );
    pb.call(dout)
}

/// This device's `(dx, drouter, dw1, dw2)`; the router is replicated, so
/// its gradient is the sum of the devices' (a `psum` after the gradient).
#[cpu_kernel(precision = "highest")]
#[allow(clippy::too_many_arguments)]
fn per_device_grads(
    x: Tensor,
    router: Tensor,
    w1: Tensor,
    w2: Tensor,
    dout: Tensor,
    devices: usize,
    tokens: usize,
) -> Grads {
    let p = ExpertParallel {
        axis: "expert",
        devices,
        top_k: 2,
        tokens,
    };
    let (_, pb) = vjp(
        |(x, r, w1, w2): Grads| expert_parallel_layer(x, r, w1, w2, &p).output,
        (x, router, w1, w2),
    );
    let (dx, dr, dw1, dw2) = pb.call(dout);
    (dx, dr.psum(&["expert"]), dw1, dw2)
}

fn close(got: &HostTensor, want: &HostTensor, what: &str) {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(g.len(), w.len(), "{what}");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{what} element {i}: {a} vs {b}"
        );
    }
}

/// Tokens with positive entries and a router whose last three experts
/// score `-sum(x)`: no token ever picks experts 5, 6 or 7.
fn inputs(t: usize, d: usize, ff: usize) -> [HostTensor; 4] {
    let x = HostTensor::from_fn(TensorSpec::new([t, d], F32), |i| {
        0.1 + ((i * 7919) % 997) as f64 / 997.0
    });
    let router = HostTensor::from_fn(TensorSpec::new([d, 8], F32), |i| {
        if i % 8 >= 5 {
            -1.0
        } else {
            ((i * 31) % 17) as f64 / 17.0 * 0.1 - 0.05
        }
    });
    let w = |shape: [usize; 3], salt: usize| {
        HostTensor::from_fn(TensorSpec::new(shape, F32), move |i| {
            ((((i + salt) * 7919) % 1999) as f64 / 999.5 - 1.0) * 0.1
        })
    };
    [x, router, w([8, d, ff], 3), w([8, ff, d], 5)]
}

/// A 1-D mesh `expert` over `devices` devices.
fn expert_mesh(devices: usize) -> Mesh {
    let dev = Device::cpu_with_devices(devices).unwrap();
    Mesh::new(&dev, &[("expert", devices)]).unwrap()
}

/// A rank-`rank` tensor split along its first axis over `expert`.
fn first(rank: usize) -> PartitionSpec {
    let mut axes = vec![None; rank];
    axes[0] = Some("expert");
    PartitionSpec::new(axes)
}

fn check(devices: usize) {
    let (t, d, ff) = (32, 16, 24);
    let [x, router, w1, w2] = inputs(t, d, ff);
    let one = Device::cpu().unwrap();
    let (out1, aux1, z1, dropped) = one_device::run(&one, &x, &router, &w1, &w2).unwrap();
    assert_eq!(dropped.to_vec::<i32>().unwrap(), vec![0]);

    let mesh = expert_mesh(devices);
    let shardings = Shardings::new(
        [first(2), PartitionSpec::replicated(), first(3), first(3)],
        [
            first(2),
            PartitionSpec::replicated(),
            PartitionSpec::replicated(),
        ],
    );
    let (out, aux, z) =
        per_device::run_shard_map(&mesh, &shardings, &x, &router, &w1, &w2, devices, t).unwrap();
    close(&out, &out1, "output");
    close(&aux, &aux1, "aux loss");
    close(&z, &z1, "z loss");
    // The last device's experts (5..7 on 4 devices, 4..7 on 2) see no token
    // but the layer still runs them on empty slots.
    assert!(out.to_vec::<f32>().unwrap().iter().any(|v| v.abs() > 1e-4));
}

#[test]
fn expert_parallel_matches_one_device_on_two_devices() {
    check(2);
}

#[test]
fn expert_parallel_matches_one_device_on_four_devices() {
    check(4);
}

#[test]
fn expert_parallel_gradients_match_one_device() {
    let (t, d, ff, devices) = (32, 16, 24, 4);
    let [x, router, w1, w2] = inputs(t, d, ff);
    let dout = HostTensor::from_fn(TensorSpec::new([t, d], F32), |i| {
        ((i * 37) % 29) as f64 / 29.0 - 0.5
    });
    let one = Device::cpu().unwrap();
    let want = one_device_grads::run(&one, &x, &router, &w1, &w2, &dout).unwrap();
    let mesh = expert_mesh(devices);
    let shardings = Shardings::new(
        [
            first(2),
            PartitionSpec::replicated(),
            first(3),
            first(3),
            first(2),
        ],
        [first(2), PartitionSpec::replicated(), first(3), first(3)],
    );
    let got = per_device_grads::run_shard_map(
        &mesh, &shardings, &x, &router, &w1, &w2, &dout, devices, t,
    )
    .unwrap();
    close(&got.0, &want.0, "dx");
    close(&got.1, &want.1, "drouter");
    close(&got.2, &want.2, "dw1");
    close(&got.3, &want.3, "dw2");
    assert!(got
        .2
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .any(|v| v.abs() > 1e-4));
}
