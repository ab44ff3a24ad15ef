//! Loops (static and data-dependent trip counts, captured values, nesting),
//! branches, the optimization barrier and random masks.

use tessel_dsl::ops::random::uniform;
use tessel_dsl::{cond, fori_loop, optimization_barrier, while_loop, Tensor, F64, S32};
use tessel_testing::tensor;

use crate::fd::{check, data, eval};

#[test]
fn fori_loop_with_static_bounds_saves_carries() {
    let x = data(1, &[3], -1.0, 1.0);
    let w = data(2, &[3], -0.5, 0.5);
    // The carry is updated nonlinearly and uses a captured tensor (w) and the counter.
    check(
        "fori_static",
        |a| {
            let w = a[1];
            vec![fori_loop(0, 5, a[0], |i, x| {
                (x * w + i.cast(F64) * 0.1).sin() + x
            })]
        },
        &[x.clone(), w.clone()],
    );
    check(
        "fori_zero_trips",
        |a| vec![fori_loop(3, 3, a[0], |_, x| x.exp()) * a[1]],
        &[x, w],
    );
}

#[test]
fn a_tensor_carried_twice_or_carried_and_captured_gets_each_gradient_once() {
    // Found by the gradient fuzzer: with a static trip count, the loop's
    // unchanged positions share one value in the backward body when their
    // initial values are one tensor, and each got the sum of the gradients.
    let x = data(4, &[3], -1.0, 1.0);
    check(
        "fori_carried_and_captured",
        |a| {
            let x = a[0];
            let r = fori_loop(0, 2, (x * 3.0, x), |_, (_, c)| (c + x, c));
            vec![r.0, r.1]
        },
        std::slice::from_ref(&x),
    );
    check(
        "fori_captured_unused",
        |a| {
            let x = a[0];
            let r = fori_loop(0, 2, (x * 3.0, x), |_, (_, c)| {
                let _unused = x.cast(S32);
                (c, c)
            });
            vec![r.0, r.1]
        },
        std::slice::from_ref(&x),
    );
    check(
        "fori_carried_twice",
        |a| {
            let x = a[0];
            let r = fori_loop(0, 3, (x, x, x * 2.0), |_, (p, q, c)| (p, q, c * q));
            vec![r.0, r.1, r.2]
        },
        &[x],
    );
}

#[test]
fn while_loop_with_data_dependent_trip_count() {
    // Iterates until the norm exceeds a threshold read from the data: the
    // trip count depends on the values (and stays put under the tiny
    // finite-difference steps).
    let x = data(3, &[4], 0.2, 0.4);
    let t = tensor(&[5.0], &[], F64);
    check(
        "while_data",
        |a| {
            let limit = a[1];
            let (_, y, n) = while_loop(
                (Tensor::scalar(0.0, S32), a[0], Tensor::scalar(0.0, F64)),
                |(_, y, _)| y.square().sum(&[0]).lt(limit),
                |(i, y, n)| (i + 1, y * 1.3 + y.sin() * 0.1, n + y.sum(&[0])),
            );
            vec![y, n]
        },
        &[x.clone(), t],
    );
    // A traced upper bound.
    let n = tensor(&[4.0], &[], S32);
    check(
        "fori_traced_bound",
        |a| vec![fori_loop(0, a[1], a[0], |_, x| x.tanh() * 1.5)],
        &[x, n],
    );
}

#[test]
fn nested_loops_and_branches() {
    let x = data(4, &[2, 3], -1.0, 1.0);
    let w = data(5, &[3, 3], -0.5, 0.5);
    check(
        "nested",
        |a| {
            let w = a[1];
            let y = fori_loop(0, 3, a[0], |i, y| {
                let inner = fori_loop(0, i + 1, y, |_, z| (z.matmul(w)).tanh() + z * 0.5);
                cond(i.eq(1), || inner * 2.0, || inner.sin())
            });
            vec![y]
        },
        &[x, w],
    );
}

