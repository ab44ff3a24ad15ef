//! The interpreter's checks (a NaN made from finite operands, start
//! indices XLA clamps), its errors for bad arguments, and its cost on long
//! loops.

mod common;
mod interp_common;

use common::*;
use interp_common::both;
use tessel_dsl::interp::{evaluate, Checks, FindingKind};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::{fori_loop, Error, InterpError, Tensor, TensorSpec, F32, S32};

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
    let e = evaluate(&g, &[x, s32(4)], Checks::default()).unwrap();
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
