//! Trees of tensors (`#[derive(Tree)]`): paths, structure and rebuilding;
//! tree parameters and results of attribute and closure kernels (host,
//! device and spec forms), donation of a whole tree by its parameter name,
//! the structure in the compile key, trees as loop carries and gradient
//! arguments (checked against the flat computation), static fields and
//! enums, and errors that name a leaf's path.

use tessel::kernel::Kernel;
use tessel::prelude::*;
use tessel::tree::{self, TreeDef};
use tessel::{Tree, TreeValue};
use tessel_testing::dev;

#[derive(Tree, Clone, Debug)]
struct Layer<T = Tensor> {
    w: T,
    b: T,
}

#[derive(Tree, Clone, Debug)]
struct Params<T = Tensor> {
    layers: Vec<Layer<T>>,
    head: T,
    scale: Option<T>,
    pair: (T, [T; 2]),
    /// Static: part of the compile key, cloned into results.
    depth: usize,
}

#[derive(Tree, Clone, Debug)]
enum Norm<T = Tensor> {
    Rms { g: T },
    Layer { g: T, b: T },
}

#[derive(Tree)]
struct Wrapped<T = Tensor>(T, Vec<T>);

/// A tree with a subtree type parameter (its traced form), the leaf marked
/// by its default.
#[derive(Tree, Clone, Debug)]
struct Stepped<P, T = Tensor> {
    params: P,
    step: T,
    history: Vec<P>,
}

/// Counts a step and keeps the parameters it had.
#[cpu_kernel]
fn stepped_kernel(s: Stepped<Layer>) -> Stepped<Layer> {
    let mut history = s.history.clone();
    history.push(s.params.clone());
    let params = Layer {
        w: s.params.w * 2.0,
        b: s.params.b,
    };
    Stepped {
        params,
        step: s.step + 1.0,
        history,
    }
}

