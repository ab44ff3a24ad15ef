//! `scan` (JAX's `lax.scan`): a loop over the rows of its inputs that
//! stacks each step's outputs, against plain Rust loops in f64; forward and
//! reversed, with several inputs and outputs, no inputs, zero steps, on the
//! XLA CPU plugin and the interpreter; its errors; and the memory of its
//! gradient.

mod common;

use common::*;
use tessel_dsl::autodiff::vjp;
use tessel_dsl::ir::{BinaryOp, Def, Op};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::{
    fori_loop, scan, scan_with, HostTensor, KernelError, ScanOptions, Tensor, TensorSpec, F32, F64,
    S32,
};

/// One step of a small recurrent cell: `h' = tanh(h W + x)`, with outputs
/// `(sum(h'), 2 h')`.
fn rnn_step(w: Tensor, h: Tensor, x: Tensor) -> (Tensor, (Tensor, Tensor)) {
    let hw = (h.expand_dims(1) * w).sum(&[0]);
    let h2 = (hw + x).tanh();
    (h2, (h2.sum(&[0]), h2 * 2.0))
}

/// The same cell over rows `order` of `xs`, in f64: (final h, sums, doubled).
fn rnn_ref(
    h0: &[f64],
    w: &[f64],
    xs: &[f64],
    n: usize,
    reverse: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let d = h0.len();
    let mut h = h0.to_vec();
    let (mut sums, mut doubled) = (vec![0.0; n], vec![0.0; n * d]);
    let order: Vec<usize> = match reverse {
        true => (0..n).rev().collect(),
        false => (0..n).collect(),
    };
    for t in order {
        let next: Vec<f64> = (0..d)
            .map(|j| {
                let hw: f64 = (0..d).map(|i| h[i] * w[i * d + j]).sum();
                (hw + xs[t * d + j]).tanh()
            })
            .collect();
        h = next;
        sums[t] = h.iter().sum();
        for j in 0..d {
            doubled[t * d + j] = 2.0 * h[j];
        }
    }
    (h, sums, doubled)
}

fn rnn_kernel(reverse: bool) -> Kernel<impl Fn(&[Tensor]) -> (Tensor, Tensor, Tensor)> {
    Kernel::new(fresh_name("rnn"), move |a: &[Tensor]| {
        let (h0, w, xs) = (a[0], a[1], a[2]);
        let o = ScanOptions::new().reverse(reverse);
        let (h, (sums, doubled)) = scan_with(h0, xs, o, |h, x: Tensor| rnn_step(w, h, x));
        (h, sums, doubled)
    })
}

#[track_caller]
fn check_rnn(dev: &Device, dtype: tessel_dsl::DType, n: usize, d: usize, reverse: bool) {
    let mut rng = Rng::new((n * 31 + d) as u64);
    let h0 = random(&mut rng, &[d], dtype, -1.0, 1.0);
    let w = random(&mut rng, &[d, d], dtype, -0.5, 0.5);
    let xs = random(&mut rng, &[n, d], dtype, -1.0, 1.0);
    let out = rnn_kernel(reverse).run(dev, &[&h0, &w, &xs]).unwrap();
    let (h, sums, doubled) = rnn_ref(
        &h0.to_f64_vec(),
        &w.to_f64_vec(),
        &xs.to_f64_vec(),
        n,
        reverse,
    );
    // f64: a few roundings per step; f32: the error of up to 17 steps of a
    // contracting cell stays under 1e-5 of the unit-sized values.
    let atol = if dtype == F64 { 1e-12 } else { 1e-5 };
    let what = format!("{dtype} n={n} d={d} reverse={reverse}");
    for (got, want, shape) in [
        (&out[0], &h, vec![d]),
        (&out[1], &sums, vec![n]),
        (&out[2], &doubled, vec![n, d]),
    ] {
        assert_eq!(got.shape(), &shape[..], "{what}");
        for (i, (g, w)) in got.to_f64_vec().iter().zip(want.iter()).enumerate() {
            assert!(
                (g - w).abs() <= atol * (1.0 + w.abs()),
                "{what}: element {i} is {g}, want {w}"
            );
        }
    }
}

