//! The StableHLO text: its structure, the user locations every op carries,
//! and that the text of each op family compiles on the XLA CPU plugin.

mod common;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::random::{random_bits, uniform};
use tessel_dsl::ops::{GatherDims, ScatterCombine, MAX_COND_DEPTH};
use tessel_dsl::runtime::Program;
use tessel_dsl::{
    concat, cond, fori_loop, optimization_barrier, while_loop, DType, DotDims, HostTensor, Tensor,
    TensorSpec, BF16, F16, F32, PRED, S32, S8, U8,
};

type Body = fn(&[Tensor]) -> Vec<Tensor>;

/// One kernel per op family, all over (x: f32[4,6], y: f32[6,4], i: s32[3], n: s32[]).
fn families() -> Vec<(&'static str, Body)> {
    vec![
        ("elementwise", |a| {
            let (x, i) = (a[0], a[2]);
            let e = (x.exp() + x.tanh() * 2.0 - x.erf()) / (x.abs() + 1.0);
            let c = x.gt(0.0).select(x.sqrt(), x.sin()).clamp(-1.0, 1.0);
            let b = (i.shift_left(2) ^ i.popcount()) & !i;
            vec![
                e,
                c.cast(BF16).cast(F32),
                b,
                x.is_finite(),
                x.round().pow(2.0).atan2(x),
            ]
        }),
        ("shape", |a| {
            let (x, y, n) = (a[0], a[1], a[3]);
            let t = x.t() + y.transpose(&[0, 1]).reshape(&[6, -1]);
            let s = t.slice(&[1, 0], &[6, 4], &[2, 2]).slice_axis(0, 0, 1);
            let d = x.dynamic_slice(&[n, n], &[2, 3]);
            let u = x.dynamic_update_slice(d * 0.0, &[n, n]);
            let c = concat(&[u, x.pad(0.0, &[0, 0], &[1, -5], &[0, 1])], 0);
            vec![
                s.expand_dims(0).squeeze(0),
                c,
                x.broadcast_in_dim([2, 4, 6], &[1, 2]),
                x.pad_to_multiple(1, 4, 0.0),
            ]
        }),
        ("reduce", |a| {
            let x = a[0];
            vec![
                x.sum(&[0]),
                x.prod(&[1]),
                x.max_keepdims(&[0, 1]),
                x.mean(&[-1]),
                x.gt(0.0).any(&[1]),
                x.gt(0.0).all(&[0]),
                x.argmax(1),
                x.argmin(0),
                x.softmax(1),
                x.logsumexp(0),
            ]
        }),
        ("linalg", |a| {
            let (x, y) = (a[0], a[1]);
            let d = DotDims {
                lhs_contract: vec![0],
                rhs_contract: vec![1],
                ..DotDims::default()
            };
            vec![
                x.matmul(y),
                x.dot_general(y, d, None, None),
                x.cast(BF16).matmul_acc(y.cast(BF16), F32),
            ]
        }),
        ("indexing", |a| {
            let (x, i) = (a[0], a[2]);
            let g = x.take(i, 1);
            let dims = GatherDims {
                offset_dims: vec![1],
                collapsed_slice_dims: vec![0],
                start_index_map: vec![0],
                index_vector_dim: 1,
            };
            let h = x.gather(i, dims, &[1, 6]);
            vec![
                g,
                h,
                x.index_update(1, i, g, ScatterCombine::Add),
                x.index_update(0, i, h, ScatterCombine::Set),
            ]
        }),
        ("sort", |a| {
            let x = a[0];
            let (k, v) = x.sort_with(x * 2.0, 1, true);
            let (tv, ti) = x.top_k(2);
            vec![x.sort(0, false), x.argsort(1, false), k, v, tv, ti]
        }),
        ("control", |a| {
            let (x, n) = (a[0], a[3]);
            let (_, y) = while_loop(
                (Tensor::scalar(0.0, S32), x),
                |(i, _)| i.lt(n),
                |(i, y)| (i + 1, y * 0.5),
            );
            let z = fori_loop(0, n, y, |i, c| cond(i.eq(1), || c + x, || c));
            let (p, q) = optimization_barrier((y, z));
            vec![p, q]
        }),
        ("random", |a| {
            let x = a[0];
            vec![
                random_bits(a[3], [3, 5]),
                uniform(7u32, [4], F32),
                x.dropout(0.5, 3u32),
            ]
        }),
        ("constants", |a| {
            let host = HostTensor::from_vec(vec![true, false, true], [3]).unwrap();
            vec![
                Tensor::constant(&host),
                Tensor::full([2], 1.0, PRED),
                Tensor::iota([2, 3], 1, F32),
                Tensor::arange(4, S32) + a[3],
                Tensor::constant(&HostTensor::from_vec(vec![1.5f32, -2.0], [2]).unwrap()),
            ]
        }),
    ]
}