#[test]
fn cond_on_data() {
    let x = data(6, &[5], -1.0, 1.0);
    let c = data(7, &[5], -1.0, 1.0);
    for (name, s) in [("then", 1.0), ("else", -1.0)] {
        let flag = tensor(&[s], &[], F64);
        check(
            &format!("cond_{name}"),
            |a| {
                let c = a[1];
                vec![cond(a[2].gt(0.0), || (a[0] * c).exp(), || a[0].sin() + c)]
            },
            &[x.clone(), c.clone(), flag],
        );
    }
}

#[test]
fn barrier_and_dropout() {
    let x = data(8, &[4, 4], -1.0, 1.0);
    check(
        "barrier",
        |a| {
            let (p, q) = optimization_barrier((a[0].exp(), a[0] * 2.0));
            vec![p * q]
        },
        &[x.clone()],
    );
    check(
        "dropout",
        |a| vec![a[0].dropout(0.3, 7u32).square() + uniform(3u32, [4, 4], F64)],
        &[x],
    );
}

#[test]
fn static_loops_record_their_trip_count() {
    use tessel_dsl::ir::Op;
    use tessel_dsl::kernel::KernelConfig;
    let spec = tessel_dsl::TensorSpec::new([2], F64);
    let g = tessel_dsl::trace(
        "trips",
        &[("x".into(), spec)],
        KernelConfig::default(),
        |a| {
            let x = fori_loop(2, 7, a[0], |_, x| x * 2.0);
            fori_loop(0, Tensor::scalar(3.0, S32), x, |_, x| x + 1.0)
        },
    )
    .unwrap();
    let trips: Vec<Option<usize>> = g
        .nodes
        .iter()
        .filter_map(|n| match n.op {
            Op::While { trip_count, .. } => Some(trip_count),
            _ => None,
        })
        .collect();
    assert_eq!(trips, vec![Some(5), None]);
}

#[test]
fn scan_gradients_reach_the_initial_carry_the_rows_and_captured_tensors() {
    use tessel_dsl::{scan, scan_with, ScanOptions};
    let h0 = data(11, &[3], -1.0, 1.0);
    let w = data(12, &[3, 3], -0.5, 0.5);
    let xs = data(13, &[4, 3], -1.0, 1.0);
    let step = |w: Tensor, h: Tensor, x: Tensor| {
        let h2 = ((h.expand_dims(1) * w).sum(&[0]) + x).tanh();
        (h2, (h2 * h2).sum(&[0]))
    };
    for reverse in [false, true] {
        check(
            if reverse { "scan_reverse" } else { "scan" },
            move |a| {
                let w = a[1];
                let o = ScanOptions::new().reverse(reverse);
                let (h, ys) = scan_with(a[0], a[2], o, |h, x: Tensor| step(w, h, x));
                vec![h, ys]
            },
            &[h0.clone(), w.clone(), xs.clone()],
        );
    }
    // No xs: the length from the options, a captured tensor in the body.
    check(
        "scan_no_xs",
        move |a| {
            let w = a[1];
            let o = ScanOptions::new().length(3);
            let (h, ys) = scan_with(a[0], (), o, |h, ()| step(w, h, w.sum(&[0])));
            vec![h, ys]
        },
        &[h0.clone(), w.clone()],
    );
    // Two rows inputs, one of them also read outside the scan.
    check(
        "scan_two_xs",
        |a| {
            let (h, ys) = scan(
                a[0],
                (a[2], a[2] * 0.5),
                |h: Tensor, (x, z): (Tensor, Tensor)| (h * x.sin() + z, h.sum(&[0]) * z),
            );
            vec![h, ys, a[2].exp()]
        },
        &[h0, w, xs],
    );
}

