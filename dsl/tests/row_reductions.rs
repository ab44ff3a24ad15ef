//! Row reductions on the CPU plugin, which compiles long row reductions fed
//! by an elementwise op as a lane reduce, a barrier and a second reduce
//! (`split_row_reductions`): results against `f64` references, NaN and
//! infinities, inside loops, and which reductions are rewritten.

mod common;

use common::*;
use tessel_dsl::kernel::KernelConfig;
use tessel_dsl::lower::{lower, split_row_reductions};
use tessel_dsl::ops::fori_loop;
use tessel_dsl::{trace, DType, HostTensor, Tensor, TensorSpec, F32, F64, S32};

/// `(sum of squares, max of 2x, min of x + 1)` of each row of `x`, whose
/// rows have `n` elements.
fn row_refs(x: &[f64], n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let rows = x.chunks(n);
    let sums = rows
        .clone()
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let maxs = rows
        .clone()
        .map(|r| r.iter().map(|v| 2.0 * v).fold(f64::NEG_INFINITY, f64::max))
        .collect();
    let mins = rows
        .map(|r| r.iter().map(|v| v + 1.0).fold(f64::INFINITY, f64::min))
        .collect();
    (sums, maxs, mins)
}

/// `got` against `want` within `rtol` of the sum of the magnitudes of what
/// each row combined (`scale`, per row).
fn close(got: &HostTensor, want: &[f64], scale: &[f64], rtol: f64, what: &str) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (g - w).abs() <= rtol * s.max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn split_row_reductions_match_f64_references() {
    let mut rng = Rng::new(7);
    // Rows of 64, 72 and 1024 are split; 1001 (not a multiple of 8) is not.
    let shapes: [&[usize]; 5] = [&[3, 64], &[5, 72], &[4, 1024], &[2, 3, 4096], &[6, 1001]];
    for dtype in [F32, F64] {
        let rtol = if dtype == F64 { 1e-13 } else { 2e-6 };
        for shape in shapes {
            let n = *shape.last().unwrap();
            let x = random(&mut rng, shape, dtype, -3.0, 3.0);
            let out = run(
                |t| {
                    vec![
                        t[0].square().sum(&[-1]),
                        (t[0] * 2.0).max(&[-1]),
                        (t[0] + 1.0).min(&[-1]),
                        t[0].square().mean(&[-1]),
                    ]
                },
                &[&x],
            );
            let xs = x.to_f64_vec();
            let (sums, maxs, mins) = row_refs(&xs, n);
            let what = format!("{dtype} {shape:?}");
            close(&out[0], &sums, &sums, rtol, &format!("sum {what}"));
            close(&out[1], &maxs, &maxs, 0.0, &format!("max {what}"));
            close(&out[2], &mins, &mins, 0.0, &format!("min {what}"));
            let means: Vec<f64> = sums.iter().map(|s| s / n as f64).collect();
            close(&out[3], &means, &means, rtol, &format!("mean {what}"));
        }
    }
}

#[test]
fn split_row_reductions_keep_nan_and_infinities() {
    let n = 256;
    let mut v: Vec<f64> = (0..4 * n).map(|i| (i % 17) as f64 - 8.0).collect();
    v[3] = f64::NAN; // row 0: NaN
    v[n + 200] = f64::INFINITY; // row 1: +inf
    v[2 * n + 5] = f64::NEG_INFINITY; // row 2: -inf
    let x = tensor(&v, &[4, n], F32);
    let out = run(
        |t| {
            vec![
                (t[0] * 1.0).max(&[-1]),
                (t[0] * 1.0).min(&[-1]),
                (t[0] * 1.0).sum(&[-1]),
            ]
        },
        &[&x],
    );
    let (max, min, sum) = (
        out[0].to_f64_vec(),
        out[1].to_f64_vec(),
        out[2].to_f64_vec(),
    );
    assert!(max[0].is_nan() && min[0].is_nan() && sum[0].is_nan());
    assert_eq!(
        (max[1], min[1], sum[1]),
        (f64::INFINITY, -8.0, f64::INFINITY)
    );
    assert_eq!((max[2], min[2]), (8.0, f64::NEG_INFINITY));
    assert_eq!(sum[2], f64::NEG_INFINITY);
    let row3: f64 = v[3 * n..].iter().sum();
    assert_eq!((max[3], min[3], sum[3]), (8.0, -8.0, row3));
}

