//! The interpreter's checks (a NaN made from finite operands, start
//! indices XLA clamps), its errors for bad arguments, and its cost on long
//! loops.

mod common;
mod interp_common;

use common::*;
use interp_common::both;
use tessel_dsl::interp::{evaluate, Checks, FindingKind};
use tessel_dsl::ir::{
    BinaryOp, DotDims, GatherDims, Graph, Op, ReduceKind, ScatterCombine, ScatterDims, UnaryOp,
};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{
    cond, fori_loop, Error, HostTensor, InterpError, Location, Tensor, TensorSpec, F32, S32,
};

#[test]
fn dynamic_slices_clamp_and_are_reported() {
    let x = tensor(&(0..30).map(f64::from).collect::<Vec<_>>(), &[5, 6], F32);
    let u = tensor(&[-1.0, -2.0, -3.0, -4.0], &[2, 2], F32);
    for (i, j) in [(0, 0), (3, 4), (4, 5), (-2, 1), (100, -100)] {
        let e = both(
            |t| {
                let ds = t[0].dynamic_slice(&[t[2], t[3]], &[2, 3]);
                let dus = t[0].dynamic_update_slice(t[1], &[t[2], t[3]]);
                vec![ds, dus]
            },
            &[x.clone(), u.clone(), s32(i), s32(j)],
        );
        // The slice is 2x3 and the update 2x2 of 5x6.
        let slice_clamped = !(0..=3).contains(&i) || !(0..=3).contains(&j);
        let update_clamped = !(0..=3).contains(&i) || !(0..=4).contains(&j);
        let ops: Vec<&str> = e.findings.iter().map(|f| f.op).collect();
        assert_eq!(
            ops.contains(&"dynamic_slice"),
            slice_clamped,
            "{:?}",
            e.findings
        );
        assert_eq!(
            ops.contains(&"dynamic_update_slice"),
            update_clamped,
            "{:?}",
            e.findings
        );
    }
}

#[test]
fn a_nan_from_finite_operands_is_reported_with_op_and_line() {
    let x = tensor(&[1.0, 0.0, -2.0], &[3], F32);
    let y = tensor(&[1.0, 0.0, 4.0], &[3], F32);
    let line = line!() + 1;
    let k = Kernel::new("nan_source", |a: &[Tensor]| (a[0] / a[1]).sqrt());
    let g = k.trace(&[x.spec().clone(), y.spec().clone()]).unwrap();
    let e = evaluate(&g, &[x.clone(), y.clone()], Checks::default()).unwrap();
    assert_eq!(
        e.findings.len(),
        1,
        "only the division makes the NaN: {:?}",
        e.findings
    );
    let f = &e.findings[0];
    assert_eq!((f.op, f.kernel.as_str()), ("divide", "nan_source"));
    assert_eq!(f.location.line, line);
    assert!(
        f.location.file.ends_with("interp_checks.rs"),
        "{}",
        f.location
    );
    assert!(
        matches!(&f.kind, FindingKind::NonFinite { index, value, .. } if index == &[1] && value.is_nan())
    );
    assert!(f.to_string().contains("divide"), "{f}");
    let quiet = evaluate(&g, &[x, y], Checks::NONE).unwrap();
    assert!(quiet.findings.is_empty());
}

#[test]
fn an_out_of_range_dynamic_slice_start_is_reported() {
    let x = tensor(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5], F32);
    let line = line!() + 1;
    let k = Kernel::new("window", |a: &[Tensor]| a[0].dynamic_slice(&[a[1]], &[3]));
    let g = k
        .trace(&[x.spec().clone(), TensorSpec::scalar(S32)])
        .unwrap();
    let i = s32(4);
    let e = evaluate(&g, &[&x, &i], Checks::default()).unwrap();
    assert_eq!(e.outputs[0].to_vec::<f32>().unwrap(), vec![3.0, 4.0, 5.0]);
    let f = &e.findings[0];
    assert_eq!((f.op, f.location.line), ("dynamic_slice", line));
    assert_eq!(
        f.kind,
        FindingKind::ClampedIndex {
            axis: 0,
            start: 4,
            clamped: 2
        }
    );
}