#[test]
fn buffers_a_loop_only_writes_into_are_not_kept_and_still_get_their_gradient() {
    // Stacked outputs written by hand: the backward keeps no copy of them
    // per step, and stands a zero tensor in for their values.
    let x = data(21, &[2], -1.0, 1.0);
    let b = data(22, &[3, 2], -1.0, 1.0);
    let z = || Tensor::scalar(0.0, S32);
    check(
        "written_twice_per_step_from_one_initial_value",
        move |a| {
            // Two buffers start as the same tensor (a[1]); each step writes
            // two rows of the first (a chain of writes) and one of the second.
            let (_, p, q) = fori_loop(0, 3, (a[0], a[1], a[1]), |i, (h, p, q)| {
                let h = (h * 1.5).sin();
                let p = p.dynamic_update_slice(h.expand_dims(0), &[i, z()]);
                let p = p.dynamic_update_slice((h * h).expand_dims(0), &[(i + 1) % 3, z()]);
                (
                    h,
                    p,
                    q.dynamic_update_slice(h.exp().expand_dims(0), &[i, z()]),
                )
            });
            vec![p, q]
        },
        &[x.clone(), b.clone()],
    );
    check(
        "written_and_read",
        move |a| {
            // The buffer's rows are also read: its values are kept.
            let (h, p) = fori_loop(0, 3, (a[0], a[1]), |i, (h, p)| {
                let h = h + p.sum(&[0]) * 0.1;
                (h.sin(), p.dynamic_update_slice(h.expand_dims(0), &[i, z()]))
            });
            vec![h, p]
        },
        &[x, b],
    );
}

#[test]
fn nested_scans_and_the_second_derivative_of_a_scan() {
    use tessel_dsl::autodiff::grad;
    use tessel_dsl::scan;
    let x = data(31, &[3, 2], -1.0, 1.0);
    check(
        "scan_of_scan",
        |a| {
            // The outer scan runs over rows, the inner over a row's elements.
            let (c, ys) = scan(Tensor::scalar(0.5, F64), a[0], |c: Tensor, row: Tensor| {
                let (c2, inner) = scan(c, row, |d: Tensor, e: Tensor| {
                    let d = (d * e).sin() + d;
                    (d, d * e)
                });
                (c2, inner)
            });
            vec![c, ys]
        },
        &[x.clone()],
    );
    check(
        "grad_of_scan",
        |a| {
            let g = grad(
                |x: Tensor| {
                    let (c, _) = scan(Tensor::scalar(0.0, F64), x, |c: Tensor, r: Tensor| {
                        (c + (r * r).sum(&[0]).sin(), ())
                    });
                    c
                },
                a[0],
            );
            vec![g]
        },
        &[x],
    );
}