#[test]
fn split_row_reductions_inside_a_loop() {
    let mut rng = Rng::new(8);
    let x = random(&mut rng, &[8, 512], F32, -1.0, 1.0);
    let out = run1(
        |t| {
            let x = t[0];
            fori_loop(0, 3, x.sum_keepdims(&[-1]) * 0.0, move |_i, acc| {
                acc + (x * 0.5).square().sum_keepdims(&[-1])
            })
        },
        &[&x],
    );
    let xs = x.to_f64_vec();
    let want: Vec<f64> = xs
        .chunks(512)
        .map(|r| 3.0 * r.iter().map(|v| 0.25 * v * v).sum::<f64>())
        .collect();
    close(&out, &want, &want, 2e-6, "loop");
}

/// A program over one argument.
type Body = Box<dyn Fn(Tensor) -> Vec<Tensor>>;

/// The text of `body` over one argument of `shape` and `dtype`, split.
fn split_text(shape: &[usize], dtype: DType, body: impl Fn(Tensor) -> Vec<Tensor>) -> String {
    let specs = [("x".into(), TensorSpec::new(shape.to_vec(), dtype))];
    let g = trace("rows", &specs, KernelConfig::default(), |a| body(a[0])).unwrap();
    lower(&split_row_reductions(&g))
}

#[test]
fn only_long_rows_fed_by_one_elementwise_op_are_split() {
    let barriers = |text: &str| text.matches("stablehlo.optimization_barrier").count();
    // Split: sum, max and min of elementwise results read once.
    let t = split_text(&[16, 1024], F32, |x| {
        vec![
            x.square().sum(&[-1]),
            (x * 2.0).max(&[1]),
            (x + 1.0).min(&[-1]),
        ]
    });
    assert_eq!(barriers(&t), 3, "{t}");
    assert!(t.contains("tensor<16x128x8xf32>"));
    // Not split: a parameter, a product also returned, a short or odd row,
    // another axis, several axes, integers, a product.
    let cases: Vec<(&[usize], DType, Body)> = vec![
        (&[16, 1024], F32, Box::new(|x| vec![x.sum(&[-1])])),
        (
            &[16, 1024],
            F32,
            Box::new(|x| {
                let e = x.exp();
                vec![e.sum(&[-1]), e]
            }),
        ),
        (&[16, 32], F32, Box::new(|x| vec![x.square().sum(&[-1])])),
        (&[16, 1001], F32, Box::new(|x| vec![x.square().sum(&[-1])])),
        (&[1024, 16], F32, Box::new(|x| vec![x.square().sum(&[0])])),
        (
            &[4, 16, 1024],
            F32,
            Box::new(|x| vec![x.square().sum(&[1, 2])]),
        ),
        (&[16, 1024], S32, Box::new(|x| vec![(x * 2).sum(&[-1])])),
        (&[16, 1024], F32, Box::new(|x| vec![x.square().prod(&[-1])])),
        (&[1024], F32, Box::new(|x| vec![x.square().sum(&[0])])),
    ];
    for (i, (shape, dtype, body)) in cases.into_iter().enumerate() {
        let t = split_text(shape, dtype, body);
        assert_eq!(barriers(&t), 0, "case {i}: {t}");
    }
}

#[test]
fn only_cpu_programs_are_split() {
    use tessel_dsl::config::Platform;
    use tessel_dsl::runtime::Program;
    let specs = [("x".into(), TensorSpec::new(vec![16, 1024], F32))];
    let g = trace("rows", &specs, KernelConfig::default(), |a| {
        a[0].square().sum(&[-1])
    })
    .unwrap();
    let barrier = "stablehlo.optimization_barrier";
    let cpu = Program::for_platform(g.clone(), Some(Platform::Cpu));
    assert!(cpu.mlir.contains(barrier), "{}", cpu.mlir);
    // The graph kept for the interpreter is the traced one.
    assert!(!lower(cpu.graph.as_deref().unwrap()).contains(barrier));
    for other in [Some(Platform::Gpu), Some(Platform::Tpu), None] {
        let p = Program::for_platform(g.clone(), other);
        assert_eq!(p.mlir, lower(&g), "{other:?}");
    }
}