#[test]
fn a_recurrent_cell_over_the_rows_matches_a_plain_loop() {
    let dev = device();
    for reverse in [false, true] {
        for n in [0, 1, 5, 17] {
            for d in [1, 3, 7] {
                check_rnn(&dev, F64, n, d, reverse);
            }
        }
        check_rnn(&dev, F32, 17, 7, reverse);
    }
}

#[test]
fn the_interpreter_runs_a_scan_as_the_plugin_does() {
    let dev = Device::interpreter();
    for reverse in [false, true] {
        check_rnn(&dev, F64, 6, 3, reverse);
        check_rnn(&dev, F64, 0, 2, reverse);
    }
}

#[test]
fn several_inputs_and_outputs_of_mixed_dtypes() {
    // xs: a [n, 2] f32 and a [n] s32; the carry counts steps; the outputs
    // are the row scaled by the s32 entry and the running count.
    let n = 6;
    let a: Vec<f64> = (0..n * 2).map(|i| i as f64 * 0.5 - 2.0).collect();
    let b: Vec<f64> = (0..n).map(|i| (i as f64) * 3.0 - 7.0).collect();
    let (ta, tb) = (tensor(&a, &[n, 2], F32), tensor(&b, &[n], S32));
    let out = run(
        |x| {
            let count = Tensor::scalar(0.0, S32);
            let (c, (scaled, counts)) =
                scan(count, (x[0], x[1]), |c, (row, k): (Tensor, Tensor)| {
                    let c = c + 1;
                    (c, (row * k.cast(F32), c))
                });
            (c, scaled, counts)
        },
        &[&ta, &tb],
    );
    let scaled: Vec<f64> = (0..n * 2).map(|i| a[i] * b[i / 2]).collect();
    let counts: Vec<f64> = (1..=n).map(|i| i as f64).collect();
    check(&out[0], S32, &[], &[n as f64], Class::Exact, "count");
    check(&out[1], F32, &[n, 2], &scaled, Class::Simple, "scaled");
    check(&out[2], S32, &[n], &counts, Class::Exact, "counts");
}

#[test]
fn a_scan_with_no_inputs_takes_its_length_from_the_options() {
    let x = tensor(&[1.5], &[1], F32);
    for reverse in [false, true] {
        let out = run(
            move |a| {
                let o = ScanOptions::new().length(5).reverse(reverse);
                // The output is the carry before the step: in reverse the
                // last row is written first.
                let (c, ys) = scan_with(a[0], (), o, |c, ()| (c * 2.0, c));
                (c, ys)
            },
            &[&x],
        );
        let mut ys: Vec<f64> = (0..5).map(|t| 1.5 * 2f64.powi(t)).collect();
        if reverse {
            ys.reverse();
        }
        check(&out[0], F32, &[1], &[48.0], Class::Exact, "carry");
        check(&out[1], F32, &[5, 1], &ys, Class::Exact, "ys");
    }
}

#[test]
fn outputs_may_be_captured_tensors_or_nothing() {
    let x = tensor(&[1.0, 2.0, 3.0], &[3], F32);
    let out = run(
        |a| {
            let outer = a[0] * 10.0;
            let (c, ys) = scan(Tensor::scalar(0.0, F32), a[0], |c, x: Tensor| {
                (c + x, outer)
            });
            let (_, ()) = scan(c, a[0], |c, _x: Tensor| (c, ()));
            (c, ys)
        },
        &[&x],
    );
    check(&out[0], F32, &[], &[6.0], Class::Exact, "sum");
    let want: Vec<f64> = (0..3).flat_map(|_| [10.0, 20.0, 30.0]).collect();
    check(
        &out[1],
        F32,
        &[3, 3],
        &want,
        Class::Exact,
        "stacked capture",
    );
}

#[track_caller]
fn expect(e: &KernelError, needle: &str, line: u32) {
    assert_eq!(e.op, "scan", "{e}");
    assert!(
        e.message.contains(needle),
        "{:?} lacks {needle:?}",
        e.message
    );
    assert!(e.location.file.ends_with("ops_scan.rs"), "{}", e.location);
    assert_eq!(e.location.line, line, "{e}");
}

