//! `check` (JAX's `checkify`): a failed check inside a program is raised
//! after the run as `Error::Check` naming the kernel, the line and the
//! values; the first failure in program order wins, through loops,
//! branches and scans; on the CPU plugin and the interpreter alike. A
//! program whose checks hold returns its results unchanged, and a program
//! without checks is unchanged.

mod common;

use common::*;
use tessel_dsl::autodiff::vjp;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::CondBuilder;
use tessel_dsl::runtime::Device;
use tessel_dsl::{
    check, cond, fori_loop, scan, while_loop, CheckError, Error, HostTensor, Location, Tensor,
    TensorSpec, F32, S32,
};

fn devices() -> [Device; 2] {
    [device(), Device::interpreter()]
}

fn vec_f32(v: &[f32]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

fn vec_s32(v: &[i32]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), [v.len()]).unwrap()
}

fn check_error(r: tessel_dsl::Result<Vec<HostTensor>>) -> CheckError {
    match r {
        Err(Error::Check(c)) => *c,
        Err(e) => panic!("expected a check error, got {e}"),
        Ok(v) => panic!("expected a check error, got {} results", v.len()),
    }
}

/// `ids` must be in `0 .. x.dim(0)`; reports the ids and their count.
fn gather_checked(a: &[Tensor]) -> Tensor {
    let (x, ids) = (a[0], a[1]);
    let n = x.dim(0) as f64;
    check(
        ids.ge(0.0) & ids.lt(n),
        "ids {} out of 0..{}",
        &[ids, Tensor::scalar(n, S32)],
    );
    x.take(ids, 0) * 2.0
}

#[test]
fn a_holding_check_returns_the_results_and_a_failing_one_the_values() {
    for dev in devices() {
        let k = Kernel::new("gather_checked", gather_checked).params(["x", "ids"]);
        let x = vec_f32(&[1.0, 2.0, 3.0]);
        let out = k.run(&dev, &[&x, &vec_s32(&[2, 0])]).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![6.0, 2.0]);
        let e = check_error(k.run(&dev, &[&x, &vec_s32(&[1, -4])]));
        assert_eq!(e.kernel, "gather_checked");
        assert_eq!(e.message, "ids [1, -4] out of 0..3");
        assert_eq!(e.values, ["[1, -4]", "3"]);
        assert!(e.location.file.ends_with("checks.rs"), "{}", e.location);
        let shown = Error::from(e).to_string();
        assert!(
            shown.starts_with("kernel `gather_checked`: check failed at "),
            "{shown}"
        );
    }
}

#[test]
fn device_calls_are_checked_too() {
    let dev = device();
    let k = Kernel::new("gather_checked", gather_checked);
    let x = dev.to_device(&vec_f32(&[1.0, 2.0, 3.0])).unwrap();
    let good = dev.to_device(&vec_s32(&[1])).unwrap();
    let bad = dev.to_device(&vec_s32(&[3])).unwrap();
    let out = k.call(&dev, &[&x, &good]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_host().unwrap().to_vec::<f32>().unwrap(), [4.0]);
    match k.call(&dev, &[&x, &bad]) {
        Err(Error::Check(c)) => assert_eq!(c.message, "ids [3] out of 0..3"),
        other => panic!("{other:?}"),
    }
    // The executable's outputs are the body's.
    let exe = k
        .compile(&dev, &[x.spec().clone(), good.spec().clone()])
        .unwrap();
    assert_eq!(exe.outputs(), [TensorSpec::new([1], F32)]);
    assert_eq!(exe.check_sites().len(), 1);
}

#[test]
fn the_first_failing_check_in_program_order_is_reported() {
    let k = Kernel::new("two", |a: &[Tensor]| {
        let x = a[0];
        check(x.sum(&[0]).lt(100.0), "sum {}", &[x.sum(&[0])]);
        check(x.gt(0.0), "not positive: {}", &[x]);
        x + 1.0
    });
    for dev in devices() {
        let e = check_error(k.run(&dev, &[&vec_f32(&[-1.0, 2.0])]));
        assert_eq!(e.message, "not positive: [-1, 2]");
        let e = check_error(k.run(&dev, &[&vec_f32(&[-1.0, 200.0])]));
        assert_eq!(e.message, "sum 199");
    }
}

#[test]
fn a_loop_reports_its_first_failing_iteration() {
    // Iteration i fails when x[i] < 0; the message reports i and x[i].
    let k = Kernel::new("loop", |a: &[Tensor]| {
        let x = a[0];
        let n = x.dim(0) as i32;
        fori_loop(0, n, Tensor::scalar(0.0, F32), |i, acc| {
            let xi = x.dynamic_slice(&[i], &[1]).reshape(&[]);
            check(xi.ge(0.0), "x[{}] = {} is negative", &[i, xi]);
            acc + xi
        })
    });
    for dev in devices() {
        let out = k.run(&dev, &[&vec_f32(&[1.0, 2.0, 3.0])]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [6.0]);
        let e = check_error(k.run(&dev, &[&vec_f32(&[1.0, -2.0, -3.0])]));
        assert_eq!(e.message, "x[1] = -2 is negative");
    }
}

