//! Optimizers over trees, cross-checked against a plain-Rust f64 reference
//! of the same chain over several steps: AdamW with a decay mask and a
//! warmup-cosine schedule, SGD (plain, heavy-ball, Nesterov), Lion, global
//! norm clipping, bf16 parameters with f32 statistics; the state donated
//! and updated in place on the device; a state of the wrong layout is a
//! trace error naming the leaf.
//!
//! The loss is `Σ c·p²/2 + d·p` over every leaf, so the gradient is
//! `c·p + d` (in the parameters' dtype, as autodiff gives it) and the
//! reference needs no autodiff. Tolerances: f32 parameters 2e-5 relative
//! plus 1e-5 absolute after 6 steps (values of order 1, updates of order the
//! learning rate); bf16 parameters one bf16 ulp; statistics 1e-4 relative.

extern crate tessel_dsl as tessel;

use tessel::autodiff::value_and_grad;
use tessel::prelude::*;
use tessel::{tree, Carry, Tree, TreeValue};
use tessel_kernels::optim::{
    After, OptState, Optimizer, PathMask, Schedule, TrainState, Transform,
};
use tessel_testing::{dev, Rng};

#[derive(Tree, Clone, Debug)]
struct Lin<T = Tensor> {
    w: T,
    b: T,
}

#[derive(Tree, Clone, Debug)]
struct Model<T = Tensor> {
    layers: Vec<Lin<T>>,
    norm: T,
}

fn flat<C: Carry>(c: &C) -> Vec<Tensor> {
    let mut v = Vec::new();
    c.flatten(&mut v);
    v
}

#[cpu_kernel(donate(params, state))]
fn step(
    params: Model,
    state: OptState<Model>,
    c: Model,
    d: Model,
    opt: Optimizer,
) -> (Model, OptState<Model>, Tensor) {
    let loss_of = |p: Model| {
        let mut total = Tensor::scalar(0.0, F32);
        for ((p, c), d) in flat(&p).into_iter().zip(flat(&c)).zip(flat(&d)) {
            let p = p.cast(F32);
            let axes: Vec<isize> = (0..p.rank() as isize).collect();
            total = total + (c * p * p * 0.5 + d * p).sum(&axes);
        }
        total
    };
    let (loss, grads) = value_and_grad(loss_of, params.clone());
    let (params, state) = opt.update(grads, state, params);
    (params, state, loss)
}

/// A model of `layers` layers (odd sizes) with values from `rng`.
fn model(rng: &mut Rng, layers: usize, dtype: DType, scale: f64, offset: f64) -> Model<HostTensor> {
    let mut t = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| offset + scale * rng.uniform(-1.0, 1.0))
            .collect();
        HostTensor::from_fn(TensorSpec::new(shape.to_vec(), dtype), |i| v[i])
    };
    Model {
        layers: (0..layers)
            .map(|i| Lin {
                w: t(&[3 + i, 5]),
                b: t(&[5]),
            })
            .collect(),
        norm: t(&[7]),
    }
}

fn leaves_f64(m: &Model<HostTensor>) -> Vec<Vec<f64>> {
    m.leaves().iter().map(|h| h.to_f64_vec()).collect()
}

