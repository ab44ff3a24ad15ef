//! Gradients through the collectives of per-device kernels, on a 2 × 2
//! mesh: `all_gather`, `psum_scatter`, `all_to_all` and `ppermute` (also
//! inside a traced loop), each against a plain-Rust reference; and the
//! error for `psum`, whose gradient depends on a convention values do not
//! record.
//!
//! The convention is JAX's for varying values: the loss is the sum of the
//! devices' losses, so the cotangent of a collective's operand is the
//! collective's transpose applied to its result's cotangent. With the
//! per-device loss `l_i = Σ C(x)_i · w_i` (`w` different on every device),
//! `dL/dx_j[k] = Σ_i Σ_t C(e_jk)_i[t] · w_i[t]`, where `e_jk` is the unit
//! input with a 1 at element `k` of device `j`: the reference below applies
//! a plain-Rust forward of each collective to every unit input.

use tessel_dsl::autodiff::grad;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::fori_loop;
use tessel_dsl::prelude::*;
use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};

/// Per-device blocks, device `(d, m)` at index `2d + m`, each row-major.
type Blocks = Vec<Vec<f64>>;

/// Rows and columns of a device's block of `x`.
const XR: usize = 2;
const XC: usize = 3;

fn mesh4() -> Mesh {
    let dev = Device::cpu_with_devices(4).expect("4-device client");
    Mesh::new(&dev, &[("data", 2), ("model", 2)]).expect("mesh")
}

fn split2() -> PartitionSpec {
    PartitionSpec::new([Some("data"), Some("model")])
}

/// The global `[2r, 2c]` tensor laid out `P(data, model)` from its blocks.
fn global(blocks: &Blocks, r: usize, c: usize) -> HostTensor {
    let mut out = vec![0.0f32; 4 * r * c];
    for (dev, b) in blocks.iter().enumerate() {
        let (d, m) = (dev / 2, dev % 2);
        for (i, v) in b.iter().enumerate() {
            out[(d * r + i / c) * 2 * c + m * c + i % c] = *v as f32;
        }
    }
    HostTensor::from_vec(out, [2 * r, 2 * c]).unwrap()
}

/// The blocks of a global `[2r, 2c]` tensor laid out `P(data, model)`.
fn blocks_of(t: &HostTensor, r: usize, c: usize) -> Blocks {
    let v = t.to_vec::<f32>().unwrap();
    (0..4)
        .map(|dev| {
            let (d, m) = (dev / 2, dev % 2);
            (0..r * c)
                .map(|i| v[(d * r + i / c) * 2 * c + m * c + i % c] as f64)
                .collect()
        })
        .collect()
}

fn row(b: &[f64], r: usize) -> &[f64] {
    &b[r * XC..(r + 1) * XC]
}

fn at(d: usize, m: usize) -> usize {
    2 * d + m
}

/// `x.all_gather(["model"], 1)`: `[2, 6]`, the two blocks of the row side by side.
fn gather_model(x: &Blocks) -> Blocks {
    (0..4)
        .map(|dev| {
            let d = dev / 2;
            (0..XR)
                .flat_map(|r| [row(&x[at(d, 0)], r), row(&x[at(d, 1)], r)].concat())
                .collect()
        })
        .collect()
}

/// `x.psum_scatter(["data"], 0)`: `[1, 3]`, row `d` of the column's sum.
fn scatter_data(x: &Blocks) -> Blocks {
    (0..4)
        .map(|dev| {
            let (d, m) = (dev / 2, dev % 2);
            let (a, b) = (row(&x[at(0, m)], d), row(&x[at(1, m)], d));
            a.iter().zip(b).map(|(p, q)| p + q).collect()
        })
        .collect()
}

/// `x.all_to_all(["model"], 0, 1)`: `[1, 6]`, row `m` of both blocks of the row.
fn a2a_model(x: &Blocks) -> Blocks {
    (0..4)
        .map(|dev| {
            let (d, m) = (dev / 2, dev % 2);
            [row(&x[at(d, 0)], m), row(&x[at(d, 1)], m)].concat()
        })
        .collect()
}

/// Three ring shifts along `data`, each scaled by 1.5.
fn ring3_data(x: &Blocks) -> Blocks {
    (0..4)
        .map(|dev| {
            let (d, m) = (dev / 2, dev % 2);
            x[at(1 - d, m)].iter().map(|v| v * 1.5f64.powi(3)).collect()
        })
        .collect()
}

/// `x.ppermute("model", [(0, 1)])`: device `m = 1` gets `m = 0`'s block, `m = 0` zeros.
fn send_model(x: &Blocks) -> Blocks {
    (0..4)
        .map(|dev| {
            let (d, m) = (dev / 2, dev % 2);
            if m == 1 {
                x[at(d, 0)].clone()
            } else {
                vec![0.0; XR * XC]
            }
        })
        .collect()
}