#[test]
fn reductions_marked_by_the_kernel_are_split_whatever_feeds_them() {
    use tessel_dsl::ir::ReduceKind;
    use tessel_dsl::ops::split_row_reduce;
    let barriers = |text: &str| text.matches("stablehlo.optimization_barrier").count();
    // A parameter and a result read twice: split when marked, rows of 16 on.
    let t = split_text(&[4, 3, 16], F32, |x| {
        let e = x.exp();
        vec![
            split_row_reduce(x, ReduceKind::Max),
            split_row_reduce(e, ReduceKind::Sum),
            e,
        ]
    });
    assert_eq!(barriers(&t), 2, "{t}");
    assert!(t.contains("tensor<4x3x2x8xf32>"), "{t}");
    // Not split: a row of 8, a row that is not a multiple of 8, integers.
    for (shape, dtype) in [(&[4, 8][..], F32), (&[4, 20], F32), (&[4, 64], S32)] {
        let t = split_text(shape, dtype, |x| vec![split_row_reduce(x, ReduceKind::Max)]);
        assert_eq!(barriers(&t), 0, "{shape:?} {dtype}: {t}");
    }
    // Unmarked, the parameter's reduction stays whole; marked, the traced
    // program is the plain reduction until it is prepared for the plugin.
    let plain = split_text(&[4, 64], F32, |x| vec![x.max(&[-1])]);
    assert_eq!(barriers(&plain), 0);
    let specs = [("x".into(), TensorSpec::new(vec![4, 64], F32))];
    let g = trace("marked", &specs, KernelConfig::default(), |a| {
        split_row_reduce(a[0], ReduceKind::Sum)
    })
    .unwrap();
    assert_eq!(barriers(&lower(&g)), 0);
    // Only sum, max and min combine rows this way: a trace error otherwise.
    let e = trace("marked_and", &specs, KernelConfig::default(), |a| {
        split_row_reduce(a[0].gt(0.0), ReduceKind::And)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("split_row_reduce") && e.contains("And"), "{e}");
}

#[test]
fn marked_row_reductions_match_f64_references() {
    use tessel_dsl::ir::ReduceKind;
    use tessel_dsl::ops::split_row_reduce;
    let mut rng = Rng::new(11);
    // Rows of 16 and 40 are split on the CPU plugin; 8 and 21 are not.
    let shapes: [&[usize]; 4] = [&[3, 16], &[2, 5, 40], &[7, 8], &[4, 21]];
    for dtype in [F32, F64] {
        let rtol = if dtype == F64 { 1e-13 } else { 2e-6 };
        for shape in shapes {
            let n = *shape.last().unwrap();
            let mut x = random(&mut rng, shape, dtype, -3.0, 3.0);
            if n == 40 {
                // A NaN and an infinity in rows of their own.
                let mut v = x.to_f64_vec();
                v[3] = f64::NAN;
                v[n + 5] = f64::INFINITY;
                x = tessel_testing::tensor(&v, shape, dtype);
            }
            let out = run(
                |t| {
                    vec![
                        split_row_reduce(t[0], ReduceKind::Sum),
                        split_row_reduce(t[0], ReduceKind::Max),
                        split_row_reduce(t[0], ReduceKind::Min),
                    ]
                },
                &[&x],
            );
            let xs = x.to_f64_vec();
            let rows = xs.chunks(n);
            let sums: Vec<f64> = rows.clone().map(|r| r.iter().sum()).collect();
            let abs: Vec<f64> = rows
                .clone()
                .map(|r| r.iter().map(|v| v.abs()).sum())
                .collect();
            let maxs: Vec<f64> = rows
                .clone()
                .map(|r| r.iter().copied().fold(f64::NEG_INFINITY, nan_max))
                .collect();
            let mins: Vec<f64> = rows
                .map(|r| r.iter().copied().fold(f64::INFINITY, nan_min))
                .collect();
            let what = format!("{dtype} {shape:?}");
            for (k, (want, scale)) in [(&sums, &abs), (&maxs, &maxs), (&mins, &mins)]
                .into_iter()
                .enumerate()
            {
                let got = out[k].to_f64_vec();
                for (i, ((g, w), s)) in got.iter().zip(want.iter()).zip(scale.iter()).enumerate() {
                    let same = (g.is_nan() && w.is_nan())
                        || g == w
                        || (g - w).abs() <= rtol * s.abs().max(1.0);
                    assert!(same, "{what} reduction {k} row {i}: got {g}, want {w}");
                }
            }
        }
    }
}

/// `max` that keeps NaN, as the plugin's reductions do.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `min` that keeps NaN.
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}