/// The chain of `opt` on the reference's leaves: `params` updated in place,
/// `slots[k][leaf]` the statistics, `t` the 1-based step.
fn reference_step(
    opt: &Optimizer,
    paths: &[String],
    params: &mut [Vec<f64>],
    grads: &[Vec<f64>],
    slots: &mut [Vec<Vec<f64>>],
    t: u64,
    round: impl Fn(f64) -> f64,
) {
    let mut u: Vec<Vec<f64>> = grads.to_vec();
    let mut k = 0;
    for tr in opt.transforms() {
        match *tr {
            Transform::ClipByGlobalNorm(max) => {
                let norm = u.iter().flatten().map(|x| x * x).sum::<f64>().sqrt();
                let s = (max / norm.max(1e-30)).min(1.0);
                u.iter_mut().flatten().for_each(|x| *x *= s);
            }
            Transform::Adam { b1, b2, eps } => {
                for (l, ul) in u.iter_mut().enumerate() {
                    for (i, x) in ul.iter_mut().enumerate() {
                        let m = slots[k][l][i] * b1 + *x * (1.0 - b1);
                        let v = slots[k + 1][l][i] * b2 + *x * *x * (1.0 - b2);
                        slots[k][l][i] = m;
                        slots[k + 1][l][i] = v;
                        let mh = m / (1.0 - b1.powi(t as i32));
                        let vh = v / (1.0 - b2.powi(t as i32));
                        *x = mh / (vh.sqrt() + eps);
                    }
                }
            }
            Transform::Lion { b1, b2 } => {
                for (l, ul) in u.iter_mut().enumerate() {
                    for (i, x) in ul.iter_mut().enumerate() {
                        let m = slots[k][l][i];
                        let g = *x;
                        let c = m * b1 + g * (1.0 - b1);
                        *x = if c > 0.0 {
                            1.0
                        } else if c < 0.0 {
                            -1.0
                        } else {
                            0.0
                        };
                        slots[k][l][i] = m * b2 + g * (1.0 - b2);
                    }
                }
            }
            Transform::Momentum { beta, nesterov } => {
                for (l, ul) in u.iter_mut().enumerate() {
                    for (i, x) in ul.iter_mut().enumerate() {
                        let m = slots[k][l][i] * beta + *x;
                        slots[k][l][i] = m;
                        *x = if nesterov { *x + beta * m } else { m };
                    }
                }
            }
            Transform::WeightDecay { rate, ref mask } => {
                for (l, ul) in u.iter_mut().enumerate() {
                    if mask.matches(&paths[l]) {
                        for (i, x) in ul.iter_mut().enumerate() {
                            *x += rate * params[l][i];
                        }
                    }
                }
            }
            Transform::LearningRate(s) => {
                let lr = s.at(t);
                u.iter_mut().flatten().for_each(|x| *x *= lr);
            }
        }
        k += tr.slots();
    }
    for (p, ul) in params.iter_mut().zip(&u) {
        for (x, d) in p.iter_mut().zip(ul) {
            *x = round(*x - d);
        }
    }
}

/// Runs `steps` steps of `opt` on the device (state donated) and in the
/// reference; compares the parameters and every slot after each step.
fn check(opt: &Optimizer, dtype: DType, steps: u64, seed: u64) {
    let dev = dev();
    let mut rng = Rng::new(seed);
    let host = model(&mut rng, 2, dtype, 1.0, 0.0);
    let c = model(&mut rng, 2, F32, 0.5, 1.0);
    let d = model(&mut rng, 2, F32, 1.0, 0.0);
    let paths = host.leaf_paths();
    let mut ref_p = leaves_f64(&host);
    let (cs, ds) = (leaves_f64(&c), leaves_f64(&d));
    let mut ref_slots: Vec<Vec<Vec<f64>>> = (0..opt.num_slots())
        .map(|_| ref_p.iter().map(|l| vec![0.0; l.len()]).collect())
        .collect();
    let state = opt.init(&host).unwrap();
    assert_eq!(state.slots.len(), opt.num_slots());
    let mut params = tree::to_device(&dev, &host).unwrap();
    let mut state = tree::to_device(&dev, &state).unwrap();
    let (cd, dd) = (
        tree::to_device(&dev, &c).unwrap(),
        tree::to_device(&dev, &d).unwrap(),
    );
    let round = |x: f64| {
        if dtype == BF16 {
            tessel::half::bf16::from_f64(x).to_f64()
        } else {
            x
        }
    };
    for t in 1..=steps {
        let grads: Vec<Vec<f64>> = ref_p
            .iter()
            .zip(&cs)
            .zip(&ds)
            .map(|((p, c), d)| {
                p.iter()
                    .zip(c)
                    .zip(d)
                    .map(|((p, c), d)| round(c * p + d))
                    .collect()
            })
            .collect();
        let (p, s, _loss) = step::call(&dev, &params, &state, &cd, &dd, opt.clone()).unwrap();
        assert!(
            params.layers[0].w.is_deleted().unwrap(),
            "the parameters are donated"
        );
        assert!(state.count.is_deleted().unwrap(), "the state is donated");
        (params, state) = (p, s);
        reference_step(opt, &paths, &mut ref_p, &grads, &mut ref_slots, t, round);
        let got = leaves_f64(&tree::to_host(&params).unwrap());
        for (l, (g, r)) in got.iter().zip(&ref_p).enumerate() {
            for (i, (g, r)) in g.iter().zip(r).enumerate() {
                let tol = if dtype == BF16 {
                    r.abs() * 2f64.powi(-7) + 1e-6
                } else {
                    2e-5 * r.abs() + 1e-5
                };
                assert!(
                    (g - r).abs() <= tol,
                    "{opt:?} step {t} {}[{i}]: {g} vs {r}",
                    paths[l]
                );
            }
        }
        let host_state = tree::to_host(&state).unwrap();
        assert_eq!(host_state.count.to_vec::<i32>().unwrap(), vec![t as i32]);
        for (k, slot) in host_state.slots.iter().enumerate() {
            for (l, s) in leaves_f64(slot).iter().enumerate() {
                for (i, (g, r)) in s.iter().zip(&ref_slots[k][l]).enumerate() {
                    assert!(
                        (g - r).abs() <= 1e-4 * r.abs() + 1e-6,
                        "slot {k} {}[{i}]: {g} vs {r}",
                        paths[l]
                    );
                }
            }
        }
    }
}