#[test]
fn misuses_are_kernel_errors_at_the_scan() {
    let specs = [spec(&[4, 3], F32), spec(&[5], F32), spec(&[], F32)];
    let line = line!() + 2;
    let e = trace_error(
        |a| scan(a[2], (a[0], a[1]), |c, _: (Tensor, Tensor)| (c, c)).1,
        &specs,
    );
    expect(
        &e,
        "xs tensor 1 (f32[5]) has 5 rows but xs tensor 0 gives 4 steps",
        line,
    );
    let line = line!() + 1;
    let e = trace_error(|a| scan(a[2], a[2], |c, x: Tensor| (c, x)).1, &specs);
    expect(&e, "xs tensor 0 is a scalar (f32[])", line);
    let line = line!() + 1;
    let e = trace_error(|a| scan(a[2], (), |c, ()| (c, c)).1, &specs);
    expect(&e, "give one with scan_with", line);
    let line = line!() + 3;
    let e = trace_error(
        |a| {
            scan_with(a[2], a[0], ScanOptions::new().length(3), |c, x: Tensor| {
                (c, x)
            })
            .1
        },
        &specs,
    );
    expect(&e, "has 4 rows but the length gives 3 steps", line);
    let line = line!() + 1;
    let e = trace_error(|a| scan(a[2], a[0], |_, x: Tensor| (x, x)).1, &specs);
    expect(&e, "carry 0 is f32[3] but must be f32[]", line);
    let line = line!() + 2;
    let e = trace_error(
        |a| scan(a[2], a[0], |c, _: Tensor| (c.cast(S32), c)).1,
        &specs,
    );
    expect(&e, "carry 0 is s32[] but must be f32[]", line);
}

/// The gradient of a scan whose per-step output is a row, for `specs(n, w)`.
fn scan_gradient() -> Kernel<impl Fn(&[Tensor]) -> (Tensor, Tensor)> {
    Kernel::new(fresh_name("scan_grad_mem"), |a: &[Tensor]| {
        let (_, pb) = vjp(
            |(h0, xs): (Tensor, Tensor)| {
                scan(h0, xs, |h: Tensor, x: Tensor| {
                    let h = (h * 0.9 + x).sin();
                    (h, h * 2.0)
                })
                .1
            },
            (a[0], a[1]),
        );
        let (dh0, dxs) = pb.call(a[2]);
        (dh0, dxs)
    })
}

/// The argument specs of [`scan_gradient`] for `n` steps of rows of `w`.
fn specs(n: usize, w: usize) -> [TensorSpec; 3] {
    [spec(&[w], F32), spec(&[n, w], F32), spec(&[n, w], F32)]
}

/// The temporary memory of [`scan_gradient`] for `n` steps of rows of 256.
fn gradient_temp_bytes(n: usize) -> i64 {
    let exe = scan_gradient().compile(&device(), &specs(n, 256)).unwrap();
    exe.memory_stats().unwrap().temp_bytes
}

#[test]
fn the_gradient_program_keeps_no_stacked_output_per_step() {
    // The program itself (which the interpreter runs as written) has no
    // buffer of a stacked output per step: no 12x12x5 value.
    let text = scan_gradient().lower(&specs(12, 5)).unwrap();
    assert!(text.contains("tensor<12x5xf32>"), "{text}");
    assert!(!text.contains("12x12x5"), "{text}");
}

#[test]
fn the_gradient_of_a_scan_keeps_one_carry_per_step_not_the_stacked_outputs() {
    // Keeping the stacked outputs per step would grow as the square of the
    // steps (16x from 64 to 256 steps); one carry per step grows 4x.
    let (small, large) = (gradient_temp_bytes(64), gradient_temp_bytes(256));
    assert!(small > 0, "{small}");
    assert!(
        (large as f64) < 6.0 * small as f64,
        "temporaries of 64 steps: {small} B; of 256 steps: {large} B"
    );
}

