//! `vmap`: every op's batching rule against a Rust loop over the examples
//! (the loop slices each example, calls the same function and stacks the
//! results), in one kernel, run on the CPU plugin and the interpreter;
//! values and gradients, both orders of `vmap` and `grad`, nested `vmap`,
//! loops and conditionals with batched predicates, and the errors.

mod common;
mod interp_common;

use common::*;
use interp_common::both_n;
use tessel_dsl::autodiff::grad;
use tessel_dsl::ops::{GatherDims, ScatterCombine, ScatterDims};
use tessel_dsl::vmap::{vmap, vmap_with, Axes};
use tessel_dsl::{
    concat, cond, fori_loop, scan, while_loop, HostTensor, Tensor, TensorSpec, F32, S32,
};

/// Example `i` of `t` along `axis` (or `t` itself, shared by all).
fn example(t: Tensor, axis: Option<isize>, i: usize) -> Tensor {
    match axis {
        None => t,
        Some(a) => {
            let a = if a < 0 { a + t.rank() as isize } else { a };
            t.slice_axis(a, i, i + 1).squeeze(a)
        }
    }
}

/// Every float result weighted elementwise by `0.25, 0.5, .., 1.25`
/// (cycling) and summed: a scalar whose gradient reaches every float
/// result with a different, exactly representable weight per element.
fn total(ys: Vec<Tensor>) -> Tensor {
    ys.into_iter()
        .filter(|y| y.dtype().is_float())
        .map(|y| {
            let flat = y.reshape(&[-1]);
            let n = flat.shape()[0];
            let w = (Tensor::iota([n], 0, S32) % 5 + 1).cast(y.dtype()) * 0.25;
            (flat * w).sum(&[0]).cast(F32)
        })
        .fold(Tensor::scalar(0.0, F32), |a, b| a + b)
}

/// Runs `f` vmapped over `args` (batch axes `axes`, results at axis 0)
/// and as a loop over the examples, on the plugin and the interpreter
/// (compared with each other), and compares the two within `tol` of the
/// largest magnitude (0 for exact): the results, and the gradients of
/// [`total`] of the results with respect to every float argument.
#[track_caller]
fn matches_loop(
    f: impl Fn(&[Tensor]) -> Vec<Tensor> + Copy,
    args: &[HostTensor],
    axes: &[Option<isize>],
    tol: f64,
) {
    let size = args
        .iter()
        .zip(axes)
        .find_map(|(h, a)| {
            a.map(|a| {
                h.shape()[if a < 0 {
                    (a + h.shape().len() as isize) as usize
                } else {
                    a as usize
                }]
            })
        })
        .expect("a batched argument");
    let axes_v = axes.to_vec();
    let results = std::rc::Rc::new(std::cell::Cell::new(0));
    let count = results.clone();
    let e = both_n(
        move |a: &[Tensor]| {
            let batched_f = |a: &[Tensor]| {
                vmap_with(
                    |xs: Vec<Tensor>| f(&xs),
                    a.to_vec(),
                    &Axes::new().inputs(axes_v.clone()),
                )
            };
            let looped_f = |a: &[Tensor]| {
                let mut per: Vec<Vec<Tensor>> = Vec::new();
                for i in 0..size {
                    let xs: Vec<Tensor> = a
                        .iter()
                        .zip(&axes_v)
                        .map(|(t, ax)| example(*t, *ax, i))
                        .collect();
                    for (k, y) in f(&xs).into_iter().enumerate() {
                        if per.len() <= k {
                            per.push(Vec::new());
                        }
                        per[k].push(y.expand_dims(0));
                    }
                }
                per.iter().map(|ys| concat(ys, 0)).collect::<Vec<Tensor>>()
            };
            // The float arguments, differentiated; the others as they are.
            let floats: Vec<usize> = (0..a.len()).filter(|&i| a[i].dtype().is_float()).collect();
            let with = |fl: &[Tensor]| {
                let mut args = a.to_vec();
                for (j, &i) in floats.iter().enumerate() {
                    args[i] = fl[j];
                }
                args
            };
            let primals: Vec<Tensor> = floats.iter().map(|&i| a[i]).collect();
            let g_batched = grad(
                |fl: Vec<Tensor>| total(batched_f(&with(&fl))),
                primals.clone(),
            );
            let g_looped = grad(|fl: Vec<Tensor>| total(looped_f(&with(&fl))), primals);
            let mut out = batched_f(a);
            count.set(out.len());
            out.extend(g_batched);
            out.extend(looped_f(a));
            out.extend(g_looped);
            out
        },
        args,
        64,
    );
    let (n, results) = (e.outputs.len() / 2, results.get());
    for k in 0..n {
        let (got, want) = (&e.outputs[k], &e.outputs[n + k]);
        // Gradients sum terms in another order over the batch than the loop.
        let tol = if k >= results { tol.max(1e-6) } else { tol };
        assert_eq!(got.spec(), want.spec(), "result {k}: type");
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (j, (x, y)) in g.iter().zip(&w).enumerate() {
            let same = x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * scale;
            assert!(
                same,
                "result {k}[{j}] (results, then gradients): vmap {x} vs loop {y}"
            );
        }
    }
}