#[test]
fn adamw_with_a_decay_mask_and_warmup_cosine_matches_the_reference() {
    let opt = Optimizer::adamw(
        Schedule::warmup_cosine(0.05, 2, 6, 0.001),
        0.1,
        PathMask::except(["norm", "*.b"]),
    );
    check(&opt, F32, 6, 1);
}

#[test]
fn sgd_plain_heavy_ball_and_nesterov_match_the_reference() {
    check(
        &Optimizer::sgd(Schedule::Constant(0.1), 0.0, false),
        F32,
        6,
        2,
    );
    check(
        &Optimizer::sgd(
            Schedule::Linear {
                init: 0.1,
                end: 0.01,
                steps: 4,
            },
            0.9,
            false,
        ),
        F32,
        6,
        3,
    );
    check(
        &Optimizer::sgd(
            Schedule::Cosine {
                init: 0.1,
                end: 0.0,
                steps: 5,
            },
            0.9,
            true,
        ),
        F32,
        6,
        4,
    );
}

#[test]
fn lion_and_clipped_chains_match_the_reference() {
    check(
        &Optimizer::lion(
            Schedule::warmup_constant(0.01, 3),
            0.5,
            PathMask::only(["layers.*.w"]),
        ),
        F32,
        6,
        5,
    );
    let clipped =
        Optimizer::adamw(Schedule::Constant(0.01), 0.0, PathMask::All).clip_by_global_norm(0.5);
    check(&clipped, F32, 6, 6);
    let custom = Optimizer::chain([
        Transform::ClipByGlobalNorm(1.0),
        Transform::Momentum {
            beta: 0.5,
            nesterov: false,
        },
        Transform::Adam {
            b1: 0.8,
            b2: 0.9,
            eps: 1e-6,
        },
        Transform::LearningRate(Schedule::Warmup {
            peak: 0.02,
            warmup: 2,
            then: After::Linear { end: 0.0, steps: 8 },
        }),
    ]);
    check(&custom, F32, 6, 7);
}

#[test]
fn bf16_parameters_keep_f32_statistics() {
    let opt = Optimizer::adamw(Schedule::Constant(0.01), 0.01, PathMask::All);
    let state = opt
        .init(&model(&mut Rng::new(8), 1, BF16, 1.0, 0.0))
        .unwrap();
    assert_eq!(state.slots[0].norm.dtype(), F32);
    check(&opt, BF16, 5, 8);
}

#[test]
fn schedules_on_the_host_and_in_the_program_agree() {
    #[cpu_kernel]
    fn rates(t: Tensor, s: ScheduleArg) -> Tensor {
        s.0.traced(t)
    }
    #[derive(Clone, Debug)]
    struct ScheduleArg(Schedule);
    impl StaticArg for ScheduleArg {
        fn write_key(&self, key: &mut StaticKey) {
            key.push(&format!("{:?}", self.0));
        }
    }
    let dev = dev();
    let ts: Vec<f32> = (0..30).map(|t| t as f32).collect();
    let th = HostTensor::from_vec(ts.clone(), [30]).unwrap();
    for s in [
        Schedule::Constant(0.3),
        Schedule::Linear {
            init: 1.0,
            end: 0.1,
            steps: 10,
        },
        Schedule::Cosine {
            init: 1.0,
            end: 0.0,
            steps: 20,
        },
        Schedule::warmup_cosine(2.0, 5, 25, 0.2),
        Schedule::warmup_constant(1.0, 7),
        Schedule::Warmup {
            peak: 1.0,
            warmup: 0,
            then: After::Linear { end: 0.5, steps: 0 },
        },
    ] {
        let got = rates::run(&dev, &th, ScheduleArg(s))
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (t, g) in got.iter().enumerate() {
            let r = s.at(t as u64);
            assert!(
                (*g as f64 - r).abs() <= 1e-6 * r.abs().max(1.0),
                "{s:?} at {t}: {g} vs {r}"
            );
        }
    }
}