/// The body of the program's last loop: a gradient's backward loop.
fn backward_body(g: &tessel_dsl::Graph) -> &tessel_dsl::ir::Region {
    let last = g.nodes.iter().rfind(|n| matches!(n.op, Op::While { .. }));
    &g.regions[last.expect("a loop").regions[1]]
}

/// Arguments of `specs`, random in `[-1, 1)` from `seed`.
fn random_args(specs: &[TensorSpec], seed: u64) -> Vec<HostTensor> {
    let mut rng = Rng::new(seed);
    specs
        .iter()
        .map(|s| random(&mut rng, &s.shape, s.dtype, -1.0, 1.0))
        .collect()
}

#[test]
fn the_backward_loop_reads_the_stacked_cotangent_instead_of_carrying_it() {
    // The same loop written by hand with fori_loop carries the cotangent
    // of its stacked buffer through the backward loop, zeroing the row
    // each iteration wrote; a scan's rows are written once each, so its
    // backward loop reads them from the result's cotangent as they are.
    let (n, w) = (6, 4);
    // How many values the last loop of the program (the backward one)
    // carries out of a dynamic_update_slice.
    let written = |g: &tessel_dsl::Graph| {
        backward_body(g)
            .results
            .iter()
            .filter(|&&v| match g.values[v].def {
                Def::Result { node, .. } => g.nodes[node].op == Op::DynamicUpdateSlice,
                _ => false,
            })
            .count()
    };
    let specs = [spec(&[w], F32), spec(&[n, w], F32), spec(&[n, w], F32)];
    let by_hand = Kernel::new(fresh_name("fori_stack"), move |a: &[Tensor]| {
        let (_, pb) = vjp(
            |h0: Tensor| {
                let buf = Tensor::zeros(vec![n, w], F32);
                let z = Tensor::scalar(0.0, S32);
                let (_, ys) = fori_loop(0, n as i32, (h0, buf), |i, (h, ys)| {
                    let h = (h * 0.9).sin();
                    (h, ys.dynamic_update_slice(h.expand_dims(0), &[i, z]))
                });
                ys
            },
            a[0],
        );
        pb.call(a[2])
    });
    let scanned = Kernel::new(fresh_name("scan_stack"), move |a: &[Tensor]| {
        let (_, pb) = vjp(
            |h0: Tensor| {
                let (_, ys) = scan_with(h0, (), ScanOptions::new().length(n), |h, ()| {
                    let h = (h * 0.9).sin();
                    (h, h)
                });
                ys
            },
            a[0],
        );
        pb.call(a[2])
    });
    assert_eq!(written(&by_hand.trace(&specs).unwrap()), 1);
    assert_eq!(written(&scanned.trace(&specs).unwrap()), 0);
    let args = random_args(&specs, 5);
    let refs: Vec<&HostTensor> = args.iter().collect();
    let (a, b) = (
        by_hand.run(&device(), &refs).unwrap(),
        scanned.run(&device(), &refs).unwrap(),
    );
    check(&b[0], F32, &[w], &a[0].to_f64_vec(), Class::Simple, "dh0");
}

#[test]
fn the_backward_loop_adds_each_row_of_the_inputs_cotangent_into_its_row() {
    // The inputs' cotangent is carried through the backward loop; each
    // iteration adds its row into that row (a dynamic_slice, an add of one
    // row, a dynamic_update_slice), not a whole [n, w] tensor of zeros with
    // one row set, which is a pass over the whole buffer per step.
    let (n, w) = (12, 5);
    let g = scan_gradient().trace(&specs(n, w)).unwrap();
    let last = g.nodes.iter().rfind(|x| matches!(x.op, Op::While { .. }));
    let body = &g.regions[last.expect("a loop").regions[1]];
    let whole = |op: Op| {
        body.nodes
            .iter()
            .filter(|&&id| {
                g.nodes[id].op == op && g.values[g.nodes[id].results[0]].spec.shape == [n, w]
            })
            .count()
    };
    assert_eq!(whole(Op::Binary(BinaryOp::Add)), 0);
    assert!(whole(Op::DynamicUpdateSlice) > 0);
}

