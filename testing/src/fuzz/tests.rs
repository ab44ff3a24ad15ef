//! The fuzzer's own pieces, without the plugin: generated programs are
//! well-typed and deterministic, pruning and renumbering keep them so, and
//! the printer covers what the generator makes.

use super::*;

#[test]
fn generated_programs_are_well_typed_and_deterministic() {
    for seed in 0..300 {
        let c = generate(seed);
        let mut p = c.program.clone();
        retype(&mut p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(p, c.program, "seed {seed}: retyping changes nothing");
        assert_eq!(generate(seed).program, c.program, "seed {seed}");
        assert_eq!(c.args.len(), p.params.len());
        for (a, &v) in c.args.iter().zip(&p.params) {
            assert_eq!(a.spec(), p.spec(v), "seed {seed}");
        }
        assert!(!p.outputs.is_empty());
    }
}

#[test]
fn pruning_and_renumbering_keep_programs_well_typed() {
    for seed in 0..100 {
        let mut c = generate(seed);
        c.program.outputs.truncate(1);
        c.program.prune(Some(&mut c.args));
        let mut p = renumber(&c.program);
        assert!(p.size() <= generate(seed).program.size());
        assert_eq!(
            p.specs.len(),
            count_values(&p),
            "seed {seed}: dense numbers"
        );
        retype(&mut p).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(c.args.len(), p.params.len());
    }
}

/// The values `p` defines: parameters, block parameters and results.
fn count_values(p: &Program) -> usize {
    fn walk(insts: &[Inst]) -> usize {
        insts
            .iter()
            .map(|i| {
                let blocks: usize =
                    i.op.blocks()
                        .iter()
                        .map(|b| b.params.len() + walk(&b.insts))
                        .sum();
                i.outs.len() + blocks
            })
            .sum()
    }
    p.params.len() + walk(&p.insts)
}

#[test]
fn printed_programs_bind_every_value_they_read() {
    for seed in 0..100 {
        let c = generate(seed);
        let text = to_rust(&c, "case", "A case.");
        assert!(text.contains("assert_agree(&args"), "{text}");
        for o in &c.program.outputs {
            assert!(text.contains(&format!("let v{} = ", o.value)), "{text}");
        }
    }
}

#[test]
fn floats_print_as_rust_that_reads_back() {
    assert_eq!(float(1.5), "1.5");
    assert_eq!(float(-0.0), "-0.0");
    assert_eq!(float(f64::NEG_INFINITY), "f64::NEG_INFINITY");
    assert_eq!(float(-f64::NAN), "-f64::NAN");
    let tiny = f64::from(f32::from_bits(1));
    assert_eq!(float(tiny).parse::<f64>(), Ok(tiny));
}

#[test]
fn tolerances_count_ulps_per_term() {
    use tessel_dsl::DType;
    assert!(compare::agrees(
        DType::F32,
        1.0 + 4.0 * f64::from(f32::EPSILON),
        1.0,
        1
    ));
    assert!(!compare::agrees(
        DType::F32,
        1.0 + f64::from(f32::EPSILON),
        1.0,
        0
    ));
    assert!(
        !compare::agrees(DType::F32, -0.0, 0.0, 0),
        "exact: the sign of zero counts"
    );
    assert!(compare::agrees(DType::F32, -0.0, 0.0, 1));
    assert!(compare::agrees(DType::S32, 3.0, 3.0, 0));
    assert!(compare::agrees(DType::BF16, f64::NAN, -f64::NAN, 0));
}

#[test]
fn some_programs_reduce_rows_the_cpu_compile_splits() {
    // Rows of 64 or more along the last axis of a rank-2-or-more value,
    // which only `long_rows` makes (parameters have at most 7 elements
    // per axis).
    fn splits(p: &Program, insts: &[Inst]) -> bool {
        insts.iter().any(|i| {
            let long = match &i.op {
                Op::Reduce(_, x, axes) => {
                    let s = p.spec(*x);
                    s.rank() >= 2 && axes == &[s.rank() - 1] && s.shape[s.rank() - 1] >= 64
                }
                _ => false,
            };
            long || i.op.blocks().iter().any(|b| splits(p, &b.insts))
        })
    }
    let hits = (0..2000)
        .filter(|&seed| {
            let c = generate(seed);
            splits(&c.program, &c.program.insts)
        })
        .count();
    assert!(hits >= 30, "{hits} of 2000 programs reduce long rows");
}

/// `x.clamp(x, x)` over one f64 parameter `x`, or with `x` cast to s32
/// first when `integer`.
fn self_clamp(integer: bool) -> Program {
    let wide = TensorSpec::new([3], tessel_dsl::DType::F64);
    let int = TensorSpec::new([3], tessel_dsl::DType::S32);
    let (mut insts, mut specs, x) = (Vec::new(), vec![wide.clone()], if integer { 1 } else { 0 });
    if integer {
        insts.push(Inst {
            outs: vec![1],
            op: Op::Cast(0, tessel_dsl::DType::S32),
        });
        specs.push(int.clone());
    }
    insts.push(Inst {
        outs: vec![x + 1],
        op: Op::Clamp(x, x, x),
    });
    specs.push(if integer { int } else { wide });
    Program {
        params: vec![0],
        insts,
        outputs: vec![Output {
            value: x + 1,
            terms: 0,
        }],
        specs,
    }
}

#[test]
fn clamps_that_may_tie_are_moved_apart_unless_their_bounds_are_integers() {
    use super::grad::SkipKind::TiedClamp;
    use super::ties::{not_comparable, untie_clamps};
    let mut p = self_clamp(false);
    assert_eq!(not_comparable(&p), Some(TiedClamp));
    untie_clamps(&mut p);
    let mut typed = p.clone();
    retype(&mut typed).unwrap();
    assert_eq!(typed, p);
    assert_eq!(not_comparable(&p), None, "{p:?}");
    // Both bounds moved, each by its own constant: the clamp is the identity.
    let Some(Inst {
        op: Op::Clamp(0, lo, hi),
        ..
    }) = p.insts.last()
    else {
        panic!("{p:?}")
    };
    assert!(*lo != 0 && *hi != 0 && lo != hi, "{p:?}");
    // A bound put back (as a shrink may) ties again.
    if let Some(Inst {
        op: Op::Clamp(_, lo, _),
        ..
    }) = p.insts.last_mut()
    {
        *lo = 0;
    }
    assert_eq!(not_comparable(&p), Some(TiedClamp));
    // Integer bounds (of a float parameter) are left as they are, and skipped.
    let mut q = self_clamp(true);
    assert_eq!(not_comparable(&q), Some(TiedClamp));
    untie_clamps(&mut q);
    assert_eq!(q, self_clamp(true));
    assert_eq!(not_comparable(&q), Some(TiedClamp));
    // Across generated programs: the rewritten ones type, and most clamps
    // that were skipped are now compared.
    let (mut tied, mut untied) = (0, 0);
    for seed in 0..400 {
        let mut p = generate(seed).program;
        super::grad::widen_floats(&mut p).unwrap();
        let before = not_comparable(&p);
        untie_clamps(&mut p);
        let mut typed = p.clone();
        retype(&mut typed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let after = not_comparable(&p);
        if before == Some(TiedClamp) {
            tied += 1;
            untied += usize::from(after != Some(TiedClamp));
        } else {
            assert_eq!(after, before, "seed {seed}");
        }
    }
    assert!(untied * 2 > tied, "{untied} of {tied} untied");
}

#[test]
fn a_clamped_value_may_tie_the_moved_bound_it_was_clamped_to() {
    use super::grad::SkipKind::TiedClamp;
    use super::ties::{not_comparable, repeats_a_float, untie_clamps};
    let mut p = self_clamp(false);
    untie_clamps(&mut p);
    assert_eq!(not_comparable(&p), None);
    let Some(Inst {
        op: Op::Clamp(_, lo, hi),
        outs,
    }) = p.insts.last().cloned()
    else {
        panic!("{p:?}")
    };
    // `y = x.clamp(lo', hi')` may be `hi'`, so `y.clamp(lo', hi')` ties.
    let y = outs[0];
    let z = p.fresh(p.spec(y).clone());
    p.insts.push(Inst {
        outs: vec![z],
        op: Op::Clamp(y, lo, hi),
    });
    p.outputs[0].value = z;
    assert_eq!(not_comparable(&p), Some(TiedClamp));
    // Arguments: continuous ones hold no value twice, a shrunk 0 may.
    let (mut c, k) = (0..)
        .find_map(|seed| {
            let c = super::grad::grad_case(seed).expect("an all-f64 program");
            let k = c
                .args
                .iter()
                .position(|a| a.dtype().is_float() && a.num_elements() > 1)?;
            Some((c, k))
        })
        .unwrap();
    assert!(!repeats_a_float(&c));
    let spec = c.args[k].spec().clone();
    c.args[k] = tessel_dsl::HostTensor::from_fn(spec, |_| 0.0);
    assert!(repeats_a_float(&c));
}

#[test]
fn a_64_bit_integer_cast_to_a_float_and_added_to_a_parameter_is_not_compared() {
    // Found by the gradient fuzzer (seed 12004548): `x + f64(u64(i))` with
    // `i = -8` is `x + 1.8e19`, constant in `x` to f64, but its gradient is 1.
    use super::grad::SkipKind::Absorbed;
    use super::ties::{holds_a_huge_float, not_comparable};
    use tessel_dsl::DType::{F64, S32, U64};
    let program = |wide: tessel_dsl::DType, add: bool| {
        let specs = vec![
            TensorSpec::new([2], F64),
            TensorSpec::new([2], S32),
            TensorSpec::new([2], wide),
            TensorSpec::new([2], F64),
            TensorSpec::new([2], F64),
        ];
        let mut insts = vec![
            Inst {
                outs: vec![2],
                op: Op::Cast(1, wide),
            },
            Inst {
                outs: vec![3],
                op: Op::Cast(2, F64),
            },
        ];
        let mut out = 3;
        if add {
            insts.push(Inst {
                outs: vec![4],
                op: Op::Binary(super::program::Binary::Add, 0, 3),
            });
            out = 4;
        }
        Program {
            params: vec![0, 1],
            insts,
            outputs: vec![Output {
                value: out,
                terms: 0,
            }],
            specs,
        }
    };
    assert_eq!(not_comparable(&program(U64, true)), Some(Absorbed));
    // A 32-bit integer's magnitude does not absorb a parameter to f64, and
    // a huge value that meets no float parameter absorbs nothing.
    assert_eq!(not_comparable(&program(S32, true)), None);
    assert_eq!(not_comparable(&program(U64, false)), None);
    // A shrink that turns such a value into an argument is not taken.
    let mut c = super::grad::grad_case(0).expect("an all-f64 program");
    assert!(!holds_a_huge_float(&c));
    if let Some(a) = c.args.iter_mut().find(|a| a.dtype().is_float()) {
        *a = tessel_dsl::HostTensor::from_fn(a.spec().clone(), |_| 1.8e19);
    }
    assert!(holds_a_huge_float(&c));
}

#[test]
fn a_failure_that_needs_unused_code_still_shrinks() {
    // Fails while some instruction's result or parameter goes unread: what
    // pruning removes is what it needs.
    let has_unused_code = |c: &Case| {
        let mut p = c.program.clone();
        p.prune(None);
        (p != c.program).then(|| "unused code".to_string())
    };
    let mut shrunk_some = 0;
    for seed in 0..40 {
        let mut c = generate(seed);
        c.program = all_outputs(&c.program);
        let last = *c.program.outputs.last().unwrap();
        c.program.outputs = vec![last];
        if has_unused_code(&c).is_none() || c.program.size() < 4 {
            continue;
        }
        let budget = Budget {
            tries: 400,
            time: std::time::Duration::from_secs(20),
        };
        let s = shrink_with(&c, "unused code", budget, &has_unused_code);
        assert!(has_unused_code(&s.case).is_some(), "seed {seed}");
        assert!(
            s.case.program.size() <= c.program.size() / 2,
            "seed {seed}: {} of {} instructions left",
            s.case.program.size(),
            c.program.size()
        );
        shrunk_some += 1;
    }
    assert!(shrunk_some >= 10, "{shrunk_some} cases had unused code");
}