fn specs() -> Vec<TensorSpec> {
    vec![
        spec(&[4, 6], F32),
        spec(&[6, 4], F32),
        spec(&[3], S32),
        spec(&[], S32),
    ]
}

/// The `loc(...)` of every op line: (op name, file, line).
fn op_locations(text: &str) -> Vec<(String, String, u32)> {
    text.lines()
        .filter_map(|l| {
            let at = l.rfind(" loc(\"")?;
            let rest = &l[at + 6..];
            let (name, rest) = rest.split_once("\"(\"")?;
            let (file, rest) = rest.split_once("\":")?;
            let line = rest.split(':').next()?.parse().ok()?;
            Some((name.to_string(), file.to_string(), line))
        })
        .collect()
}

#[test]
fn every_family_lowers_with_locations_in_this_file_and_compiles() {
    let dev = device();
    for (name, body) in families() {
        let graph = Kernel::new(format!("fam_{name}"), body)
            .params(["x", "y", "i", "n"])
            .trace(&specs())
            .unwrap();
        let text = tessel_dsl::lower::lower(&graph);
        assert!(
            text.starts_with(&format!("module @fam_{name} ")),
            "{name}: {text}"
        );
        assert!(
            text.contains("func.func public @main(%v0: tensor<4x6xf32> loc(\"x\")"),
            "{name}"
        );
        assert!(text.contains("loc(\"n\")"), "{name}");
        let locs = op_locations(&text);
        // Every op the results depend on is printed with its location (an
        // op nothing reads is left out).
        let live = graph.live_nodes().iter().filter(|&&l| l).count();
        assert!(
            locs.len() >= live && live > 0,
            "{name}: {} locations for {live} live ops",
            locs.len(),
        );
        for (op, file, line) in &locs {
            assert_eq!(file, file!(), "{name}: {op} is located in {file}:{line}");
            assert!(*line > 0);
        }
        let program = Program::new(
            name,
            text.clone(),
            graph.input_specs(),
            graph.output_specs(),
        );
        if let Err(e) = dev.compile(&program) {
            panic!("{name} does not compile: {e}\n{text}");
        }
    }
}

#[test]
fn a_kernel_with_every_family_runs() {
    let all = |a: &[Tensor]| {
        families()
            .into_iter()
            .flat_map(|(_, f)| f(a))
            .collect::<Vec<_>>()
    };
    let text = lower(all, &specs());
    for op in [
        "stablehlo.exponential",
        "chlo.erf",
        "stablehlo.select",
        "stablehlo.minimum",
        "stablehlo.convert",
        "stablehlo.shift_left",
        "stablehlo.popcnt",
        "stablehlo.not",
        "stablehlo.is_finite",
        "stablehlo.power",
        "stablehlo.atan2",
        "stablehlo.transpose",
        "stablehlo.reshape",
        "stablehlo.slice",
        "stablehlo.dynamic_slice",
        "stablehlo.dynamic_update_slice",
        "stablehlo.concatenate",
        "stablehlo.pad",
        "stablehlo.broadcast_in_dim",
        "stablehlo.reduce",
        "stablehlo.dot_general",
        "stablehlo.gather",
        "stablehlo.scatter",
        "stablehlo.sort",
        "chlo.top_k",
        "stablehlo.while",
        "stablehlo.if",
        "stablehlo.optimization_barrier",
        "stablehlo.iota",
        "stablehlo.constant",
        "stablehlo.shift_right_logical",
        "stablehlo.xor",
    ] {
        assert!(text.contains(&format!("\"{op}\"")), "{op} missing");
    }
    let mut rng = Rng::new(90);
    let x = random(&mut rng, &[4, 6], F32, -1.0, 1.0);
    let y = random(&mut rng, &[6, 4], F32, -1.0, 1.0);
    let i = tensor(&[0.0, 3.0, 1.0], &[3], S32);
    let out = run(all, &[&x, &y, &i, &s32(2)]);
    assert_eq!(out.len(), 42);
    // Spot check: the first elementwise result.
    let xv = x.to_f64_vec();
    let want: Vec<f64> = xv
        .iter()
        .map(|&v| (v.exp() + v.tanh() * 2.0 - erf(v)) / (v.abs() + 1.0))
        .collect();
    assert_close(&out[0], &want, Class::Transcendental, "first result");
}