#[test]
fn nested_loops_and_a_while_with_a_check_before_it() {
    let k = Kernel::new("nested", |a: &[Tensor]| {
        let m = a[0]; // [r, c]
        let (r, c) = (m.dim(0) as i32, m.dim(1) as i32);
        check(m.lt(1000.0), "too large", &[]);
        let total = fori_loop(0, r, Tensor::scalar(0.0, F32), |i, acc| {
            fori_loop(0, c, acc, |j, acc| {
                let v = m.dynamic_slice(&[i, j], &[1, 1]).reshape(&[]);
                check(v.ne(7.0), "a 7 at ({}, {})", &[i, j]);
                acc + v
            })
        });
        let (_, doubled) = while_loop(
            (Tensor::scalar(0.0, S32), total),
            |(i, _)| i.lt(3),
            |(i, t)| {
                check(t.lt(100.0), "overflow at step {}", &[i]);
                (i + 1, t * 2.0)
            },
        );
        doubled
    });
    let m = |v: Vec<f32>| HostTensor::from_vec(v, [2, 3]).unwrap();
    for dev in devices() {
        let out = k
            .run(&dev, &[&m(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])
            .unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [168.0]);
        let e = check_error(k.run(&dev, &[&m(vec![1.0, 2.0, 3.0, 4.0, 7.0, 7.0])]));
        assert_eq!(e.message, "a 7 at (1, 1)");
        let e = check_error(k.run(&dev, &[&m(vec![1.0, 2.0, 3.0, 4.0, 7.0, 1e4])]));
        assert_eq!(e.message, "too large");
        let e = check_error(k.run(&dev, &[&m(vec![1.0, 2.0, 3.0, 4.0, 5.0, 26.0])]));
        assert_eq!(e.message, "overflow at step 2");
    }
}

#[test]
fn a_check_in_a_branch_that_did_not_run_does_not_fail() {
    let k = Kernel::new("branches", |a: &[Tensor]| {
        let (x, flag) = (a[0], a[1]);
        cond(
            flag.gt(0),
            || {
                check(x.gt(0.0), "then: {}", &[x]);
                x.sqrt()
            },
            || {
                check(x.lt(0.0), "else: {} {}", &[x, flag]);
                -x
            },
        )
    });
    let s = |v: i32| HostTensor::from_vec(vec![v], Vec::<usize>::new()).unwrap();
    for dev in devices() {
        let out = k.run(&dev, &[&vec_f32(&[4.0]), &s(1)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0]);
        let out = k.run(&dev, &[&vec_f32(&[-4.0]), &s(0)]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [4.0]);
        let e = check_error(k.run(&dev, &[&vec_f32(&[-4.0]), &s(1)]));
        assert_eq!(e.message, "then: [-4]");
        let e = check_error(k.run(&dev, &[&vec_f32(&[4.0]), &s(0)]));
        assert_eq!(e.message, "else: [4] 0");
    }
}

#[test]
fn a_branch_that_returns_nothing_still_reports_its_checks() {
    // What a kernel body's `if` that assigns nothing outside becomes.
    let k = Kernel::new("discarded", |a: &[Tensor]| {
        let x = a[0];
        let mut b = CondBuilder::begin(x.sum(&[0]).gt(10.0), Location::caller()).unwrap();
        check(x.lt(5.0), "big element in {}", &[x]);
        b.then_done(&[]);
        b.discard();
        x * 3.0
    });
    for dev in devices() {
        let out = k.run(&dev, &[&vec_f32(&[6.0, 1.0])]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [18.0, 3.0]);
        let e = check_error(k.run(&dev, &[&vec_f32(&[6.0, 6.0])]));
        assert_eq!(e.message, "big element in [6, 6]");
    }
}

#[test]
fn scans_and_gradients_carry_checks() {
    let k = Kernel::new("scan_grad", |a: &[Tensor]| {
        let xs = a[0];
        let f = |x: Tensor| {
            let (total, _) = scan(Tensor::scalar(0.0, F32), xs * x, |c, row| {
                check(row.lt(50.0), "row {} too big", &[row]);
                (c + row, row)
            });
            total
        };
        let (y, pullback) = vjp(f, Tensor::scalar(1.0, F32));
        let g = pullback.call(Tensor::scalar(1.0, F32));
        (y, g)
    });
    for dev in devices() {
        let out = k.run(&dev, &[&vec_f32(&[1.0, 2.0, 3.0])]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [6.0]);
        assert_eq!(out[1].to_vec::<f32>().unwrap(), [6.0]);
        let e = check_error(k.run(&dev, &[&vec_f32(&[1.0, 60.0, 70.0])]));
        assert_eq!(e.message, "row 60 too big");
    }
}