/// `take_with(.., PromiseInBounds)` clamps an out-of-range index as XLA's
/// gather does (its rustdoc says so); the interpreter's checks name the
/// gather `take` made and the line that called `take`.
#[test]
fn an_out_of_range_take_index_is_reported_at_the_callers_line() {
    let x = tensor(&[10.0, 11.0, 12.0, 13.0], &[4], F32);
    let idx = tensor(&[1.0, 7.0, -2.0, 3.0], &[4], S32);
    let line = line!() + 2;
    let k = Kernel::new("pick", |a: &[Tensor]| {
        a[0].take_with(a[1], 0, tessel_dsl::TakeMode::PromiseInBounds)
    });
    let g = k.trace(&[x.spec().clone(), idx.spec().clone()]).unwrap();
    let e = evaluate(&g, &[&x, &idx], Checks::default()).unwrap();
    // 7 reads the last element and -2 the first, as on the plugin.
    assert_eq!(
        e.outputs[0].to_vec::<f32>().unwrap(),
        vec![11.0, 13.0, 10.0, 13.0]
    );
    let xla = k.run(&device(), &[&x, &idx]).unwrap();
    assert_eq!(xla[0], e.outputs[0]);
    assert_eq!(e.findings.len(), 1, "{:?}", e.findings);
    let f = &e.findings[0];
    assert_eq!((f.op, f.kernel.as_str()), ("gather", "pick"));
    assert_eq!(f.location.line, line);
    assert!(
        f.location.file.ends_with("interp_checks.rs"),
        "{}",
        f.location
    );
    // The first clamped index, and how many were clamped.
    assert_eq!(
        f.kind,
        FindingKind::ClampedIndex {
            axis: 0,
            start: 7,
            clamped: 3
        }
    );
    assert_eq!(f.count, 2);
    assert!(f.to_string().contains("gather"), "{f}");
    // In range: nothing to report.
    let ok = tensor(&[3.0, 0.0, 2.0, 1.0], &[4], S32);
    let e = evaluate(&g, &[&x, &ok], Checks::default()).unwrap();
    assert!(e.findings.is_empty(), "{:?}", e.findings);
}

#[test]
fn wrong_arguments_are_errors_not_panics() {
    let k = Kernel::new("args", |a: &[Tensor]| a[0] + 1.0);
    let g = k.trace(&[TensorSpec::new([2], F32)]).unwrap();
    let bad = [
        vec![],
        vec![tensor(&[1.0, 2.0, 3.0], &[3], F32)],
        vec![tensor(&[1.0, 2.0], &[2], S32)],
    ];
    for args in bad {
        match evaluate(&g, &args, Checks::default()) {
            Err(Error::Interp(e)) => assert!(matches!(*e, InterpError::Arguments { .. }), "{e}"),
            other => panic!("expected an argument error, got {other:?}"),
        }
    }
}

#[test]
fn a_long_loop_costs_its_iterations_not_their_square() {
    // 20000 iterations over a 4096-element carry, each writing one element.
    let n = 20_000;
    let x = tensor(&vec![0.0; 4096], &[4096], F32);
    let k = Kernel::new("long", move |a: &[Tensor]| {
        fori_loop(0, n, a[0], |i, c| {
            let at = i % 4096;
            let v = c.dynamic_slice(&[at], &[1]) + 1.0;
            c.dynamic_update_slice(v, &[at])
        })
    });
    let g = k.trace(&[x.spec().clone()]).unwrap();
    let t = std::time::Instant::now();
    let e = evaluate(&g, &[x], Checks::default()).unwrap();
    let v = e.outputs[0].to_f64_vec();
    assert_eq!(v.iter().sum::<f64>(), f64::from(n));
    assert!(t.elapsed().as_secs_f64() < 20.0, "{:?}", t.elapsed());
}