#[test]
fn a_state_of_the_wrong_layout_is_a_trace_error_naming_the_leaf() {
    let dev = dev();
    let mut rng = Rng::new(9);
    let host = model(&mut rng, 2, F32, 1.0, 0.0);
    let c = model(&mut rng, 2, F32, 1.0, 0.0);
    let sgd = Optimizer::sgd(Schedule::Constant(0.1), 0.9, false);
    let adam = Optimizer::adamw(Schedule::Constant(0.1), 0.0, PathMask::All);
    let state = sgd.init(&host).unwrap();
    let e = step::run(&dev, &host, &state, &c, &c, adam.clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 slot trees") && e.contains("keeps 2"), "{e}");
    let mut state = adam.init(&host).unwrap();
    state.slots[1].layers[1].b = HostTensor::zeros(TensorSpec::new([4], F32));
    let e = step::run(&dev, &host, &state, &c, &c, adam)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("slots.1.layers.1.b: expected f32[5], got f32[4]"),
        "{e}"
    );
}

/// Parameters and optimizer state on the host.
type HostState = (Model<HostTensor>, OptState<Model<HostTensor>, HostTensor>);

/// Runs `steps` AdamW steps from `(params, state)` on the device; returns
/// the losses' bits and the final host state.
fn train(
    params: &Model<HostTensor>,
    state: &OptState<Model<HostTensor>, HostTensor>,
    steps: usize,
) -> (Vec<u32>, HostState) {
    let dev = dev();
    let opt = resume_optimizer();
    let mut rng = Rng::new(11);
    let c = tree::to_device(&dev, &model(&mut rng, 2, F32, 0.5, 1.0)).unwrap();
    let d = tree::to_device(&dev, &model(&mut rng, 2, F32, 1.0, 0.0)).unwrap();
    let mut p = tree::to_device(&dev, params).unwrap();
    let mut s = tree::to_device(&dev, state).unwrap();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (np, ns, loss) = step::call(&dev, &p, &s, &c, &d, opt.clone()).unwrap();
        (p, s) = (np, ns);
        losses.push(loss.to_host().unwrap().to_vec::<f32>().unwrap()[0].to_bits());
    }
    (
        losses,
        (tree::to_host(&p).unwrap(), tree::to_host(&s).unwrap()),
    )
}

fn resume_optimizer() -> Optimizer {
    Optimizer::adamw(
        Schedule::warmup_cosine(0.05, 3, 12, 0.0),
        0.1,
        PathMask::except(["norm"]),
    )
    .clip_by_global_norm(1.0)
}

const RESUME_VAR: &str = "TESSEL_TEST_RESUME_FROM";