fn rand(seed: u64, shape: &[usize]) -> HostTensor {
    random(&mut Rng::new(seed), shape, F32, -2.0, 2.0)
}

fn ints(values: &[i32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(values.to_vec(), shape.to_vec()).unwrap()
}

#[test]
fn elementwise_ops_with_shared_and_scalar_operands() {
    let (x, y, w) = (rand(1, &[5, 3]), rand(2, &[5, 3]), rand(3, &[3]));
    let f = |a: &[Tensor]| {
        let (x, y, w) = (a[0], a[1], a[2]);
        vec![
            (x * y + w).tanh(),
            x.gt(y).select(x, w),
            x.clamp(-1.0, 1.0) - w.exp(),
            x.max(&[0]) * 2.0,
            (x.sum(&[0]) + 1.0).select_zero_guard(),
        ]
    };
    matches_loop(f, &[x, y, w], &[Some(0), Some(0), None], 0.0);
}

trait Guard {
    fn select_zero_guard(self) -> Tensor;
}
impl Guard for Tensor {
    /// A scalar select on a scalar predicate.
    fn select_zero_guard(self) -> Tensor {
        self.gt(0.0).select(self, 0.0)
    }
}

#[test]
fn shape_ops_and_batch_axes_other_than_zero() {
    let (x, y) = (rand(4, &[2, 3, 4]), rand(5, &[4, 3]));
    let f = |a: &[Tensor]| {
        let (x, y) = (a[0], a[1]);
        vec![
            x.reshape(&[4, 2]).transpose(&[1, 0]),
            x.broadcast_in_dim([5, 2, 4], &[1, 2]),
            x.slice_axis(1, 1, 4),
            concat(&[x, x * 2.0], 0),
            x.pad(0.5, &[1, 0], &[0, 2], &[0, 1]),
            x.expand_dims(0).squeeze(0) + y.broadcast_in_dim([2, 4], &[1]),
        ]
    };
    // x batched along its axis 1, y along its last.
    matches_loop(f, &[x, y], &[Some(1), Some(-1)], 0.0);
}

#[test]
fn pad_with_a_batched_padding_value() {
    let (x, v) = (rand(6, &[3, 4]), rand(7, &[3]));
    let f = |a: &[Tensor]| vec![a[0].pad(a[1], &[2], &[-1], &[1])];
    matches_loop(f, &[x, v], &[Some(0), Some(0)], 0.0);
}

#[test]
fn reductions_argmax_softmax() {
    let x = rand(8, &[4, 5, 6]);
    let f = |a: &[Tensor]| {
        let x = a[0];
        vec![
            x.sum(&[1]),
            x.max(&[0, 1]),
            x.argmax(1).cast(F32),
            x.softmax(-1),
            x.mean(&[0]),
        ]
    };
    matches_loop(f, &[x], &[Some(2)], 1e-6);
}

#[test]
fn contractions_with_either_or_both_operands_batched() {
    let (a, b, c) = (rand(9, &[3, 4, 5]), rand(10, &[3, 5, 2]), rand(11, &[5, 2]));
    let f = |t: &[Tensor]| {
        vec![
            t[0].matmul(t[1]),
            t[0].matmul(t[2]),
            t[2].t().matmul(t[0].t()),
        ]
    };
    matches_loop(
        f,
        &[a.clone(), b, c.clone()],
        &[Some(0), Some(0), None],
        1e-6,
    );
    // Only the right operand batched.
    let f = |t: &[Tensor]| vec![t[0].matmul(t[1])];
    matches_loop(
        f,
        &[rand(12, &[4, 5]), rand(13, &[3, 5, 2])],
        &[None, Some(0)],
        1e-6,
    );
    // Operands with batch axes of their own.
    let f = |t: &[Tensor]| vec![t[0].matmul(t[1])];
    matches_loop(
        f,
        &[rand(14, &[6, 2, 3, 4]), rand(15, &[2, 4, 3])],
        &[Some(0), None],
        1e-6,
    );
}

#[test]
fn dynamic_slices_at_shared_and_batched_starts() {
    let (x, i, u) = (
        rand(16, &[4, 6, 5]),
        ints(&[0, 3, 9, -2], &[4]),
        rand(17, &[4, 2, 5]),
    );
    let f = |a: &[Tensor]| {
        let (x, i, u) = (a[0], a[1], a[2]);
        let zero = Tensor::scalar(0.0, S32);
        let one = Tensor::scalar(1.0, S32);
        vec![
            x.dynamic_slice(&[i, zero], &[2, 3]),
            x.dynamic_slice(&[one, one], &[3, 2]),
            x.dynamic_update_slice(u, &[i, zero]),
            x.dynamic_update_slice(u, &[one, zero]),
        ]
    };
    matches_loop(f, &[x, i, u], &[Some(0), Some(0), Some(0)], 0.0);
    // Starts batched, operand shared.
    let f = |a: &[Tensor]| vec![a[0].dynamic_slice(&[a[1], Tensor::scalar(1.0, S32)], &[2, 2])];
    matches_loop(
        f,
        &[rand(18, &[5, 4]), ints(&[0, 1, 2, 7], &[4])],
        &[None, Some(0)],
        0.0,
    );
}

#[test]
fn gathers_and_scatters_with_any_operand_batched() {
    let (x, idx) = (
        rand(19, &[3, 7, 4]),
        ints(&[0, 6, 2, 2, 5, 1, 3, 3, 0], &[3, 3]),
    );
    let f = |a: &[Tensor]| vec![a[0].take(a[1], 0)];
    for axes in [[Some(0), Some(0)], [Some(0), None], [None, Some(0)]] {
        let xs = if axes[0].is_some() {
            x.clone()
        } else {
            rand(20, &[7, 4])
        };
        let is = if axes[1].is_some() {
            idx.clone()
        } else {
            ints(&[4, 0, 6], &[3])
        };
        matches_loop(f, &[xs, is], &axes, 0.0);
    }
    // A scatter-add of rows, every operand batched or not.
    let scatter = |a: &[Tensor]| {
        let dims = ScatterDims {
            update_window_dims: vec![1],
            inserted_window_dims: vec![0],
            scatter_dims_to_operand_dims: vec![0],
            index_vector_dim: 1,
        };
        vec![a[0].scatter(a[1].reshape(&[-1, 1]), a[2], dims, ScatterCombine::Add)]
    };
    let (op, ix, up) = (
        rand(21, &[3, 5, 2]),
        ints(&[0, 4, 4, 1, 1, 1, 3, 2, 0], &[3, 3]),
        rand(22, &[3, 3, 2]),
    );
    for axes in [
        [Some(0), Some(0), Some(0)],
        [None, Some(0), Some(0)],
        [Some(0), None, Some(0)],
        [Some(0), Some(0), None],
    ] {
        let pick = |t: &HostTensor, b: bool, seed: u64| match b {
            true => t.clone(),
            false => match t.dtype() {
                S32 => ints(&[2, 2, 0], &[3]),
                _ => rand(seed, &t.shape()[1..]),
            },
        };
        let args = [
            pick(&op, axes[0].is_some(), 23),
            pick(&ix, axes[1].is_some(), 0),
            pick(&up, axes[2].is_some(), 24),
        ];
        matches_loop(scatter, &args, &axes, 1e-6);
    }
    // A gather whose index vectors are explicit.
    let g = |a: &[Tensor]| {
        let dims = GatherDims {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0, 1],
            index_vector_dim: 1,
        };
        vec![a[0].gather(a[1], dims, &[1, 2])]
    };
    matches_loop(
        g,
        &[
            rand(25, &[2, 4, 5]),
            ints(&[0, 1, 3, 2, 1, 3, 0, 0], &[2, 2, 2]),
        ],
        &[Some(0), Some(0)],
        0.0,
    );
}