#[test]
fn the_backward_loop_reads_the_saved_products_of_the_body() {
    // An RNN step tanh(h W + x): the forward loop of the gradient saves
    // each step's h W, so the backward loop holds the two products of the
    // gradient and does not compute h W again (W's product is then left
    // unread: W's gradient is one product after the loop, see
    // `loop_products`); the gradients equal those of the same steps
    // unrolled (no loop at all).
    let (n, b, d) = (5, 3, 4);
    let rnn = |w: Tensor, h0: Tensor, xs: Tensor| {
        scan(h0, xs, |h: Tensor, x: Tensor| {
            let h = (h.matmul(w) + x).tanh();
            (h, h)
        })
        .1
    };
    let unrolled = move |w: Tensor, h0: Tensor, xs: Tensor| {
        let mut h = h0;
        let mut rows = Vec::new();
        for i in 0..n {
            h = (h.matmul(w)
                + xs.slice_axis(0, i, i + 1)
                    .reshape(&[b as isize, d as isize]))
            .tanh();
            rows.push(h.expand_dims(0));
        }
        tessel_dsl::concat(&rows, 0)
    };
    fn grads(
        f: impl Fn(Tensor, Tensor, Tensor) -> Tensor + Copy,
    ) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
        move |a: &[Tensor]| {
            let (_, pb) = vjp(
                |(w, h0, xs): (Tensor, Tensor, Tensor)| f(w, h0, xs),
                (a[0], a[1], a[2]),
            );
            let (dw, dh0, dxs) = pb.call(a[3]);
            vec![dw, dh0, dxs]
        }
    }
    let specs = [
        spec(&[d, d], F32),
        spec(&[b, d], F32),
        spec(&[n, b, d], F32),
        spec(&[n, b, d], F32),
    ];
    let scanned = Kernel::new(fresh_name("rnn_grad"), grads(rnn));
    let g = scanned.trace(&specs).unwrap();
    let dots = backward_body(&g)
        .nodes
        .iter()
        .filter(|&&id| matches!(g.nodes[id].op, Op::DotGeneral { .. }))
        .count();
    assert_eq!(dots, 2, "products in the backward loop");
    let by_hand = Kernel::new(fresh_name("rnn_unrolled"), grads(unrolled));
    let args = random_args(&specs, 9);
    let refs: Vec<&HostTensor> = args.iter().collect();
    let (got, want) = (
        scanned.run(&device(), &refs).unwrap(),
        by_hand.run(&device(), &refs).unwrap(),
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        check(
            g,
            F32,
            w.shape(),
            &w.to_f64_vec(),
            Class::Simple,
            &format!("gradient {i}"),
        );
    }
}

#[test]
fn the_scan_gradient_runs_on_the_interpreter() {
    // The interpreter runs the whole gradient program as traced (no
    // compiler removes dead values), so this checks the program itself.
    let (n, d) = (5, 3);
    let k = |dev: &Device| {
        let mut rng = Rng::new(9);
        let h0 = random(&mut rng, &[d], F64, -1.0, 1.0);
        let w = random(&mut rng, &[d, d], F64, -0.5, 0.5);
        let xs = random(&mut rng, &[n, d], F64, -1.0, 1.0);
        let ct = random(&mut rng, &[n, d], F64, -1.0, 1.0);
        let k = Kernel::new(fresh_name("scan_vjp"), |a: &[Tensor]| {
            let w = a[1];
            let (_, pb) = vjp(
                |(h0, xs): (Tensor, Tensor)| scan(h0, xs, |h, x: Tensor| rnn_step(w, h, x)).1 .1,
                (a[0], a[2]),
            );
            pb.call(a[3])
        });
        k.run(dev, &[&h0, &w, &xs, &ct]).unwrap()
    };
    let (p, i): (Vec<HostTensor>, Vec<HostTensor>) = (k(&device()), k(&Device::interpreter()));
    for (a, b) in p.iter().zip(&i) {
        check(
            b,
            F64,
            a.shape(),
            &a.to_f64_vec(),
            Class::Simple,
            "interpreter",
        );
    }
}