#[test]
fn resuming_from_a_checkpoint_in_a_new_process_is_bit_exact() {
    let host = model(&mut Rng::new(10), 2, F32, 1.0, 0.0);
    let state = resume_optimizer().init(&host).unwrap();
    let (all, _) = train(&host, &state, 10);
    let (first, saved) = train(&host, &state, 4);
    assert_eq!(first, all[..4]);
    let dir = std::env::temp_dir().join(format!("tessel-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.safetensors");
    tree::save(&path, &saved).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "resume_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RESUME_VAR, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("losses:").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("the child prints its losses: {stdout}"));
    let rest: Vec<u32> = line
        .split_whitespace()
        .map(|b| b.parse().unwrap())
        .collect();
    assert_eq!(rest, all[4..], "the resumed run's losses, bit for bit");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The second half of `resuming_from_a_checkpoint_in_a_new_process_is_bit_exact`,
/// run by it in a new process: loads the state and trains 6 more steps.
#[test]
#[ignore = "run by resuming_from_a_checkpoint_in_a_new_process_is_bit_exact"]
fn resume_child() {
    let path = std::env::var(RESUME_VAR).expect("set by the parent test");
    let like = model(&mut Rng::new(10), 2, F32, 1.0, 0.0);
    let like = (
        tree::specs(&like),
        tree::specs(&resume_optimizer().init(&like).unwrap()),
    );
    let (params, state) = tessel::host::checkpoint::Checkpoint::load(&path)
        .unwrap()
        .take_tree_all(&like)
        .unwrap();
    let (losses, _) = train(&params, &state, 6);
    let bits: Vec<String> = losses.iter().map(|b| b.to_string()).collect();
    println!("losses: {}", bits.join(" "));
}

#[test]
fn tree_checkpoints_round_trip_and_name_what_does_not_fit() {
    let host = model(&mut Rng::new(12), 3, BF16, 1.0, 0.0);
    let state = resume_optimizer().init(&host).unwrap();
    let dir = std::env::temp_dir().join(format!("tessel-tree-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.safetensors");
    tree::save(&path, &(host.clone(), state.clone())).unwrap();
    let ck = tessel::host::checkpoint::Checkpoint::load(&path).unwrap();
    assert!(ck.tensors.contains_key("0.layers.2.w") && ck.tensors.contains_key("1.slots.1.norm"));
    let (p, s) = ck
        .clone()
        .take_tree_all(&(tree::specs(&host), tree::specs(&state)))
        .unwrap();
    for (a, b) in host.leaves().iter().zip(p.leaves()) {
        assert_eq!(a.as_bytes(), b.as_bytes());
    }
    assert_eq!(s.count.to_vec::<i32>().unwrap(), vec![0]);
    // Two layers asked of a three-layer file: unexpected keys; a wrong shape: named.
    let mut small = model(&mut Rng::new(12), 2, BF16, 1.0, 0.0);
    let e = ck
        .clone()
        .take_tree_all(&(tree::specs(&small), tree::specs(&state)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unexpected keys: 0.layers.2.b, 0.layers.2.w"),
        "{e}"
    );
    small.norm = HostTensor::zeros(TensorSpec::new([8], BF16));
    let e = ck
        .clone()
        .take_tree(&(tree::specs(&small), tree::specs(&state)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("0.norm: expected bf16[8], got bf16[7]"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `step` written over one `TrainState`.
#[cpu_kernel(donate(state))]
fn train_state_step(
    state: TrainState<Model>,
    c: Model,
    d: Model,
    opt: Optimizer,
) -> (TrainState<Model>, Tensor) {
    let loss_of = |p: Model| {
        let mut total = Tensor::scalar(0.0, F32);
        for ((p, c), d) in flat(&p).into_iter().zip(flat(&c)).zip(flat(&d)) {
            let axes: Vec<isize> = (0..p.rank() as isize).collect();
            total = total + (c * p * p * 0.5 + d * p).sum(&axes);
        }
        total
    };
    let (loss, grads) = value_and_grad(loss_of, state.params.clone());
    (state.apply_gradients(&opt, grads), loss)
}

/// `TrainState::create` is the parameters and `opt.init` of them, named
/// `params.…` and `opt.…`; `apply_gradients` is `opt.update`, bit for bit.
#[test]
fn train_state_is_params_and_optimizer_state() {
    let dev = dev();
    let opt = Optimizer::adamw(
        Schedule::warmup_cosine(1e-2, 2, 6, 1e-3),
        0.01,
        PathMask::except(["*norm*"]),
    )
    .clip_by_global_norm(1.0);
    let mut rng = Rng::new(11);
    let host = model(&mut rng, 2, F32, 1.0, 0.0);
    let (c, d) = (
        model(&mut rng, 2, F32, 0.5, 1.0),
        model(&mut rng, 2, F32, 1.0, 0.0),
    );
    let created = TrainState::create(host.clone(), &opt).unwrap();
    let paths = created.leaf_paths();
    assert_eq!(paths[0], "params.layers.0.w");
    assert!(paths.contains(&"opt.count".to_string()), "{paths:?}");
    assert!(paths.contains(&"opt.slots.1.norm".to_string()), "{paths:?}");
    assert_eq!(paths.len(), 5 + 1 + 5 * opt.num_slots());
    let (cd, dd) = (
        tree::to_device(&dev, &c).unwrap(),
        tree::to_device(&dev, &d).unwrap(),
    );
    let mut state = tree::to_device(&dev, &created).unwrap();
    let mut params = tree::to_device(&dev, &host).unwrap();
    let mut opt_state = tree::to_device(&dev, &opt.init(&host).unwrap()).unwrap();
    for _ in 0..4 {
        let (next, l1) = train_state_step::call(&dev, &state, &cd, &dd, opt.clone()).unwrap();
        let (p, s, l2) = step::call(&dev, &params, &opt_state, &cd, &dd, opt.clone()).unwrap();
        assert_eq!(l1.to_host().unwrap(), l2.to_host().unwrap());
        (state, params, opt_state) = (next, p, s);
    }
    let (a, b) = (
        tree::to_host(&state).unwrap(),
        tree::to_host(&params).unwrap(),
    );
    for (x, y) in a.params.leaves().into_iter().zip(b.leaves()) {
        assert_eq!(x, y);
    }
    assert_eq!(a.opt.count, tree::to_host(&opt_state).unwrap().count);
}