#[test]
fn sorts_and_top_k() {
    let x = rand(26, &[3, 4, 6]);
    let f = |a: &[Tensor]| {
        let (v, i) = a[0].top_k(2);
        vec![
            a[0].sort(-1, true),
            a[0].argsort(0, false).cast(F32),
            v,
            i.cast(F32),
        ]
    };
    matches_loop(f, &[x], &[Some(0)], 0.0);
}

#[test]
fn loops_with_shared_and_batched_conditions() {
    let (x, n) = (rand(27, &[4, 3]), ints(&[0, 2, 5, 1], &[4]));
    let f = |a: &[Tensor]| {
        let (x, n) = (a[0], a[1]);
        // A trip count that differs between examples.
        let (_, y) = while_loop(
            (Tensor::scalar(0.0, S32), x),
            |(i, _)| i.lt(n),
            |(i, y)| (i + 1, y * 1.5 + 0.25),
        );
        // A counted loop over a shared bound, carrying a batched value.
        let z = fori_loop(0, 3, x, |i, c| c * 0.5 + i.cast(F32));
        // A loop that only reads a batched value.
        let w = fori_loop(0, 2, Tensor::zeros([3], F32), |_, c| c + x);
        vec![y, z, w]
    };
    matches_loop(f, &[x, n], &[Some(0), Some(0)], 1e-6);
}

