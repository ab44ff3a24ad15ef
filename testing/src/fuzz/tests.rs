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