/// `dL/dx` for `L = Σ_i Σ_t forward(x)_i[t] · w_i[t]`, from unit inputs.
fn reference(forward: fn(&Blocks) -> Blocks, w: &Blocks) -> Blocks {
    (0..4)
        .map(|j| {
            (0..XR * XC)
                .map(|k| {
                    let mut unit = vec![vec![0.0; XR * XC]; 4];
                    unit[j][k] = 1.0;
                    let y = forward(&unit);
                    y.iter()
                        .zip(w)
                        .map(|(yi, wi)| yi.iter().zip(wi).map(|(a, b)| a * b).sum::<f64>())
                        .sum()
                })
                .collect()
        })
        .collect()
}

/// Per-device weights of a `[r, c]` result, different on every device.
fn weights(r: usize, c: usize) -> Blocks {
    (0..4)
        .map(|dev| {
            (0..r * c)
                .map(|i| ((dev * 7 + i * 5) % 11) as f64 * 0.25 - 1.0)
                .collect()
        })
        .collect()
}

fn x_blocks() -> Blocks {
    (0..4)
        .map(|dev| {
            (0..XR * XC)
                .map(|i| ((dev * 3 + i * 13) % 17) as f64 - 8.0)
                .collect()
        })
        .collect()
}

/// Runs `dx = grad(Σ body(x) · w)` per device and checks it against the reference.
fn check<F: Fn(&[Tensor]) -> Tensor>(
    mesh: &Mesh,
    k: &Kernel<F>,
    forward: fn(&Blocks) -> Blocks,
    out: (usize, usize),
    what: &str,
) {
    let w = weights(out.0, out.1);
    let sh = Shardings::new([split2(), split2()], [split2()]);
    let got = k
        .run_shard_map(
            mesh,
            &sh,
            &[&global(&x_blocks(), XR, XC), &global(&w, out.0, out.1)],
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = blocks_of(&got[0], XR, XC);
    let want = reference(forward, &w);
    for (dev, (g, w)) in got.iter().zip(&want).enumerate() {
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{what}: device {dev} element {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn gradients_of_gather_scatter_all_to_all_and_permutes() {
    let mesh = mesh4();
    // One kernel per body: the compile cache files a kernel under its name
    // and the line of `Kernel::new`.
    let k = Kernel::new("grad_gather", |a: &[Tensor]| {
        grad(
            |x: Tensor| (x.all_gather(&["model"], 1) * a[1]).sum(&[0, 1]),
            a[0],
        )
    });
    check(&mesh, &k, gather_model, (XR, 2 * XC), "all_gather");
    let k = Kernel::new("grad_scatter", |a: &[Tensor]| {
        grad(
            |x: Tensor| (x.psum_scatter(&["data"], 0) * a[1]).sum(&[0, 1]),
            a[0],
        )
    });
    check(&mesh, &k, scatter_data, (1, XC), "psum_scatter");
    let k = Kernel::new("grad_a2a", |a: &[Tensor]| {
        grad(
            |x: Tensor| (x.all_to_all(&["model"], 0, 1) * a[1]).sum(&[0, 1]),
            a[0],
        )
    });
    check(&mesh, &k, a2a_model, (1, 2 * XC), "all_to_all");
    let k = Kernel::new("grad_ring", |a: &[Tensor]| {
        let ring =
            |x: Tensor| fori_loop(0, 3, x, |_, x| x.ppermute("data", &[(0, 1), (1, 0)]) * 1.5);
        grad(|x: Tensor| (ring(x) * a[1]).sum(&[0, 1]), a[0])
    });
    check(&mesh, &k, ring3_data, (XR, XC), "ppermute ring in a loop");
    let k = Kernel::new("grad_send", |a: &[Tensor]| {
        grad(
            |x: Tensor| (x.ppermute("model", &[(0, 1)]) * a[1]).sum(&[0, 1]),
            a[0],
        )
    });
    check(&mesh, &k, send_model, (XR, XC), "one-way ppermute");
}

#[test]
fn psum_has_no_gradient_and_the_error_says_why() {
    let mesh = mesh4();
    let k = Kernel::new("grad_psum", |a: &[Tensor]| {
        grad(|x: Tensor| x.psum(&["data"]).sum(&[0, 1]), a[0])
    });
    let sh = Shardings::new([split2()], [split2()]);
    let err = k
        .run_shard_map(&mesh, &sh, &[&global(&x_blocks(), XR, XC)])
        .unwrap_err();
    let k = err.as_kernel_error().expect("a kernel error");
    assert!(
        k.message.contains("psum") && k.message.contains("replicated"),
        "{}",
        k.message
    );
    assert!(
        k.location.file.ends_with("shard_map_grads.rs"),
        "{:?}",
        k.location
    );
}