#[test]
fn conditionals_on_shared_and_batched_predicates() {
    let (x, p) = (rand(28, &[5, 3]), rand(29, &[5]));
    let f = |a: &[Tensor]| {
        let (x, p) = (a[0], a[1]);
        let per_example = cond(p.gt(0.0), || x * 2.0, || x - 1.0);
        let shared = cond(Tensor::scalar(1.0, F32).gt(0.0), || x.exp(), || x);
        vec![per_example, shared]
    };
    matches_loop(f, &[x, p], &[Some(0), Some(0)], 0.0);
}

#[test]
fn scan_over_each_example() {
    let xs = rand(30, &[3, 6, 2]);
    let f = |a: &[Tensor]| {
        let (h, ys) = scan(Tensor::zeros([2], F32), a[0], |h: Tensor, x: Tensor| {
            let h = (h * 0.9 + x).tanh();
            (h, h * 2.0)
        });
        vec![h, ys]
    };
    matches_loop(f, &[xs], &[Some(0)], 1e-6);
}

#[test]
fn per_example_gradients_and_gradients_of_a_batch() {
    let (xs, w) = (rand(31, &[6, 3]), rand(32, &[3, 2]));
    let loss = |w: Tensor, x: Tensor| x.reshape(&[1, 3]).matmul(w).tanh().square().sum(&[0, 1]);
    // vmap(grad): one gradient per example.
    let f = move |a: &[Tensor]| vec![grad(|w: Tensor| loss(w, a[1]), a[0])];
    matches_loop(f, &[w.clone(), xs.clone()], &[None, Some(0)], 1e-6);
    // grad(vmap): the gradient of the batch's summed loss, against the
    // sum of per-example gradients.
    let out = run(
        move |a: &[Tensor]| {
            let batch = grad(
                |w: Tensor| vmap_with(|x: Tensor| loss(w, x), a[1], &Axes::new()).sum(&[0]),
                a[0],
            );
            let each: Vec<Tensor> = (0..6)
                .map(|i| grad(|w: Tensor| loss(w, example(a[1], Some(0), i)), a[0]))
                .collect();
            let summed = each.into_iter().reduce(|s, g| s + g).unwrap();
            (batch, summed)
        },
        &[&w, &xs],
    );
    assert_close(&out[0], &out[1].to_f64_vec(), Class::Simple, "grad of vmap");
}