#[test]
fn a_differentiated_loop_runs_its_steps_once_and_its_pullback_can_be_called_again() {
    use tessel_dsl::autodiff::vjp;
    use tessel_dsl::kernel::KernelConfig;
    use tessel_dsl::lower::lower;
    use tessel_dsl::{scan, trace, TensorSpec};
    // The gradient's forward loop, which saves what the backward loop
    // reads, takes the place of the loop it differentiates: the program
    // holds two loops (forward and backward), not three.
    let rnn = |w: Tensor, xs: Tensor| {
        let h0 = Tensor::zeros(vec![3], F64);
        let (h, ys) = scan(h0, xs, |h: Tensor, x: Tensor| {
            let h = ((h.expand_dims(1) * w).sum(&[0]) + x).tanh();
            (h, h * h)
        });
        (h.sum(&[0]) + ys.sum(&[0, 1])) * 0.5
    };
    let params = [
        ("w".to_string(), TensorSpec::new([3, 3], F64)),
        ("xs".to_string(), TensorSpec::new([5, 3], F64)),
    ];
    let g = trace("rnn_grad", &params, KernelConfig::default(), move |a| {
        let (loss, pb) = vjp(|v: Vec<Tensor>| rnn(v[0], v[1]), vec![a[0], a[1]]);
        let mut out = vec![loss];
        out.extend(pb.call(Tensor::scalar(1.0, F64)));
        out
    })
    .unwrap();
    assert_eq!(lower(&g).matches("stablehlo.while").count(), 2);

    // A pullback called twice (the second time after the first replaced
    // the loop) gives each call its own gradient; the loss is unchanged.
    let w = data(41, &[3, 3], -0.5, 0.5);
    let xs = data(42, &[5, 3], -1.0, 1.0);
    let twice = eval(
        move |a| {
            let (loss, pb) = vjp(|v: Vec<Tensor>| rnn(v[0], v[1]), vec![a[0], a[1]]);
            let g1 = pb.call(Tensor::scalar(1.0, F64));
            let g3 = pb.call(Tensor::scalar(3.0, F64));
            vec![loss, rnn(a[0], a[1]), g1[0], g1[1], g3[0], g3[1]]
        },
        &[w.clone(), xs.clone()],
    );
    let v = |i: usize| twice[i].to_f64_vec();
    assert_eq!(v(0), v(1));
    for (one, three) in [(2, 4), (3, 5)] {
        assert!(v(one).iter().any(|&g| g != 0.0));
        for (a, b) in v(one).iter().zip(&v(three)) {
            assert!(
                (3.0 * a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{a} * 3 != {b}"
            );
        }
    }
    check("rnn_loss", move |a| vec![rnn(a[0], a[1])], &[w, xs]);
}

#[test]
fn a_weight_every_step_reads_gets_its_gradient_from_one_product_after_the_loop() {
    use tessel_dsl::autodiff::grad;
    use tessel_dsl::ir::DotDims;
    use tessel_dsl::kernel::KernelConfig;
    use tessel_dsl::lower::lower;
    use tessel_dsl::{scan, trace, TensorSpec};
    // h = tanh(h W + x): W's gradient is a sum over the steps of one
    // product each, summed after the loop by one product over the stacked
    // rows (the steps' axis contracted with the batch's).
    let rnn = |a: &[Tensor]| {
        let w = a[1];
        let (h, ys) = scan(a[0], a[2], move |h: Tensor, x: Tensor| {
            let h = (h.matmul(w) + x).tanh();
            (h, h * 0.5)
        });
        vec![h, ys]
    };
    let h0 = data(51, &[2, 3], -1.0, 1.0);
    let w = data(52, &[3, 3], -0.8, 0.8);
    let xs = data(53, &[5, 2, 3], -1.0, 1.0);
    check("rnn_matmul", rnn, &[h0.clone(), w.clone(), xs.clone()]);
    // A weight per batch row (a batched product) and a weight read on the
    // left (a transposed product's gradient).
    check(
        "rnn_batched_and_left",
        |a| {
            let (w, v) = (a[1], a[3]);
            let dims = DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![1],
                rhs_contract: vec![1],
            };
            let (h, _) = scan(a[0], a[2], move |h: Tensor, x: Tensor| {
                let hb = h.dot_general(w, dims.clone(), None, None);
                let h = (hb + v.matmul(h.t()).t() + x).sin();
                (h, ())
            });
            vec![h]
        },
        &[
            h0,
            data(54, &[2, 3, 3], -0.5, 0.5),
            xs,
            data(55, &[3, 3], -0.5, 0.5),
        ],
    );
    let params = [
        ("h0".to_string(), TensorSpec::new([2, 3], F64)),
        ("w".to_string(), TensorSpec::new([3, 3], F64)),
        ("xs".to_string(), TensorSpec::new([5, 2, 3], F64)),
    ];
    let g = trace("rnn_w_grad", &params, KernelConfig::default(), move |a| {
        let (h0, xs) = (a[0], a[2]);
        grad(move |w: Tensor| rnn(&[h0, w, xs])[1].sum(&[0, 1, 2]), a[1])
    })
    .unwrap();
    let text = lower(&g);
    assert!(
        text.contains("lhs_contracting_dimensions = [0, 1]"),
        "{text}"
    );
}