#[test]
fn misuses_are_kernel_errors_at_the_line() {
    let specs = [TensorSpec::new([3], F32)];
    let not_pred = Kernel::new("not_pred", |a: &[Tensor]| {
        check(a[0], "x", &[]);
        a[0]
    });
    let e = not_pred.trace(&specs).unwrap_err();
    let k = e.as_kernel_error().unwrap();
    assert_eq!(k.op, "check");
    assert!(k.message.contains("must be a pred tensor"), "{}", k.message);
    let holes = Kernel::new("holes", |a: &[Tensor]| {
        check(a[0].gt(0.0), "{} and {}", &[a[0]]);
        a[0]
    });
    let e = holes.trace(&specs).unwrap_err();
    assert!(
        e.to_string().contains("2 `{}` but 1 value is reported"),
        "{e}"
    );
    let in_condition = Kernel::new("in_condition", |a: &[Tensor]| {
        while_loop(
            a[0],
            |x| {
                check(x.gt(0.0), "cond", &[]);
                x.sum(&[0]).lt(10.0)
            },
            |x| x * 2.0,
        )
    });
    let e = in_condition.trace(&specs).unwrap_err();
    assert!(e.to_string().contains("loop condition"), "{e}");
}

#[test]
fn a_program_without_checks_is_unchanged_and_checks_add_results_only() {
    let specs = [TensorSpec::new([3], F32), TensorSpec::new([2], S32)];
    let plain = Kernel::new("g", |a: &[Tensor]| a[0].take(a[1], 0) * 2.0);
    let g = plain.trace(&specs).unwrap();
    assert!(g.checks.is_empty());
    assert_eq!(g.output_specs(), [TensorSpec::new([2], F32)]);
    let checked = Kernel::new("g", gather_checked);
    let g = checked.trace(&specs).unwrap();
    assert_eq!(g.num_body_outputs(), 1);
    // The body's result, then the code with the reported s32 scalar (the
    // bound) in one vector, then the reported ids.
    assert_eq!(
        g.output_specs(),
        [
            TensorSpec::new([2], F32),
            TensorSpec::new([2], S32),
            TensorSpec::new([2], S32),
        ]
    );
    assert_eq!(g.checks[0].message, "ids {} out of 0..{}");
}

mod families {
    use super::*;
    use tessel_dsl::config::{CheckFamilies, KernelConfig};
    use tessel_dsl::ops::ScatterCombine;
    use tessel_dsl::TakeMode;

    fn with(families: CheckFamilies) -> KernelConfig {
        KernelConfig::default().with_checks(families)
    }

    /// Every op a family checks, on `x: f32[4]`, `i: s32[]`, `n: s32[2]`.
    fn body(a: &[Tensor]) -> Vec<Tensor> {
        let (x, i, n) = (a[0], a[1], a[2]);
        let w = x.dynamic_slice(&[i], &[2]);
        let u = x.dynamic_update_slice(w * 2.0, &[i]);
        let t = x.take_with(n, 0, TakeMode::PromiseInBounds);
        let s = x.index_update(0, n, t, ScatterCombine::Add);
        let q = n / n.slice_axis(0, 1, 2);
        vec![u, s, x.sqrt(), q]
    }

    fn run(
        families: CheckFamilies,
        x: &[f32],
        i: i32,
        n: [i32; 2],
    ) -> tessel_dsl::Result<Vec<HostTensor>> {
        let k = Kernel::new("families", body).config(with(families));
        let i = HostTensor::from_vec(vec![i], Vec::<usize>::new()).unwrap();
        let n = HostTensor::from_vec(n.to_vec(), [2]).unwrap();
        k.run(&device(), &[&vec_f32(x), &i, &n])
    }

    #[test]
    fn each_family_reports_its_op() {
        let good = [1.0, 4.0, 9.0, 16.0];
        assert!(run(CheckFamilies::ALL, &good, 1, [0, 3]).is_ok());
        let index = CheckFamilies {
            index: true,
            ..CheckFamilies::NONE
        };
        let e = check_error(run(index, &good, 3, [0, 3]));
        assert_eq!(
            e.message,
            "dynamic_slice start (3) out of range: at most [2]"
        );
        let e = check_error(run(index, &good, 1, [0, 4]));
        assert_eq!(
            e.message,
            "gather indices [0, 4] out of range: at most [3] per index vector"
        );
        let nan = CheckFamilies {
            nan: true,
            ..CheckFamilies::NONE
        };
        let e = check_error(run(nan, &[1.0, -4.0, 9.0, 16.0], 1, [0, 3]));
        assert!(e.message.ends_with("produced a NaN"), "{}", e.message);
        let div = CheckFamilies {
            div: true,
            ..CheckFamilies::NONE
        };
        let e = check_error(run(div, &good, 1, [2, 0]));
        assert!(
            e.message.starts_with("integer") && e.message.ends_with("by zero"),
            "{}",
            e.message
        );
        // Off, the same inputs run: XLA clamps, skips, gives NaN and its
        // integer division by zero.
        assert!(run(CheckFamilies::NONE, &[1.0, -4.0, 9.0, 16.0], 3, [2, 4]).is_ok());
        // The check is located at the op's line.
        assert!(e.location.file.ends_with("checks.rs"), "{}", e.location);
    }