#[test]
fn nested_vmap() {
    let (x, y) = (rand(33, &[3, 4, 5]), rand(34, &[4, 5]));
    let f = |a: &[Tensor]| {
        let y = a[1];
        vec![vmap(
            |(r, s): (Tensor, Tensor)| (r * s).sum(&[0]),
            (a[0], y),
        )]
    };
    matches_loop(f, &[x, y], &[Some(0), None], 1e-6);
}

#[test]
fn results_at_other_axes_and_shared_results() {
    let x = rand(35, &[4, 3]);
    let out = run(
        |a: &[Tensor]| {
            let axes = Axes::new().outputs([Some(-1), Some(0), None]);
            let (y, z, c) = vmap_with(
                |x: Tensor| (x * 2.0, Tensor::ones([2], F32), Tensor::scalar(7.0, F32)),
                a[0],
                &axes,
            );
            (y, z, c, a[0].t() * 2.0)
        },
        &[&x],
    );
    assert_eq!(out[0].shape(), &[3, 4]);
    assert_eq!(out[0].to_f64_vec(), out[3].to_f64_vec());
    assert_eq!(out[1].shape(), &[4, 2]);
    assert_eq!(out[2].to_f64_vec(), vec![7.0]);
}

#[test]
fn misuse_is_a_kernel_error_naming_vmap() {
    let specs = [spec(&[4, 3], F32), spec(&[5, 3], F32)];
    let e = trace_error(
        |a| vmap(|(x, y): (Tensor, Tensor)| x + y, (a[0], a[1])),
        &specs,
    );
    assert_eq!(e.op, "vmap");
    assert!(e.message.contains("batch axes of different extents"), "{e}");
    let e = trace_error(
        |a| vmap_with(|x: Tensor| x, a[0], &Axes::new().inputs([Some(2)])),
        &specs[..1],
    );
    assert!(
        e.message
            .contains("batch axis 2 is out of range for argument 0 (f32[4,3])"),
        "{e}"
    );
    let e = trace_error(
        |a| vmap_with(|x: Tensor| x * 2.0, a[0], &Axes::new().outputs([None])),
        &specs[..1],
    );
    assert!(
        e.message
            .contains("result 0 differs between examples but its batch axis is None"),
        "{e}"
    );
    let e = trace_error(
        |a| vmap_with(|x: Tensor| x, a[0], &Axes::new().inputs([None])),
        &specs[..1],
    );
    assert!(e.message.contains("no argument has a batch axis"), "{e}");
    let e = trace_error(
        |a| {
            vmap_with(
                |(x, _): (Tensor, Tensor)| x,
                (a[0], a[1]),
                &Axes::new().inputs([Some(0), None, None]),
            )
        },
        &specs,
    );
    assert!(
        e.message
            .contains("3 argument axes given for 2 argument tensors"),
        "{e}"
    );
    // An error inside the function names the op at its line, with one example's shapes.
    let e = trace_error(|a| vmap(|x: Tensor| x.reshape(&[2, 2]), a[0]), &specs[..1]);
    assert_eq!(e.op, "reshape");
    assert!(e.operands.iter().all(|o| o == "f32[3]"), "{e}");
}

#[test]
fn one_example_traces_one_program_without_copies_per_example() {
    // The batched program holds one dot, not one per example.
    let text = lower(
        |a| {
            vmap_with(
                |x: Tensor| x.reshape(&[1, 8]).matmul(a[1]),
                a[0],
                &Axes::new(),
            )
        },
        &[TensorSpec::new([64, 8], F32), TensorSpec::new([8, 8], F32)],
    );
    // The one-example trace is dead code and is not printed.
    let dots = text.matches("stablehlo.dot_general").count();
    assert_eq!(dots, 1, "{dots} dots in\n{text}");
}