fn host(v: &[f32]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

fn vals(h: &HostTensor) -> Vec<f32> {
    h.to_vec::<f32>().unwrap()
}

fn params(layers: usize, with_scale: bool) -> Params<HostTensor> {
    let layer = |i: usize| Layer {
        w: host(&[1.0 + i as f32, 2.0]),
        b: host(&[0.5 * i as f32, -1.0]),
    };
    Params {
        layers: (0..layers).map(layer).collect(),
        head: host(&[3.0, 4.0]),
        scale: with_scale.then(|| host(&[2.0, 2.0])),
        pair: (host(&[1.0, 1.0]), [host(&[5.0, 6.0]), host(&[7.0, 8.0])]),
        depth: layers,
    }
}

#[test]
fn paths_name_every_leaf_in_order() {
    let p = params(2, true);
    assert_eq!(
        p.leaf_paths(),
        [
            "layers.0.w",
            "layers.0.b",
            "layers.1.w",
            "layers.1.b",
            "head",
            "scale",
            "pair.0",
            "pair.1.0",
            "pair.1.1"
        ]
    );
    assert_eq!(params(1, false).leaves().len(), 6);
    let w = Wrapped(host(&[1.0]), vec![host(&[2.0]), host(&[3.0])]);
    assert_eq!(w.leaf_paths(), ["0", "1.0", "1.1"]);
    let n: Norm<HostTensor> = Norm::Layer {
        g: host(&[1.0]),
        b: host(&[0.0]),
    };
    assert_eq!(n.leaf_paths(), ["g", "b"]);
}

#[test]
fn structure_rebuilds_the_same_tree_and_mismatches_name_the_path() {
    let p = params(2, false);
    let def = p.structure();
    assert_eq!(def.num_leaves(), 8);
    let leaves: Vec<HostTensor> = p.leaves().into_iter().cloned().collect();
    let back = tree::assemble_all::<Params, HostTensor>(&def, leaves).unwrap();
    assert_eq!(back.depth, 2);
    assert!(back.scale.is_none());
    assert_eq!(vals(&back.layers[1].w), vec![2.0, 2.0]);
    assert_eq!(vals(&back.pair.1[1]), vec![7.0, 8.0]);
    // Too few leaves: an error, never a panic.
    let short: Vec<HostTensor> = p.leaves().into_iter().take(3).cloned().collect();
    let e = tree::assemble_all::<Params, HostTensor>(&def, short).unwrap_err();
    assert!(e.to_string().contains("8 leaves, got 3"), "{e}");
    // A structure of another type: the error names where it stops fitting.
    let other = params(1, true).pair.structure();
    let e = tree::assemble_all::<Params, HostTensor>(&other, vec![host(&[1.0]); 3]).unwrap_err();
    assert!(e.to_string().contains("`Params` (5 fields)"), "{e}");
    let n: Norm<HostTensor> = Norm::Rms { g: host(&[1.0]) };
    let e =
        tree::assemble_all::<Layer, HostTensor>(&n.structure(), vec![host(&[1.0])]).unwrap_err();
    assert!(e.to_string().contains("expected `Layer` (2 fields)"), "{e}");
    // A mismatch deep inside names its full path (the rebuild walks without
    // a path, then again to say where).
    let mut deep = def.clone();
    if let TreeDef::Node(fields) = &mut deep {
        if let TreeDef::Node(layers) = &mut fields[0] {
            layers[1] = TreeDef::Node(vec![TreeDef::Leaf]);
        }
    }
    let leaves: Vec<HostTensor> = (0..7).map(|_| host(&[1.0])).collect();
    let e = tree::assemble_all::<Params, HostTensor>(&deep, leaves).unwrap_err();
    assert!(e.to_string().contains("layers.1"), "{e}");
    assert!(e.to_string().contains("expected `Layer` (2 fields)"), "{e}");
}

/// The key a kernel call writes for a tree argument without building its
/// structure is the built structure's key, and counts its leaves.
#[test]
fn the_streamed_key_is_the_structures_key() {
    fn check<X: TreeValue>(x: &X) {
        let def = x.structure();
        let mut built = Vec::new();
        def.write_key(&mut built);
        let mut streamed = Vec::new();
        let n = <X::Tree as Tree>::write_key::<X::Leaf>(x.as_form(), &mut streamed);
        assert_eq!(streamed, built, "{def:?}");
        assert_eq!(n, def.num_leaves(), "{def:?}");
    }
    for (layers, scale) in [(0, false), (2, false), (3, true)] {
        check(&params(layers, scale));
    }
    check(&Norm::Rms { g: host(&[1.0]) });
    check(&Norm::Layer {
        g: host(&[1.0]),
        b: host(&[2.0]),
    });
    check(&Wrapped(host(&[1.0]), vec![host(&[2.0]); 3]));
    check(&(host(&[1.0]), Some(vec![host(&[2.0])]), [host(&[3.0])]));
    // Another static value is another key.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut p = params(1, false);
    <Params as Tree>::write_key(&p, &mut a);
    p.depth = 7;
    <Params as Tree>::write_key(&p, &mut b);
    assert_ne!(a, b);
}

#[test]
fn a_subtree_type_parameter_is_part_of_the_tree() {
    let layer = |w: f32| Layer {
        w: host(&[w]),
        b: host(&[-w]),
    };
    let s: Stepped<Layer<HostTensor>, HostTensor> = Stepped {
        params: layer(1.0),
        step: host(&[0.0]),
        history: vec![layer(0.5)],
    };
    assert_eq!(
        s.leaf_paths(),
        ["params.w", "params.b", "step", "history.0.w", "history.0.b"]
    );
    let back = tree::assemble_all::<Stepped<Layer>, HostTensor>(
        &s.structure(),
        s.leaves().into_iter().cloned().collect(),
    )
    .unwrap();
    assert_eq!(vals(&back.history[0].b), vec![-0.5]);
    let mut key = Vec::new();
    <Stepped<Layer> as Tree>::write_key(&s, &mut key);
    let mut built = Vec::new();
    s.structure().write_key(&mut built);
    assert_eq!(key, built);
    // Through a kernel, on the host and on the device.
    let out = stepped_kernel::run(&dev(), &s).unwrap();
    assert_eq!(
        (vals(&out.params.w), vals(&out.step)),
        (vec![2.0], vec![1.0])
    );
    assert_eq!(out.history.len(), 2);
    assert_eq!(vals(&out.history[1].w), vec![1.0]);
    let d = tree::to_device(&dev(), &s).unwrap();
    let out = tree::to_host(&stepped_kernel::call(&dev(), &d).unwrap()).unwrap();
    assert_eq!(vals(&out.params.w), vec![2.0]);
}

#[test]
fn map_and_device_round_trip_keep_the_structure() {
    let dev = dev();
    let p = params(3, true);
    let on_dev = tree::to_device(&dev, &p).unwrap();
    assert_eq!(on_dev.depth, 3);
    let specs = tree::specs(&on_dev);
    assert_eq!(specs.layers[2].b.to_string(), "f32[2]");
    let back = tree::to_host(&on_dev).unwrap();
    for ((pa, a), (pb, b)) in p
        .leaves_with_paths()
        .into_iter()
        .zip(back.leaves_with_paths())
    {
        assert_eq!(pa, pb);
        assert_eq!(vals(a), vals(b), "{pa}");
    }
    let doubled = p.map_leaves(|_, h| host(&vals(h).iter().map(|v| v * 2.0).collect::<Vec<_>>()));
    assert_eq!(vals(&doubled.head), vec![6.0, 8.0]);
}

/// One SGD-like step over the whole tree: every leaf minus 0.1 × (leaf ×
/// x), the loss the sum of the head; the static depth comes back too.
#[cpu_kernel]
fn tree_step(p: Params, x: Tensor) -> (Params, Tensor) {
    let step = |t: Tensor| t - t * x * 0.1;
    let layers = p
        .layers
        .iter()
        .map(|l| Layer {
            w: step(l.w),
            b: step(l.b),
        })
        .collect();
    let loss = (p.head * p.depth as f32).sum(&[0]);
    let next = Params {
        layers,
        head: step(p.head),
        scale: p.scale.map(step),
        pair: (step(p.pair.0), [step(p.pair.1[0]), step(p.pair.1[1])]),
        depth: p.depth + 1,
    };
    (next, loss)
}

fn stepped(v: &[f32], x: &[f32]) -> Vec<f32> {
    v.iter().zip(x).map(|(a, x)| a - a * x * 0.1).collect()
}

#[test]
fn attribute_kernels_take_and_return_trees_in_every_form() {
    let dev = dev();
    let p = params(2, true);
    let x = host(&[1.0, 2.0]);
    let (next, loss) = tree_step::run(&dev, &p, &x).unwrap();
    assert_eq!(next.depth, 3, "the static field comes back as computed");
    assert_eq!(vals(&loss), vec![(3.0 + 4.0) * 2.0]);
    for ((path, a), (_, b)) in p
        .leaves_with_paths()
        .into_iter()
        .zip(next.leaves_with_paths())
    {
        assert_eq!(vals(b), stepped(&vals(a), &[1.0, 2.0]), "{path}");
    }
    // Device form: the same structure over buffers.
    let pd = tree::to_device(&dev, &p).unwrap();
    let xd = dev.to_device(&x).unwrap();
    let (nd, ld) = tree_step::call(&dev, &pd, &xd).unwrap();
    assert_eq!(nd.layers.len(), 2);
    assert_eq!(vals(&ld.to_host().unwrap()), vals(&loss));
    assert_eq!(
        vals(&nd.pair.1[1].to_host().unwrap()),
        vals(&next.pair.1[1])
    );
    // Spec form: lower and compile take the specs of the same tree.
    let specs = tree::specs(&p);
    let text = tree_step::lower(&specs, &TensorSpec::new([2], F32)).unwrap();
    assert!(
        text.contains("p.layers.1.w"),
        "leaves are named by their paths in the program"
    );
    let exe = tree_step::compile(&dev, &specs, &TensorSpec::new([2], F32)).unwrap();
    assert_eq!(exe.inputs().len(), 10);
}

#[test]
fn the_structure_is_part_of_the_compile_key() {
    let dev = dev();
    let x = host(&[1.0, 1.0]);
    // Same leaf specs, different structure (a static field, an option).
    let a = params(2, false);
    let mut b = params(2, false);
    b.depth = 7;
    let (na, la) = tree_step::run(&dev, &a, &x).unwrap();
    let (nb, lb) = tree_step::run(&dev, &b, &x).unwrap();
    assert_eq!((na.depth, nb.depth), (3, 8));
    assert_eq!(vals(&la), vec![14.0]);
    assert_eq!(vals(&lb), vec![49.0]);
    // Leaves moved between an option and a sequence: 8 leaves both ways.
    let c = params(2, true);
    let mut d = params(2, true);
    d.scale = None;
    d.layers.push(Layer {
        w: host(&[1.0, 1.0]),
        b: host(&[1.0, 1.0]),
    });
    d.layers.truncate(2);
    assert_ne!(c.leaves().len(), d.leaves().len());
    let (nc, _) = tree_step::run(&dev, &c, &x).unwrap();
    assert!(nc.scale.is_some());
}

#[test]
fn a_donated_tree_is_updated_in_place_and_cannot_be_reused() {
    #[cpu_kernel(donate(state))]
    fn bump(state: Layer, by: Tensor) -> Layer {
        Layer {
            w: state.w + by,
            b: state.b + by,
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
    let by = dev.to_device(&host(&[1.0, 1.0])).unwrap();
    let exe = bump::compile(&dev, &tree::specs(&state), by.spec()).unwrap();
    assert_eq!(exe.inputs().len(), 3);
    let next = bump::call(&dev, &state, &by).unwrap();
    assert!(state.w.is_deleted().unwrap() && state.b.is_deleted().unwrap());
    assert!(!by.is_deleted().unwrap());
    assert_eq!(vals(&next.b.to_host().unwrap()), vec![4.0, 5.0]);
    let e = bump::call(&dev, &state, &by).unwrap_err().to_string();
    assert!(e.contains("state.w") && e.contains("bump"), "{e}");
}

#[test]
fn trees_are_loop_carries_and_gradient_arguments() {
    // The gradient of a tree-valued function comes back as the same tree
    // and equals the flat computation's.
    #[cpu_kernel]
    fn tree_grad(l: Layer, x: Tensor) -> (Layer, Layer) {
        let (_, g) = tessel::autodiff::value_and_grad(
            |l: Layer| ((l.w * x + l.b).square()).sum(&[0]),
            l.clone(),
        );
        // Ten steps of gradient descent, the tree carried by the loop.
        let mut cur = Layer { w: l.w, b: l.b };
        for _ in 0..10 {
            let (_, g) = tessel::autodiff::value_and_grad(
                |l: Layer| ((l.w * x + l.b).square()).sum(&[0]),
                Layer { w: cur.w, b: cur.b },
            );
            cur = Layer {
                w: cur.w - g.w * 0.05,
                b: cur.b - g.b * 0.05,
            };
        }
        (g, cur)
    }
    #[cpu_kernel]
    fn flat_grad(w: Tensor, b: Tensor, x: Tensor) -> (Tensor, Tensor) {
        let (_, g) = tessel::autodiff::value_and_grad(
            |v: (Tensor, Tensor)| ((v.0 * x + v.1).square()).sum(&[0]),
            (w, b),
        );
        g
    }
    let dev = dev();
    let l = Layer {
        w: host(&[0.5, -1.0, 2.0]),
        b: host(&[0.1, 0.2, -0.3]),
    };
    let x = host(&[1.5, 2.0, -0.5]);
    let (g, after) = tree_grad::run(&dev, &l, &x).unwrap();
    let (gw, gb) = flat_grad::run(&dev, &l.w, &l.b, &x).unwrap();
    assert_eq!(vals(&g.w), vals(&gw));
    assert_eq!(vals(&g.b), vals(&gb));
    // Reference: d/dw (wx+b)^2 = 2x(wx+b), d/db = 2(wx+b), in f64.
    let (w, b, xs) = (vals(&l.w), vals(&l.b), vals(&x));
    for i in 0..3 {
        let r = (w[i] as f64) * (xs[i] as f64) + b[i] as f64;
        assert!((vals(&g.w)[i] as f64 - 2.0 * xs[i] as f64 * r).abs() < 1e-5);
        assert!((vals(&g.b)[i] as f64 - 2.0 * r).abs() < 1e-5);
    }
    let (mut w, mut b) = (
        w.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        b.iter().map(|&v| v as f64).collect::<Vec<_>>(),
    );
    for _ in 0..10 {
        for i in 0..3 {
            let r = w[i] * xs[i] as f64 + b[i];
            w[i] -= 0.05 * 2.0 * xs[i] as f64 * r;
            b[i] -= 0.05 * 2.0 * r;
        }
    }
    for i in 0..3 {
        assert!((vals(&after.w)[i] as f64 - w[i]).abs() < 1e-4, "w[{i}]");
        assert!((vals(&after.b)[i] as f64 - b[i]).abs() < 1e-4, "b[{i}]");
    }
}

#[test]
fn a_traced_loop_carries_a_tree() {
    #[cpu_kernel]
    fn accumulate(l: Layer, n: Tensor) -> Layer {
        tessel::fori_loop(0, 5, l, |_, c: Layer| Layer {
            w: c.w + n,
            b: c.b * 2.0,
        })
    }
    let dev = dev();
    let l = Layer {
        w: host(&[1.0]),
        b: host(&[1.0]),
    };
    let out = accumulate::run(&dev, &l, &host(&[0.5])).unwrap();
    assert_eq!(vals(&out.w), vec![3.5]);
    assert_eq!(vals(&out.b), vec![32.0]);
}

#[test]
fn enums_and_closure_kernels_return_their_structure() {
    #[cpu_kernel]
    fn norm(x: Tensor, n: Norm) -> Norm {
        match n {
            Norm::Rms { g } => Norm::Rms { g: g * x },
            Norm::Layer { g, b } => Norm::Layer { g: g * x, b: b + x },
        }
    }
    let dev = dev();
    let x = host(&[2.0]);
    match norm::run(
        &dev,
        &x,
        &Norm::Layer {
            g: host(&[3.0]),
            b: host(&[1.0]),
        },
    )
    .unwrap()
    {
        Norm::Layer { g, b } => assert_eq!((vals(&g), vals(&b)), (vec![6.0], vec![3.0])),
        Norm::Rms { .. } => panic!("the variant changed"),
    }
    assert!(matches!(
        norm::run(&dev, &x, &Norm::Rms { g: host(&[3.0]) }).unwrap(),
        Norm::Rms { .. }
    ));
    // A closure kernel's results in the structure its body returned.
    let k = Kernel::new("split", |a: &[Tensor]| (a[0] * 2.0, vec![a[0] + 1.0, a[0]]));
    let (twice, rest) = k.run_typed(&dev, &[&x]).unwrap();
    assert_eq!((vals(&twice), rest.len()), (vec![4.0], 2));
    let xd = dev.to_device(&x).unwrap();
    let (_, rest) = k.call_typed(&dev, &[&xd]).unwrap();
    assert_eq!(vals(&rest[0].to_host().unwrap()), vec![3.0]);
}

#[test]
fn a_wrong_leaf_is_an_error_naming_its_path() {
    let dev = dev();
    let p = params(2, false);
    let specs = tree::specs(&p);
    let exe = tree_step::compile(&dev, &specs, &TensorSpec::new([2], F32)).unwrap();
    let mut bad = params(2, false);
    bad.layers[1].b = host(&[1.0, 2.0, 3.0]);
    let args: Vec<DeviceBuffer> = bad
        .leaves()
        .into_iter()
        .chain([&host(&[1.0, 1.0])])
        .map(|h| dev.to_device(h).unwrap())
        .collect();
    let refs: Vec<&DeviceBuffer> = args.iter().collect();
    let e = exe.execute(&refs).unwrap_err().to_string();
    assert!(
        e.contains("p.layers.1.b") && e.contains("f32[2]") && e.contains("f32[3]"),
        "{e}"
    );
    let _ = TreeDef::Leaf;
}