/// A graph of parameters `params` and one node `op` on `operands` declaring
/// `results`; its body returns those results.
fn one_node(
    params: &[TensorSpec],
    op: Op,
    operands: Vec<usize>,
    results: Vec<TensorSpec>,
    regions: Vec<usize>,
) -> Graph {
    let named: Vec<(String, TensorSpec)> = params
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("p{i}"), s.clone()))
        .collect();
    let mut g = Graph::new("malformed", &named);
    let outs = g.add_node(0, op, operands, results, regions, Location::caller());
    g.regions[0].results = outs;
    g
}

#[track_caller]
fn assert_op_error(g: &Graph, args: &[HostTensor], what: &str) {
    match evaluate(g, args, Checks::default()) {
        Err(Error::Interp(e)) => assert!(matches!(*e, InterpError::Op { .. }), "{what}: {e}"),
        other => panic!("{what}: expected an op error, got {other:?}"),
    }
}

#[test]
fn malformed_graphs_are_errors_not_panics() {
    let v = TensorSpec::new([2, 3], F32);
    let x = HostTensor::from_vec(vec![1.0f32; 6], [2, 3]).unwrap();
    let i = s32(1);
    let si = TensorSpec::scalar(S32);
    let pv = [v.clone()];
    let add = Op::Binary(BinaryOp::Add);
    let cases: Vec<(&str, Graph)> = vec![
        (
            "one operand",
            one_node(&pv, add.clone(), vec![0], vec![v.clone()], vec![]),
        ),
        (
            "wrong result type",
            one_node(
                &pv,
                add.clone(),
                vec![0, 0],
                vec![TensorSpec::new([3], F32)],
                vec![],
            ),
        ),
        (
            "a value not in the graph",
            one_node(&pv, add, vec![0, 99], vec![v.clone()], vec![]),
        ),
        (
            "a slice past the end",
            one_node(
                &pv,
                Op::Slice {
                    start: vec![0, 2],
                    limit: vec![2, 1],
                    strides: vec![1, 1],
                },
                vec![0],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a reshape to another count",
            one_node(
                &pv,
                Op::Reshape,
                vec![0],
                vec![TensorSpec::new([7], F32)],
                vec![],
            ),
        ),
        (
            "a bad permutation",
            one_node(
                &pv,
                Op::Transpose { perm: vec![1, 1] },
                vec![0],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a bad broadcast",
            one_node(
                &pv,
                Op::BroadcastInDim { dims: vec![0, 0] },
                vec![0],
                vec![TensorSpec::new([2, 3, 3], F32)],
                vec![],
            ),
        ),
        (
            "padding past i64",
            one_node(
                &[v.clone(), TensorSpec::scalar(F32)],
                Op::Pad {
                    low: vec![i64::MIN, 0],
                    high: vec![0, i64::MAX],
                    interior: vec![0, i64::MAX],
                },
                vec![0, 1],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a gather of a missing axis",
            one_node(
                &[v.clone(), si.clone()],
                Op::Gather {
                    dims: GatherDims {
                        offset_dims: vec![0],
                        collapsed_slice_dims: vec![5],
                        start_index_map: vec![7],
                        index_vector_dim: 0,
                    },
                    slice_sizes: vec![1, 1],
                },
                vec![0, 1],
                vec![TensorSpec::new([1], F32)],
                vec![],
            ),
        ),
        (
            "a scatter of windows larger than the operand",
            one_node(
                &[v.clone(), si.clone(), TensorSpec::new([4, 4], F32)],
                Op::Scatter {
                    dims: ScatterDims {
                        update_window_dims: vec![0, 1],
                        inserted_window_dims: vec![],
                        scatter_dims_to_operand_dims: vec![0],
                        index_vector_dim: 0,
                    },
                    combine: ScatterCombine::Add,
                },
                vec![0, 1, 2],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a dynamic slice with one start for two axes",
            one_node(
                &[v.clone(), si.clone()],
                Op::DynamicSlice { sizes: vec![1, 1] },
                vec![0, 1],
                vec![TensorSpec::new([1, 1], F32)],
                vec![],
            ),
        ),
        (
            "a dot with a repeated axis",
            one_node(
                &pv,
                Op::DotGeneral {
                    dims: DotDims {
                        lhs_batch: vec![0],
                        rhs_batch: vec![0],
                        lhs_contract: vec![0],
                        rhs_contract: vec![1],
                    },
                    precision: Default::default(),
                },
                vec![0, 0],
                vec![TensorSpec::new([2], F32)],
                vec![],
            ),
        ),
        (
            "a constant of the wrong size",
            one_node(
                &pv,
                Op::Constant { data: vec![0; 5] },
                vec![],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "an iota along a missing axis",
            one_node(&pv, Op::Iota { dim: 4 }, vec![], vec![v.clone()], vec![]),
        ),
        (
            "a sort along a missing axis",
            one_node(
                &pv,
                Op::Sort {
                    dim: 2,
                    descending: false,
                },
                vec![0],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "top_k of too many",
            one_node(
                &pv,
                Op::TopK { k: 9 },
                vec![0],
                vec![TensorSpec::new([2, 9], F32), TensorSpec::new([2, 9], S32)],
                vec![],
            ),
        ),
        (
            "a reduce along a missing axis",
            one_node(
                &[v.clone(), TensorSpec::scalar(F32)],
                Op::Reduce {
                    kind: ReduceKind::Sum,
                    dims: vec![3],
                    split_rows: false,
                },
                vec![0, 1],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a while without regions",
            one_node(
                &pv,
                Op::While {
                    trip_count: None,
                    stacked: 0..0,
                },
                vec![0],
                vec![v.clone()],
                vec![],
            ),
        ),
        (
            "a loop whose body is the kernel",
            one_node(
                &pv,
                Op::While {
                    trip_count: None,
                    stacked: 0..0,
                },
                vec![0],
                vec![v.clone()],
                vec![0, 0],
            ),
        ),
        (
            "an if on a float",
            one_node(&pv, Op::If, vec![0], vec![v.clone()], vec![0, 0]),
        ),
        (
            "a gather mapping one axis twice",
            one_node(
                &[v.clone(), TensorSpec::new([2], S32)],
                Op::Gather {
                    dims: GatherDims {
                        offset_dims: vec![0, 1],
                        collapsed_slice_dims: vec![],
                        start_index_map: vec![0, 0],
                        index_vector_dim: 0,
                    },
                    slice_sizes: vec![1, 3],
                },
                vec![0, 1],
                vec![TensorSpec::new([1, 3], F32)],
                vec![],
            ),
        ),
        (
            "a float popcount",
            one_node(
                &pv,
                Op::Unary(UnaryOp::PopCount),
                vec![0],
                vec![v.clone()],
                vec![],
            ),
        ),
    ];
    for (what, g) in cases {
        let n = g.input_specs().len();
        let first = &g.input_specs()[0];
        let mut args = vec![if first == x.spec() {
            x.clone()
        } else {
            HostTensor::from_fn(first.clone(), |_| 0.5)
        }];
        for s in &g.input_specs()[1..] {
            args.push(if s.dtype == S32 && s.rank() == 0 {
                i.clone()
            } else {
                HostTensor::from_fn(s.clone(), |_| 0.5)
            });
        }
        assert_eq!(args.len(), n);
        assert_op_error(&g, &args, what);
    }
    // A value that failed to trace.
    let mut g = Graph::new("poisoned", &[("x".to_string(), v.clone())]);
    let p = g.add_poisoned(0, v.clone());
    let outs = g.add_node(
        0,
        Op::Unary(UnaryOp::Neg),
        vec![p],
        vec![v],
        vec![],
        Location::caller(),
    );
    g.regions[0].results = outs;
    assert_op_error(&g, &[x], "a poisoned operand");
    // A contraction over an empty axis is zeros (not an out-of-range read).
    let e03 = TensorSpec::new([0, 3], F32);
    let dims = DotDims {
        lhs_batch: vec![],
        rhs_batch: vec![],
        lhs_contract: vec![0],
        rhs_contract: vec![0],
    };
    let dot = Op::DotGeneral {
        dims,
        precision: Default::default(),
    };
    let g = one_node(
        std::slice::from_ref(&e03),
        dot,
        vec![0, 0],
        vec![TensorSpec::new([3, 3], F32)],
        vec![],
    );
    let empty_arg = HostTensor::from_fn(e03, |_| 0.0);
    let out = evaluate(&g, &[empty_arg], Checks::default()).unwrap();
    assert_eq!(out.outputs[0].to_vec::<f32>().unwrap(), vec![0.0; 9]);
    // No body at all.
    let mut empty = Graph::new("empty", &[]);
    empty.regions.clear();
    match evaluate::<HostTensor>(&empty, &[], Checks::default()) {
        Err(Error::Interp(e)) => assert!(matches!(*e, InterpError::Arguments { .. }), "{e}"),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[test]
fn deeply_nested_branches_evaluate() {
    fn nest(x: Tensor, p: Tensor, depth: usize) -> Tensor {
        if depth == 0 {
            return x + 1.0;
        }
        cond(p, || nest(x, p, depth - 1) * 2.0, || x)
    }
    let k = Kernel::new("deep", |a: &[Tensor]| nest(a[0], a[1].gt(0), 80));
    let g = k
        .trace(&[TensorSpec::scalar(F32), TensorSpec::scalar(S32)])
        .unwrap();
    let e = evaluate(&g, &[HostTensor::scalar(0.0f32), s32(1)], Checks::default()).unwrap();
    assert_eq!(e.outputs[0].to_vec::<f32>().unwrap(), vec![2f32.powi(80)]);
}

#[test]
fn a_nan_in_a_loop_is_reported_once_with_its_count() {
    let line = line!() + 2;
    let k = Kernel::new("loop_nan", |a: &[Tensor]| {
        fori_loop(0, 5, a[0], |_, c| (c - c.abs() - 1.0).sqrt() + c)
    });
    let g = k.trace(&[TensorSpec::new([3], F32)]).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap();
    let e = evaluate(&g, &[x], Checks::default()).unwrap();
    assert_eq!(e.findings.len(), 1, "{:?}", e.findings);
    let f = &e.findings[0];
    assert_eq!((f.op, f.location.line, f.count), ("sqrt", line, 3));
}

#[test]
fn a_loop_limit_stops_a_loop_that_never_ends() {
    let k = Kernel::new("forever", |a: &[Tensor]| {
        tessel_dsl::while_loop(a[0], |x| x.ge(0.0), |x| x + 1.0)
    });
    let g = k.trace(&[TensorSpec::scalar(F32)]).unwrap();
    let checks = Checks {
        max_loop_iterations: Some(10_000),
        ..Checks::default()
    };
    match evaluate(&g, &[HostTensor::scalar(0.0f32)], checks) {
        Err(Error::Interp(e)) => {
            assert!(e.to_string().contains("more than 10000 iterations"), "{e}")
        }
        other => panic!("expected the loop limit, got {other:?}"),
    }
    // Within the limit, it does not interfere.
    let e = evaluate(&g, &[HostTensor::scalar(-3.0f32)], checks).unwrap();
    assert_eq!(e.outputs[0].to_vec::<f32>().unwrap(), vec![-3.0]);
}
