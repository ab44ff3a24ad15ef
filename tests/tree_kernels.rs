//! Trees through the other doors of the kernel boundary: closure kernels
//! over a tree argument (`TreeKernel`: host, device and spec forms, compile
//! from example arguments, donation by path prefix), attribute kernels
//! compiled from example arguments, `#[donate]` on a parameter, a tree through `checkpoint` (gradients equal to the
//! un-checkpointed ones) and through `shard_map` (against a plain-Rust
//! reference).

use std::sync::Arc;

use tessel::autodiff::{checkpoint, value_and_grad, Remat};
use tessel::kernel::TreeKernel;
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, ShardedBuffer, Shardings};
use tessel::tree;
use tessel::{Tree, TreeValue};
use tessel_testing::dev;

#[derive(Tree, Clone, Debug)]
struct Layer<T = Tensor> {
    w: T,
    b: T,
}

#[derive(Tree, Clone, Debug)]
struct Net<T = Tensor> {
    layers: Vec<Layer<T>>,
    head: T,
}

fn host(v: &[f32]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

fn vals(h: &HostTensor) -> Vec<f32> {
    h.to_vec::<f32>().unwrap()
}

fn net(layers: usize) -> Net<HostTensor> {
    Net {
        layers: (0..layers)
            .map(|i| Layer {
                w: host(&[1.0 + i as f32, -2.0]),
                b: host(&[0.5, i as f32]),
            })
            .collect(),
        head: host(&[3.0, 4.0]),
    }
}

/// `leaf - 0.5 * leaf * x` for every leaf, and the sum of the head.
fn sgd_body((p, x): (Net, Tensor)) -> (Net, Tensor) {
    let step = |t: Tensor| t - t * x * 0.5;
    let loss = p.head.sum(&[0]);
    let next = Net {
        layers: p
            .layers
            .iter()
            .map(|l| Layer {
                w: step(l.w),
                b: step(l.b),
            })
            .collect(),
        head: step(p.head),
    };
    (next, loss)
}

fn stepped(v: &[f32], x: &[f32]) -> Vec<f32> {
    v.iter().zip(x).map(|(a, x)| a - a * x * 0.5).collect()
}

#[test]
fn closure_kernels_take_trees_in_every_form() {
    let dev = dev();
    let k = TreeKernel::new("tree_sgd", sgd_body);
    let args = (net(3), host(&[1.0, 2.0]));
    let (next, loss) = k.run(&dev, &args).unwrap();
    assert_eq!(vals(&loss), vec![7.0]);
    assert_eq!(next.layers.len(), 3);
    for ((path, a), (_, b)) in args
        .0
        .leaves_with_paths()
        .into_iter()
        .zip(next.leaves_with_paths())
    {
        assert_eq!(vals(b), stepped(&vals(a), &[1.0, 2.0]), "{path}");
    }
    // Compile from example arguments: specs, host tensors and buffers give
    // the same cached program, which the call then uses.
    let on_device = tree::to_device(&dev, &args).unwrap();
    let from_specs = k.compile(&dev, &tree::specs(&args)).unwrap();
    let from_hosts = k.compile(&dev, &args).unwrap();
    let from_buffers = k.compile(&dev, &on_device).unwrap();
    assert!(Arc::ptr_eq(&from_specs, &from_hosts) && Arc::ptr_eq(&from_specs, &from_buffers));
    assert_eq!(from_specs.inputs().len(), 3 * 2 + 2);
    let text = k.lower(&on_device).unwrap();
    assert!(
        text.contains("0.layers.2.b"),
        "leaves are named by their paths"
    );
    let (nd, ld) = k.call(&dev, &on_device).unwrap();
    assert_eq!(vals(&ld.to_host().unwrap()), vec![7.0]);
    assert_eq!(
        vals(&nd.layers[1].w.to_host().unwrap()),
        vals(&next.layers[1].w)
    );
    // Another structure is another program.
    let two = k.compile(&dev, &(net(2), host(&[1.0, 2.0]))).unwrap();
    assert!(!Arc::ptr_eq(&two, &from_specs));
    // A single tensor argument is named `arg`.
    let single = TreeKernel::new("single", |x: Tensor| x * 2.0);
    assert!(single
        .lower(&TensorSpec::new([2], F32))
        .unwrap()
        .contains("arg"));
    assert_eq!(
        vals(&single.run(&dev, &host(&[1.0, 2.0])).unwrap()),
        vec![2.0, 4.0]
    );
}

#[test]
fn closure_kernels_donate_by_path_prefix() {
    let dev = dev();
    let k = TreeKernel::new("tree_sgd_donating", sgd_body).donate(["0"]);
    let args = tree::to_device(&dev, &(net(2), host(&[1.0, 1.0]))).unwrap();
    let (next, _) = k.call(&dev, &args).unwrap();
    for (path, b) in args.0.leaves_with_paths() {
        assert!(b.is_deleted().unwrap(), "{path} is donated");
    }
    assert!(
        !args.1.is_deleted().unwrap(),
        "the input outside the prefix is kept"
    );
    assert_eq!(vals(&next.head.to_host().unwrap()), vec![1.5, 2.0]);
    let e = k.call(&dev, &args).unwrap_err().to_string();
    assert!(
        e.contains("0.layers.0.w") && e.contains("tree_sgd_donating"),
        "{e}"
    );
    // A prefix naming nothing is an error when traced.
    let bad = TreeKernel::new("bad_donation", sgd_body).donate(["params"]);
    let e = bad.compile(&dev, &args).unwrap_err().to_string();
    assert!(
        e.contains("`params` is donated") && e.contains("bad_donation"),
        "{e}"
    );
}

/// An attribute kernel compiled from the buffers or host tensors it will
/// be called with: the specs are derived, and the call uses that program.
#[test]
fn attribute_kernels_compile_from_example_arguments() {
    #[cpu_kernel]
    fn scale_net(net: Net, by: Tensor, twice: bool) -> Net {
        let f = if twice { 2.0 } else { 1.0 };
        net.map_leaves(|_, t| *t * by * f)
    }
    let dev = dev();
    let (n, by) = (net(2), host(&[3.0, 1.0]));
    let (nb, bb) = (
        tree::to_device(&dev, &n).unwrap(),
        dev.to_device(&by).unwrap(),
    );
    let from_specs = scale_net::compile(&dev, &tree::specs(&n), by.spec(), true).unwrap();
    let from_buffers = scale_net::compile_for(&dev, &nb, &bb, true).unwrap();
    let from_hosts = scale_net::compile_for_host(&dev, &n, &by, true).unwrap();
    assert!(Arc::ptr_eq(&from_specs, &from_buffers) && Arc::ptr_eq(&from_specs, &from_hosts));
    assert_eq!(from_specs.inputs().len(), 2 * 2 + 1 + 1);
    // Another static argument is another program.
    let once = scale_net::compile_for(&dev, &nb, &bb, false).unwrap();
    assert!(!Arc::ptr_eq(&once, &from_specs));
    let out = scale_net::call(&dev, &nb, &bb, true).unwrap();
    assert_eq!(
        vals(&out.head.to_host().unwrap()),
        stepped_scale(&vals(&n.head), &[6.0, 2.0])
    );
}

fn stepped_scale(v: &[f32], by: &[f32]) -> Vec<f32> {
    v.iter().zip(by).map(|(a, b)| a * b).collect()
}

#[test]
fn a_parameter_marked_donate_is_donated() {
    #[cpu_kernel]
    fn bump(#[donate] state: Layer, by: Tensor) -> Layer {
        Layer {
            w: state.w + by,
            b: state.b * by,
        }
    }
    let dev = dev();
    let state = tree::to_device(
        &dev,
        &Layer {
            w: host(&[1.0, 2.0]),
            b: host(&[3.0, 4.0]),
        },
    )
    .unwrap();
    let by = dev.to_device(&host(&[2.0, 2.0])).unwrap();
    let next = bump::call(&dev, &state, &by).unwrap();
    assert!(state.w.is_deleted().unwrap() && state.b.is_deleted().unwrap());
    assert!(!by.is_deleted().unwrap());
    assert_eq!(vals(&next.b.to_host().unwrap()), vec![6.0, 8.0]);
    let e = bump::call(&dev, &state, &by).unwrap_err().to_string();
    assert!(e.contains("state.w") && e.contains("bump"), "{e}");
}

#[test]
fn checkpointed_tree_functions_have_the_same_gradients() {
    #[cpu_kernel]
    fn grads(n: Net, x: Tensor) -> (Net, Net) {
        let forward = |n: Net| {
            let h = n.layers.iter().fold(x, |h, l| (h * l.w + l.b).tanh());
            (h * n.head).sum(&[0])
        };
        let plain = value_and_grad(forward, n.clone()).1;
        let remat = value_and_grad(
            |n: Net| checkpoint(n, |n: Net| forward(n), Remat::Nothing),
            n,
        )
        .1;
        (plain, remat)
    }
    let dev = dev();
    let (plain, remat) = grads::run(&dev, &net(3), &host(&[0.3, -0.2])).unwrap();
    for ((path, a), (_, b)) in plain
        .leaves_with_paths()
        .into_iter()
        .zip(remat.leaves_with_paths())
    {
        for (x, y) in vals(a).iter().zip(vals(b)) {
            assert!(
                (x - y).abs() <= 1e-6 * (1.0 + x.abs()),
                "{path}: {x} vs {y}"
            );
        }
    }
    // The head's gradient is the last hidden state: check it in f64.
    let n = net(3);
    let mut h = [0.3f64, -0.2];
    for l in &n.layers {
        let (w, b) = (vals(&l.w), vals(&l.b));
        for i in 0..2 {
            h[i] = (h[i] * w[i] as f64 + b[i] as f64).tanh();
        }
    }
    for (g, r) in vals(&plain.head).iter().zip(h) {
        assert!((*g as f64 - r).abs() < 1e-5, "{g} vs {r}");
    }
}

#[test]
fn shard_map_takes_and_returns_trees() {
    /// Each device holds rows of `x` and the whole layer; the gradient of
    /// the squared error is summed over devices.
    #[cpu_kernel]
    fn data_parallel(l: Layer, x: Tensor) -> Layer {
        let (_, g) = value_and_grad(|l: Layer| (x * l.w + l.b).square().sum(&[0, 1]), l);
        Layer {
            w: g.w.psum(&["data"]),
            b: g.b.psum(&["data"]),
        }
    }
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("data", 2)]).unwrap();
    let l = Layer {
        w: host(&[0.5, -1.0, 2.0]),
        b: host(&[0.1, 0.2, -0.3]),
    };
    let rows: Vec<f32> = (0..12).map(|i| (i as f32 - 5.0) / 4.0).collect();
    let x = HostTensor::from_vec(rows.clone(), [4, 3]).unwrap();
    let rep = PartitionSpec::replicated;
    let split = PartitionSpec::new([Some("data"), None]);
    // One sharding per leaf, in path order (l.w, l.b, x).
    let shardings = Shardings::new([rep(), rep(), split.clone()], [rep(), rep()]);
    let g = data_parallel::run_shard_map(&mesh, &shardings, &l, &x).unwrap();
    // Reference: d/dw sum (x w + b)^2 = sum_rows 2 x (x w + b); d/db = sum_rows 2 (x w + b).
    let (w, b) = (vals(&l.w), vals(&l.b));
    for c in 0..3 {
        let (mut gw, mut gb) = (0.0f64, 0.0f64);
        for r in 0..4 {
            let xv = rows[r * 3 + c] as f64;
            let e = xv * w[c] as f64 + b[c] as f64;
            gw += 2.0 * xv * e;
            gb += 2.0 * e;
        }
        assert!((vals(&g.w)[c] as f64 - gw).abs() < 1e-4, "w[{c}]");
        assert!((vals(&g.b)[c] as f64 - gb).abs() < 1e-4, "b[{c}]");
    }
    // Sharded buffers carry their own layouts: a tree of them is enough.
    let ls = l
        .try_map_leaves(|_, h| ShardedBuffer::from_host(&mesh, h, &rep()))
        .unwrap();
    let xs = ShardedBuffer::from_host(&mesh, &x, &split).unwrap();
    let gs = data_parallel::call_shard_map(&mesh, &[rep(), rep()], &ls, &xs).unwrap();
    assert_eq!(vals(&gs.b.to_host().unwrap()), vals(&g.b));
}