/// erf via its Maclaurin series (plenty for |x| <= 1).
fn erf(x: f64) -> f64 {
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..40 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn locations_name_the_calling_line_and_column() {
    let line = line!() + 1;
    let text = lower(|a| a[0].exp(), &[spec(&[2], F32)]);
    let want = format!("loc(\"exponential\"(\"{}\":{line}:", file!());
    assert!(text.contains(&want), "{want} not in\n{text}");
    // Ops a method builds internally (a vector matmul's reshapes, keepdims,
    // softmax's pieces, fori_loop's counter) are located at the user's call.
    let s3 = [spec(&[3], F32)];
    let l1 = line!() + 1;
    let t1 = lower(|a| a[0].matmul(a[0]), &s3);
    let l2 = line!() + 1;
    let t2 = lower(|a| a[0].softmax(0), &s3);
    let l3 = line!() + 1;
    let t3 = lower(|a| fori_loop(0, 2, a[0], |_, c| c), &s3);
    for (text, line) in [(t1, l1), (t2, l2), (t3, l3)] {
        let locs = op_locations(&text);
        assert!(locs.len() >= 3, "{text}");
        for (op, file, l) in locs {
            assert_eq!((file.as_str(), l), (file!(), line), "{op}");
        }
    }
}

#[test]
fn module_and_parameter_names_are_sanitized_and_quoted() {
    let k = Kernel::new("my-kernel.v2", |a: &[Tensor]| a[0] + a[1]).params(["x", "we\"ird\\name"]);
    let specs = [spec(&[2], F32), spec(&[2], F32)];
    let text = k.lower(&specs).unwrap();
    assert!(text.starts_with("module @my_kernel_v2 "), "{text}");
    assert!(text.contains(r#"loc("we\"ird\\name")"#), "{text}");
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let out = k.run(&device(), &[&x, &x]).unwrap();
    check(
        &out[0],
        F32,
        &[2],
        &[2.0, 4.0],
        Class::Exact,
        "quoted names compile",
    );
}

#[test]
fn results_may_repeat_and_pass_parameters_through() {
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let p = HostTensor::from_vec(vec![true, false], [2]).unwrap();
    let out = run(|a| (a[0], a[0] * 2.0, a[0], a[1]), &[&x, &p]);
    assert_eq!(out.len(), 4);
    check(&out[0], F32, &[2], &[1.0, 2.0], Class::Exact, "parameter");
    check(&out[1], F32, &[2], &[2.0, 4.0], Class::Exact, "computed");
    check(&out[2], F32, &[2], &[1.0, 2.0], Class::Exact, "repeated");
    check(
        &out[3],
        PRED,
        &[2],
        &[1.0, 0.0],
        Class::Exact,
        "pred parameter",
    );
    let text = lower(|a| a[0], &[spec(&[2], F32)]);
    assert!(text.contains("func.return %v0 : tensor<2xf32>"), "{text}");
}

#[test]
fn multi_result_ops_and_constants_print_as_expected() {
    let text = lower(
        |a| {
            let host = HostTensor::from_vec(vec![true, false, true, true], [2, 2]).unwrap();
            (
                a[0].argmax(0),
                Tensor::constant(&host),
                Tensor::full([3], 1.0, PRED),
                Tensor::full([2], 1.5, F32),
            )
        },
        &[spec(&[5], F32)],
    );
    assert!(text.contains(":2 = \"stablehlo.reduce\""), "{text}");
    assert!(text.contains("#1"), "{text}");
    assert!(
        text.contains("dense<[[true, false], [true, true]]> : tensor<2x2xi1>"),
        "{text}"
    );
    assert!(text.contains("dense<true> : tensor<3xi1>"), "{text}");
    // 1.5f32 = 0x3FC00000, little-endian bytes.
    assert!(
        text.contains("dense<\"0x0000C03F\"> : tensor<2xf32>"),
        "{text}"
    );
}

#[test]
fn compile_hints_come_from_the_graph() {
    use tessel_dsl::kernel::KernelConfig;
    use tessel_dsl::lower::compile_hints;
    let hint = |dtype: DType, body: fn(&[Tensor]) -> Tensor| {
        let specs = [
            ("a".to_string(), TensorSpec::new([4, 8], dtype)),
            ("b".to_string(), TensorSpec::new([8, 2], dtype)),
        ];
        let g = tessel_dsl::trace("h", &specs, KernelConfig::default(), body).unwrap();
        compile_hints(&g).bf16_dots_keep_f32
    };
    // bf16 x bf16 accumulated in f32 and kept: eligible.
    assert!(hint(BF16, |a| a[0].matmul_acc(a[1], F32)));
    // Kept, then used in f32 arithmetic before a narrowing: still eligible.
    assert!(hint(BF16, |a| (a[0].matmul_acc(a[1], F32) * 2.0).cast(BF16)));
    // Narrowed straight back to bf16: XLA folds it into a bf16-output dot.
    assert!(!hint(BF16, |a| a[0].matmul_acc(a[1], F32).cast(BF16)));
    // A bf16-output dot.
    assert!(!hint(BF16, |a| a[0].matmul(a[1])));
    // No bf16 dots at all.
    assert!(!hint(F32, |a| a[0].matmul(a[1])));
    assert!(!hint(BF16, |a| a[0].sum(&[1])));

    // 8-bit integer dots with s32 results, alone or beside bf16 dots that
    // keep f32; not beside a dot that a library would round differently.
    let hints_of = |specs: &[DType], body: fn(&[Tensor]) -> Tensor| {
        let specs: Vec<(String, TensorSpec)> = specs
            .iter()
            .enumerate()
            .map(|(i, &d)| (format!("x{i}"), TensorSpec::new([8, 8], d)))
            .collect();
        let g = tessel_dsl::trace("h", &specs, KernelConfig::default(), body).unwrap();
        compile_hints(&g)
    };
    let int8 = |specs: &[DType], body: fn(&[Tensor]) -> Tensor| hints_of(specs, body).int8_dots;
    assert!(int8(&[S8, S8], |a| a[0].matmul_acc(a[1], S32)));
    assert!(int8(&[U8, U8], |a| a[0].matmul_acc(a[1], S32)));
    assert!(!int8(&[S8, S8], |a| a[0].cast(F32).matmul(a[1].cast(F32))));
    let with_bf16 = |keep: bool| {
        let f: fn(&[Tensor]) -> Tensor = if keep {
            |a| a[0].matmul_acc(a[1], S32).cast(F32) + a[2].matmul_acc(a[3], F32)
        } else {
            |a| a[0].matmul_acc(a[1], S32).cast(F32) + a[2].matmul(a[3]).cast(F32)
        };
        int8(&[S8, S8, BF16, BF16], f)
    };
    assert!(with_bf16(true));
    assert!(!with_bf16(false));
    let with_f16: fn(&[Tensor]) -> Tensor =
        |a| a[0].matmul_acc(a[1], S32).cast(F32) + a[2].matmul_acc(a[3], F32);
    assert!(!int8(&[S8, S8, F16, F16], with_f16));

    // Any bf16 dot, narrowed or not, but no f16 dot.
    let bf16 = |specs: &[DType], body: fn(&[Tensor]) -> Tensor| hints_of(specs, body).bf16_dots;
    assert!(bf16(&[BF16, BF16], |a| a[0].matmul(a[1])));
    assert!(bf16(&[BF16, BF16], |a| a[0].matmul_acc(a[1], F32)));
    assert!(!bf16(&[F32, F32], |a| a[0].matmul(a[1])));
    let bf16_and_f16: fn(&[Tensor]) -> Tensor =
        |a| a[0].matmul_acc(a[1], F32) + a[2].matmul_acc(a[3], F32);
    assert!(!bf16(&[BF16, BF16, F16, F16], bf16_and_f16));
    // The library options apply to every dot: an f16 dot beside bf16 dots
    // that keep f32 keeps the whole program on XLA's emitter.
    assert!(!hints_of(&[BF16, BF16, F16, F16], bf16_and_f16).bf16_dots_keep_f32);
    assert!(hints_of(&[BF16, BF16, F32, F32], bf16_and_f16).bf16_dots_keep_f32);
}

/// `depth` loops nested inside each other, each adding one to a counter.
fn nested_loops(depth: usize, x: Tensor) -> Tensor {
    if depth == 0 {
        return x + 1.0;
    }
    fori_loop(0, 1, x, |_, c| nested_loops(depth - 1, c))
}

#[test]
fn deep_nesting_lowers_in_linear_size() {
    // Tracing the nest recurses in this test's own code: give it room.
    let run = || {
        let spec = TensorSpec::new([2], F32);
        let text = |depth: usize| {
            let k =
                tessel_dsl::kernel::Kernel::new(format!("nest{depth}"), move |a: &[Tensor]| {
                    nested_loops(depth, a[0])
                });
            (k.lower(std::slice::from_ref(&spec)).unwrap(), k)
        };
        let (small, _) = text(100);
        let (big, k) = text(10_000);
        let graph = k.trace(std::slice::from_ref(&spec)).unwrap();
        assert_eq!(tessel_dsl::lower::nesting_depth(&graph), 10_000);
        // Linear: 100x the depth is about 100x the text (no copies per level,
        // indentation capped).
        let ratio = big.len() as f64 / small.len() as f64;
        assert!(ratio < 125.0, "{} vs {} bytes", big.len(), small.len());
        // A nest deeper than the caller's stack would print on runs too.
        let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
        let (_, k) = text(80);
        let out = k.run(&device(), &[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    };
    on_a_large_stack(run);
}

/// 1,000 nested loops compile and run (XLA's compiler recurses per level:
/// compiling runs on a thread with a large stack). About a minute of XLA
/// compile time, so not in the default run:
/// `cargo test -p tessel-dsl --test lowering -- --ignored`.
#[test]
#[ignore]
fn a_thousand_nested_loops_compile_and_run() {
    let run = || {
        let k =
            tessel_dsl::kernel::Kernel::new("nest1000", |a: &[Tensor]| nested_loops(1000, a[0]));
        let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
        let out = k.run(&device(), &[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    };
    on_a_large_stack(run);
}

/// `depth` conditionals nested inside each other's true branch.
fn nested_conds(depth: usize, x: Tensor) -> Tensor {
    if depth == 0 {
        return x + 1.0;
    }
    let positive = x.sum(&[0]).gt(-1e30);
    tessel_dsl::cond(positive, || nested_conds(depth - 1, x), || x)
}

/// Conditionals nested past `MAX_COND_DEPTH` are a kernel error at the `if`
/// that passes it (XLA's compile time grows faster than the square of the
/// depth: 1,000 did not finish); the deepest allowed nest compiles and runs.
#[test]
fn conditionals_nested_past_the_limit_are_a_kernel_error() {
    let run = || {
        let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
        let spec = x.spec().clone();
        for depth in [MAX_COND_DEPTH + 1, 1000] {
            let k = tessel_dsl::kernel::Kernel::new("deep_if", move |a: &[Tensor]| {
                nested_conds(depth, a[0])
            });
            let t = std::time::Instant::now();
            let e = k.lower(std::slice::from_ref(&spec)).unwrap_err();
            let k = e.as_kernel_error().expect("a kernel error");
            assert_eq!(k.op, "cond");
            assert!(k.message.contains("nested more than 128 deep"), "{e}");
            assert!(k.location.file.ends_with("lowering.rs"), "{e}");
            assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
        }
        let k = tessel_dsl::kernel::Kernel::new("deepest_if", |a: &[Tensor]| {
            nested_conds(MAX_COND_DEPTH, a[0])
        });
        let out = k.run(&device(), &[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    };
    on_a_large_stack(run);
}

/// Runs `f` on a thread with a 256 MiB stack (deep nests recurse in the
/// test's own builders and in XLA's compiler), failing if it panics.
fn on_a_large_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(1 << 28)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn ops_the_results_do_not_read_are_not_printed() {
    let text = lower(
        |a| {
            let unused = a[0].exp();
            let _ = unused.sum(&[0]);
            a[0] * 2.0
        },
        &[spec(&[3], F32)],
    );
    assert!(!text.contains("stablehlo.exponential"), "{text}");
    assert!(text.contains("stablehlo.multiply"), "{text}");
}

#[test]
fn rewritten_row_reductions_keep_the_nodes_they_insert() {
    // The CPU lowering splits long row reductions by inserting nodes into
    // the region; the printed program keeps every node a result reads.
    let x =
        HostTensor::from_vec((0..3 * 72).map(|i| i as f32).collect::<Vec<_>>(), [3, 72]).unwrap();
    let out = run(|a| (a[0] * a[0]).min(&[1]), &[&x]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![0.0, 5184.0, 20736.0]);
}