#[test]
fn gradients_of_their_own_survive_vmap() {
    use tessel_dsl::autodiff::{checkpoint, custom_vjp, stop_gradient, Remat};
    let (xs, w) = (rand(36, &[4, 3]), rand(37, &[3]));
    let out = run(
        |a: &[Tensor]| {
            let (xs, w) = (a[0], a[1]);
            // stop_gradient: d/dx (stop(x) * x) = x, not 2x.
            let stopped = grad(
                |xs: Tensor| vmap(|x: Tensor| (stop_gradient(x) * x).sum(&[0]), xs).sum(&[0]),
                xs,
            );
            // A custom backward that is not the true derivative (3 g w x
            // for y = w x): kept per example, and the shared w's cotangent
            // summed over the batch.
            let custom = |w: Tensor, xs: Tensor| {
                vmap_with(
                    |(w, x): (Tensor, Tensor)| {
                        let y = custom_vjp(
                            (w, x),
                            |(w, x)| (w * x, (w, x)),
                            |(w, x): &(Tensor, Tensor), g: Tensor| (g * *x * 3.0, g * *w * 3.0),
                        );
                        y.sum(&[0])
                    },
                    (w, xs),
                    &Axes::new().inputs([None, Some(0)]),
                )
                .sum(&[0])
            };
            let (dw, dx) = grad(|(w, xs): (Tensor, Tensor)| custom(w, xs), (w, xs));
            // A checkpointed function: the same gradient as without.
            let ck = grad(
                |xs: Tensor| {
                    vmap(
                        |x: Tensor| checkpoint(x, |x| (x.sin() * x).sum(&[0]), Remat::Nothing),
                        xs,
                    )
                    .sum(&[0])
                },
                xs,
            );
            let plain = grad(
                |xs: Tensor| vmap(|x: Tensor| (x.sin() * x).sum(&[0]), xs).sum(&[0]),
                xs,
            );
            (stopped, dw, dx, ck, plain)
        },
        &[&xs, &w],
    );
    let (x, wv) = (xs.to_f64_vec(), w.to_f64_vec());
    assert_close(&out[0], &x, Class::Simple, "stop_gradient");
    let dw: Vec<f64> = (0..3)
        .map(|j| (0..4).map(|i| 3.0 * x[i * 3 + j]).sum())
        .collect();
    assert_close(&out[1], &dw, Class::Simple, "custom backward, shared input");
    let dx: Vec<f64> = (0..12).map(|k| 3.0 * wv[k % 3]).collect();
    assert_close(
        &out[2],
        &dx,
        Class::Simple,
        "custom backward, batched input",
    );
    assert_close(&out[3], &out[4].to_f64_vec(), Class::Simple, "checkpoint");
}

#[test]
fn checks_inside_vmap_check_every_example() {
    use tessel_dsl::config::{CheckFamilies, KernelConfig};
    use tessel_dsl::kernel::Kernel;
    use tessel_dsl::{check, Error};
    // A written check: example 2 has a negative value.
    let k = Kernel::new(fresh_name("vmap_check"), |a: &[Tensor]| {
        vmap(
            |x: Tensor| {
                check(x.ge(0.0).all(&[0]), "negative row {}", &[x]);
                x.sqrt()
            },
            a[0],
        )
    });
    let rows = |v: Vec<f32>| HostTensor::from_vec(v, [4, 2]).unwrap();
    for dev in [device(), tessel_dsl::runtime::Device::interpreter()] {
        assert!(k
            .run(&dev, &[&rows(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])])
            .is_ok());
        match k.run(
            &dev,
            &[&rows(vec![1.0, 2.0, 3.0, 4.0, 5.0, -6.0, 7.0, -8.0])],
        ) {
            Err(Error::Check(c)) => assert_eq!(c.message, "negative row [5, -6]"),
            other => panic!("expected a check error, got {other:?}"),
        }
    }
    // An automatic index check on an op inside vmap: example 1's start is out of range.
    let k = Kernel::new(fresh_name("vmap_auto_check"), |a: &[Tensor]| {
        vmap(
            |(x, i): (Tensor, Tensor)| x.dynamic_slice(&[i], &[2]),
            (a[0], a[1]),
        )
    })
    .config(KernelConfig::default().with_checks(CheckFamilies {
        index: true,
        ..CheckFamilies::NONE
    }));
    let x = rand(38, &[3, 5]);
    assert!(k.run(&device(), &[&x, &ints(&[0, 3, 1], &[3])]).is_ok());
    match k.run(&device(), &[&x, &ints(&[0, 4, 1], &[3])]) {
        Err(Error::Check(c)) => assert!(c.message.contains("(4) out of range"), "{}", c.message),
        other => panic!("expected a check error, got {other:?}"),
    }
}