/// A loss over a tree parameter and a `Vec` of tensors, for the companion's
/// `value_and_grad`.
#[cpu_kernel]
fn tree_loss(p: Net, extra: Vec<Tensor>, x: Tensor, scale: f64) -> Tensor {
    let mut h = x;
    for l in &p.layers {
        h = (h * l.w + l.b).tanh();
    }
    let e = extra.iter().fold(h.zeros_like(), |acc, t| acc + *t * h);
    ((h * p.head).sum(&[0]) + e.square().sum(&[0])) * scale
}

/// The same loss's gradients taken inside a kernel: the tree's type back.
#[cpu_kernel]
fn tree_loss_grads(p: Net, extra: Vec<Tensor>, x: Tensor) -> (Tensor, Net, Vec<Tensor>) {
    let (l, (dp, de)) = value_and_grad(
        |(p, e): (Net, Vec<Tensor>)| tree_loss(p, e, x, 3.0),
        (p, extra),
    );
    (l, dp, de)
}

#[test]
fn the_companion_differentiates_tree_and_vec_parameters() {
    let dev = dev();
    let (p, extra, x) = (
        net(2),
        vec![host(&[0.25, -0.5]), host(&[1.5, 0.75])],
        host(&[0.3, -0.7]),
    );
    let (l, grads) = tree_loss::value_and_grad(&dev, &["extra", "p"], &p, &extra, &x, 3.0).unwrap();
    let (l2, dp, de) = tree_loss_grads::run(&dev, &p, &extra, &x).unwrap();
    assert_eq!(vals(&l), vals(&l2));
    // `extra`'s two gradients, then one per leaf of `p` in path order.
    assert_eq!(grads.len(), 2 + p.leaf_paths().len());
    let want: Vec<&HostTensor> = de.iter().chain(dp.leaves()).collect();
    for (i, (g, w)) in grads.iter().zip(want).enumerate() {
        let (g, w) = (vals(g), vals(w));
        assert!(
            g.iter()
                .zip(&w)
                .all(|(a, b)| (a - b).abs() <= 1e-6 * (1.0 + b.abs())),
            "gradient {i}: {g:?} vs {w:?}"
        );
    }
    // Not every gradient is zero: the check can fail.
    assert!(grads.iter().any(|g| vals(g).iter().any(|v| v.abs() > 1e-3)));
    let e = tree_loss::value_and_grad(&dev, &["scale"], &p, &extra, &x, 3.0).unwrap_err();
    let k = e.as_kernel_error().expect("a kernel error");
    assert!(
        k.message
            .contains("`scale` is not a tensor or tree parameter of `tree_loss`"),
        "{k}"
    );
}