    #[test]
    fn families_off_leave_the_program_unchanged() {
        let specs = [
            TensorSpec::new([4], F32),
            TensorSpec::scalar(S32),
            TensorSpec::new([2], S32),
        ];
        let lower = |c: KernelConfig| Kernel::new("same", body).config(c).lower(&specs).unwrap();
        let plain = lower(KernelConfig::default());
        assert_eq!(lower(with(CheckFamilies::NONE)), plain);
        let checked = Kernel::new("same", body)
            .config(with(CheckFamilies::ALL))
            .trace(&specs)
            .unwrap();
        assert_eq!(checked.num_body_outputs(), 4);
        // dynamic_slice, dynamic_update_slice, gather, scatter; NaN checks
        // of the float results; one division.
        assert!(checked.checks.len() >= 7, "{}", checked.checks.len());
        let plain_graph = Kernel::new("same", body).trace(&specs).unwrap();
        assert!(plain_graph.checks.is_empty());
        assert!(checked.nodes.len() > plain_graph.nodes.len());
    }
}

#[test]
fn a_check_asked_for_once_per_region_is_made_again_outside_a_branch_that_made_it() {
    use tessel_dsl::kernel::KernelConfig;
    use tessel_dsl::ops::check::first_check;
    use tessel_dsl::trace;
    let specs = [("x".into(), TensorSpec::new([3], S32))];
    let g = trace("once", &specs, KernelConfig::default(), |a| {
        let x = a[0];
        let key = ("in range", 0, 9);
        let checked = move || {
            if first_check(&key, &[x]) {
                check(x.ge(0) & x.le(9), "x out of range", &[]);
            }
            x + 1
        };
        // A branch that runs only sometimes does not stand for the check
        // after it, which is made once however often it is asked for.
        let y = cond(x.sum(&[0]).gt(100), checked, move || x);
        let z = checked() + checked() + y;
        assert!(first_check(&key, &[z]));
        z
    })
    .unwrap();
    // One in the branch, one after it.
    assert_eq!(g.checks.len(), 2, "{:?}", g.checks);
    let k = Kernel::new("once_run", |a: &[Tensor]| {
        let x = a[0];
        if first_check(&1u8, &[x]) {
            check(x.ge(0), "negative", &[]);
        }
        if first_check(&1u8, &[x]) {
            check(x.lt(0), "never made", &[]);
        }
        vec![x]
    });
    let dev = device();
    assert!(k.run(&dev, &[&vec_s32(&[1, 2])]).is_ok());
    match k.run(&dev, &[&vec_s32(&[1, -2])]) {
        Err(Error::Check(c)) => assert_eq!(c.message, "negative"),
        other => panic!("{other:?}"),
    }
}

/// The reported s32 scalars travel in the checks' first result and the
/// other values as results of their own: a failing check after another
/// still reports each of its values, in its message's order, on both
/// devices.
#[test]
fn reported_scalars_and_tensors_keep_their_places() {
    let k = Kernel::new("mixed", |a: &[Tensor]| {
        let (x, ids) = (a[0], a[1]);
        let first = ids.sum(&[0]);
        check!(first.ge(0), "sum {} of {} below 0", first, ids);
        let top = ids.max(&[0]);
        check!(
            top.lt(3),
            "max {} (mean {}, ids {}, count {}) past 2",
            top,
            x.mean(&[0]),
            ids,
            ids.ne(0).cast(S32).sum(&[0])
        );
        x * 2.0
    });
    for dev in devices() {
        let x = vec_f32(&[1.0, 2.0]);
        let ok = k.run(&dev, &[&x, &vec_s32(&[0, 2])]).unwrap();
        assert_eq!(ok[0].to_f64_vec(), [2.0, 4.0]);
        let c = check_error(k.run(&dev, &[&x, &vec_s32(&[0, 7])]));
        assert_eq!(c.message, "max 7 (mean 1.5, ids [0, 7], count 1) past 2");
        let c = check_error(k.run(&dev, &[&x, &vec_s32(&[-9, 1])]));
        assert_eq!(c.message, "sum -8 of [-9, 1] below 0");
    }
}
