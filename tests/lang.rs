//! The kernel language: each body rewrite gives the right numbers
//! (against plain-Rust references), on the CPU plugin.

use tessel::lang::ds;
use tessel::prelude::*;
use tessel_testing::{close_f32 as close, dev};

fn host(v: &[f32], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[cpu_kernel]
fn band(x: Tensor, lo: f32, hi: f32) -> Tensor {
    let inside = x >= lo && x < hi;
    let outside = x < lo || !(x < hi);
    inside.select(x, 0.0) + outside.select(1.0, 0.0) * 100.0
}

#[test]
fn comparisons_and_logic_on_tensors() {
    let x = host(&[-1.0, 0.0, 0.5, 1.0, 2.0, 0.99], &[6]);
    let y = band::run(&dev(), &x, 0.0, 1.0).unwrap();
    assert_eq!(f32s(&y), vec![100.0, 0.0, 0.5, 100.0, 100.0, 0.99]);
}

/// A number on the left of each comparison (mirrored by the rewrite), a
/// typed static on the left, and a method called on each result.
#[cpu_kernel]
fn literal_on_the_left(x: Tensor, n: usize, eps: f32) -> Tensor {
    let a = (0.0 < x).select(x, -x);
    let b = (-0.5 >= x).select(1.0, 0.0);
    let c = (2 == x.cast(S32)).cast(F32);
    let d = (eps < x).select(x, 0.0);
    let e = (1.5 != x).cast(F32) * if 0 < n { 1.0 } else { 2.0 };
    let f = (1 <= x.cast(S32)).cast(F32) + (3.0 > x).cast(F32);
    a + b + c + d + e + f * 10.0
}

#[test]
fn a_number_on_the_left_of_a_comparison() {
    let xs = [-1.0f32, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0];
    let (n, eps) = (3, 1.0f32);
    let y = literal_on_the_left::run(&dev(), &host(&xs, &[8]), n, eps).unwrap();
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| {
            let flag = |b: bool| if b { 1.0 } else { 0.0 };
            let a = if 0.0 < v { v } else { -v };
            let d = if eps < v { v } else { 0.0 };
            let f = flag(1 <= v as i32) + flag(3.0 > v);
            a + flag(-0.5 >= v) + flag(2 == v as i32) + d + flag(1.5 != v) + f * 10.0
        })
        .collect();
    assert_eq!(f32s(&y), want);
}

#[cpu_kernel]
fn static_branches(x: Tensor, mode: u32, scale: f32) -> Tensor {
    if mode == 0 {
        return x;
    }
    let mut y = x;
    if mode == 1 && scale > 0.0 {
        y = x * scale;
    } else if mode == 2 {
        y = x + scale;
    }
    let shift = if scale < 0.0 { -1.0 } else { 1.0 };
    y + shift
}

#[test]
fn static_if_is_plain_rust() {
    let d = dev();
    let x = host(&[1.0, 2.0], &[2]);
    assert_eq!(
        f32s(&static_branches::run(&d, &x, 0, 3.0).unwrap()),
        vec![1.0, 2.0]
    );
    assert_eq!(
        f32s(&static_branches::run(&d, &x, 1, 3.0).unwrap()),
        vec![4.0, 7.0]
    );
    assert_eq!(
        f32s(&static_branches::run(&d, &x, 2, 3.0).unwrap()),
        vec![5.0, 6.0]
    );
    assert_eq!(
        f32s(&static_branches::run(&d, &x, 2, -3.0).unwrap()),
        vec![-3.0, -2.0]
    );
    // Only the taken branch is traced: no conditional in the program.
    let spec = TensorSpec::new([2], F32);
    assert!(!static_branches::lower(&spec, 1, 3.0)
        .unwrap()
        .contains("stablehlo.if"));
}

/// `if let` on a static argument: a pattern match while tracing, kept as
/// written (it once was rewritten as a tensor condition and did not compile).
#[cpu_kernel]
fn pattern_branches(x: Tensor, shift: Option<usize>) -> Tensor {
    let mut y = x;
    if let Some(s) = shift {
        y = y + s as f32;
    } else if let Some(first) = x.shape().first() {
        y = y * *first as f32;
    }
    y
}

#[test]
fn if_let_is_plain_rust() {
    let d = dev();
    let x = host(&[1.0, 2.0], &[2]);
    assert_eq!(
        f32s(&pattern_branches::run(&d, &x, Some(3)).unwrap()),
        vec![4.0, 5.0]
    );
    assert_eq!(
        f32s(&pattern_branches::run(&d, &x, None).unwrap()),
        vec![2.0, 4.0]
    );
}

/// A tensor `if` that assigns two variables and also yields a value.
#[cpu_kernel]
fn clip_or_shift(x: Tensor, limit: Tensor) -> (Tensor, Tensor, Tensor) {
    let mut y = x;
    let mut flag = Tensor::scalar(0.0, F32);
    let total = x.sum(&[0]);
    let picked = if total > limit {
        y = x * 0.5;
        flag = flag + 1.0;
        total
    } else {
        y = y + 1.0;
        limit
    };
    (y, flag, picked)
}

#[test]
fn tensor_if_merges_assigned_variables() {
    let d = dev();
    let x = host(&[1.0, 2.0, 3.0], &[3]);
    let (y, f, p) = clip_or_shift::run(&d, &x, &HostTensor::scalar(5.0f32)).unwrap();
    assert_eq!(
        (f32s(&y), f32s(&f), f32s(&p)),
        (vec![0.5, 1.0, 1.5], vec![1.0], vec![6.0])
    );
    let (y, f, p) = clip_or_shift::run(&d, &x, &HostTensor::scalar(7.0f32)).unwrap();
    assert_eq!(
        (f32s(&y), f32s(&f), f32s(&p)),
        (vec![2.0, 3.0, 4.0], vec![0.0], vec![7.0])
    );
    let text = clip_or_shift::lower(x.spec(), &TensorSpec::scalar(F32)).unwrap();
    assert_eq!(text.matches("stablehlo.if").count(), 1);
}

/// Power iteration: a traced loop carrying two tensors.
#[cpu_kernel]
fn power_iteration(a: Tensor, v0: Tensor, steps: usize) -> (Tensor, Tensor) {
    let mut v = v0;
    let mut norm = Tensor::scalar(0.0, F32);
    for _ in 0..steps {
        let w = a.matmul(v);
        norm = w.square().sum(&[0]).sqrt();
        v = w / norm;
    }
    (v, norm)
}

fn power_ref(a: &[f64], n: usize, v0: &[f64], steps: usize) -> (Vec<f64>, f64) {
    let mut v = v0.to_vec();
    let mut norm = 0.0;
    for _ in 0..steps {
        let w: Vec<f64> = (0..n)
            .map(|i| (0..n).map(|j| a[i * n + j] * v[j]).sum())
            .collect();
        norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        v = w.iter().map(|x| x / norm).collect();
    }
    (v, norm)
}

#[test]
fn traced_for_carries_several_tensors() {
    let d = dev();
    let n = 5;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7 % 5) as f32) * 0.25 + if i % (n + 1) == 0 { 2.0 } else { 0.0 })
        .collect();
    let v0 = vec![1.0f32; n];
    for steps in [1, 7] {
        let (v, norm) =
            power_iteration::run(&d, &host(&a, &[n, n]), &host(&v0, &[n]), steps).unwrap();
        let a64: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
        let (vr, nr) = power_ref(&a64, n, &vec![1.0; n], steps);
        close(&f32s(&v), &vr, 1e-5);
        close(&f32s(&norm), &[nr], 1e-5);
    }
    let spec = TensorSpec::new([n, n], F32);
    let text = power_iteration::lower(&spec, &TensorSpec::new([n], F32), 7).unwrap();
    assert_eq!(
        text.matches("stablehlo.while").count(),
        1,
        "one XLA while, not unrolled"
    );
}

#[cpu_kernel]
fn nested_loops(x: Tensor, outer: i32, inner: i32) -> Tensor {
    let mut acc = x.zeros_like();
    for i in 0..outer {
        for j in 0..inner {
            acc = acc + x * (i * 10 + j).cast(F32);
        }
    }
    acc
}

#[test]
fn nested_traced_loops() {
    let x = host(&[1.0, -2.0], &[2]);
    let y = nested_loops::run(&dev(), &x, 3, 4).unwrap();
    let k: i32 = (0..3).flat_map(|i| (0..4).map(move |j| i * 10 + j)).sum();
    assert_eq!(f32s(&y), vec![k as f32, -2.0 * k as f32]);
}

#[cpu_kernel]
fn unrolled(x: Tensor, n: usize) -> (Tensor, Tensor) {
    let mut acc = x.zeros_like();
    #[unroll]
    for k in 0..n {
        acc = acc + x.slice_axis(0, k, k + 1).sum(&[0]) * (k + 1) as f32;
    }
    let mut parts = Vec::new();
    for k in 0..n {
        parts.push(x.slice_axis(0, k, k + 1));
    }
    (acc, concat(&parts, 0))
}

#[test]
fn unroll_and_assignment_free_loops_run_while_tracing() {
    let x = host(&[1.0, 2.0, 3.0], &[3]);
    let (acc, cat) = unrolled::run(&dev(), &x, 3).unwrap();
    assert_eq!(f32s(&acc), vec![14.0; 3]);
    assert_eq!(f32s(&cat), vec![1.0, 2.0, 3.0]);
    assert!(!unrolled::lower(x.spec(), 3).unwrap().contains("while"));
}

/// Doubles until the sum passes a traced limit: a `while` on a tensor.
#[cpu_kernel]
fn grow(x: Tensor, limit: Tensor) -> (Tensor, Tensor) {
    let mut y = x;
    let mut steps = Tensor::scalar(0.0, S32);
    while y.sum(&[0]) < limit {
        y = y * 2.0;
        steps = steps + 1;
    }
    (y, steps)
}

#[test]
fn tensor_while() {
    let d = dev();
    let x = host(&[1.0, 2.0], &[2]);
    let (y, s) = grow::run(&d, &x, &HostTensor::scalar(100.0f32)).unwrap();
    assert_eq!(
        (f32s(&y), s.to_vec::<i32>().unwrap()),
        (vec![64.0, 128.0], vec![6])
    );
    let (y, s) = grow::run(&d, &x, &HostTensor::scalar(0.0f32)).unwrap();
    assert_eq!(
        (f32s(&y), s.to_vec::<i32>().unwrap()),
        (vec![1.0, 2.0], vec![0])
    );
}

#[cpu_kernel]
fn static_while(x: Tensor, n: usize) -> Tensor {
    let mut k = 0;
    let mut y = x;
    while k < n {
        y = y + 1.0;
        k += 1;
    }
    y
}

#[test]
fn bool_while_is_a_rust_loop() {
    let x = host(&[1.0], &[1]);
    assert_eq!(f32s(&static_while::run(&dev(), &x, 4).unwrap()), vec![5.0]);
}

#[cpu_kernel]
fn indexing(x: Tensor, row: Tensor) -> (Tensor, Tensor, Tensor, Tensor) {
    let first = x[0];
    let cols = x[(.., 1..3)];
    let last = x[(-1, -1)];
    let mut y = x;
    y[(1, ..)] = first * 10.0;
    y[(0, 2)] = Tensor::scalar(-1.0, F32);
    let mut picked = x.zeros_like();
    for i in 0..2 {
        picked[(i, ..)] = x[row] + x[(i, ..)];
    }
    let window = x[(.., ds(row, 2))];
    (cols + last, y, picked, window)
}

#[test]
fn static_and_traced_indexing() {
    let x = host(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let (cols, y, picked, window) = indexing::run(&dev(), &x, &HostTensor::scalar(1i32)).unwrap();
    assert_eq!(f32s(&cols), vec![8.0, 9.0, 11.0, 12.0]);
    assert_eq!(f32s(&y), vec![1.0, 2.0, -1.0, 10.0, 20.0, 30.0]);
    assert_eq!(f32s(&picked), vec![5.0, 7.0, 9.0, 8.0, 10.0, 12.0]);
    assert_eq!(window.shape(), &[2, 2]);
    assert_eq!(f32s(&window), vec![2.0, 3.0, 5.0, 6.0]);
}

#[cpu_kernel]
fn plain_rust_inside(x: Tensor, sizes: Vec<usize>) -> Tensor {
    let mut v = vec![0usize; sizes.len()];
    v[0] = sizes[0] * 2;
    let total: usize = v.iter().sum::<usize>() + sizes[1..].iter().sum::<usize>();
    let ok = total > 3 && sizes.len() == 3;
    if ok {
        x * total as f32
    } else {
        x
    }
}

#[test]
fn plain_rust_values_keep_rust_semantics() {
    let x = host(&[1.0], &[1]);
    assert_eq!(
        f32s(&plain_rust_inside::run(&dev(), &x, vec![1, 2, 3]).unwrap()),
        vec![7.0]
    );
    assert_eq!(
        f32s(&plain_rust_inside::run(&dev(), &x, vec![1, 1]).unwrap()),
        vec![1.0]
    );
}

#[test]
fn trace_errors_in_rewritten_code_point_at_the_user_line() {
    #[cpu_kernel]
    fn bad_branch(x: Tensor, flag: Tensor) -> Tensor {
        let mut y = x;
        if flag > 0.0 {
            y = x.sum(&[0]);
        }
        y
    }
    let x = host(&[1.0, 2.0], &[2]);
    let err = bad_branch::run(&dev(), &x, &HostTensor::scalar(1.0f32)).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert_eq!(k.kernel, "bad_branch");
    assert!(k.location.file.ends_with("lang.rs"), "{}", k.location);
    assert!(
        k.message.contains("f32[]") && k.message.contains("f32[2]"),
        "{}",
        k.message
    );
}

#[cpu_kernel]
fn loops_by_source_type(x: Tensor, weights: Vec<f32>, n: usize) -> Tensor {
    // A Rust iterator: a Rust loop while tracing (one multiply per weight).
    let mut y = x;
    for w in weights.iter() {
        y = y * *w;
    }
    // Leaving early is Rust's too.
    let mut z = x;
    for (i, w) in weights.iter().enumerate() {
        if i == 1 {
            break;
        }
        z = z + *w;
    }
    // A range held in a variable drives one traced loop, as the syntax does.
    let r = 0..n;
    let mut t = x;
    for _ in r {
        t = t + 1.0;
    }
    y + z + t
}

#[test]
fn the_loop_source_type_decides_between_traced_and_rust_loops() {
    let x = host(&[1.0, 2.0], &[2]);
    let got = f32s(&loops_by_source_type::run(&dev(), &x, vec![2.0, 3.0], 4).unwrap());
    // y = 6x, z = x + 2, t = x + 4.
    let want: Vec<f32> = [1.0f32, 2.0].iter().map(|v| 8.0 * v + 6.0).collect();
    assert_eq!(got, want);
    let text = loops_by_source_type::lower(x.spec(), vec![2.0, 3.0], 4).unwrap();
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
}

#[cpu_kernel]
fn index_reads(x: Tensor, table: Vec<Vec<f32>>) -> Tensor {
    // Tensor reads (static, traced, tuple) and plain reads share the syntax.
    let first = x[0];
    let i = Tensor::scalar(1.0, S32);
    let second = x[i];
    let mut rows = table.clone();
    rows[0][1] = table[1][0] * 10.0;
    rows[1][0] += 1.0;
    // Through a reference, indexing auto-dereferences as in Rust.
    let first_row = &rows[0];
    let total = first_row[1] + rows[1][0] + rows[0].len() as f32;
    let by_ref = &x;
    by_ref[(1..,)].sum(&[0]) + first * second + total
}

#[test]
fn index_reads_work_on_tensors_and_rust_values() {
    let x = host(&[2.0, 3.0, 4.0], &[3]);
    let table = vec![vec![1.0, 2.0], vec![5.0, 6.0]];
    let got = f32s(&index_reads::run(&dev(), &x, table).unwrap());
    // (3 + 4) + 2 * 3 + (50 + 6 + 2)
    assert_eq!(got, vec![71.0]);
}

/// `x[i] = v` evaluates `v`, then `i`, then the place, as Rust does: both
/// may read `x`.
#[cpu_kernel]
fn assign_from_self(x: Tensor, row: Tensor, scale: Vec<f32>) -> (Tensor, Tensor) {
    let mut y = x;
    y[(1, ..)] = y[(0, ..)] * 2.0;
    y[row] = y[row] + y.sum(&[0, 1]);
    let mut s = scale;
    s[1] = s[0] + s[1];
    (y, x * s[1])
}

#[test]
fn index_assignment_may_read_its_target() {
    let x = host(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let (y, z) =
        assign_from_self::run(&dev(), &x, &HostTensor::scalar(0i32), vec![1.0, 2.0]).unwrap();
    // y = [[1, 2], [2, 4]], then row 0 += 9.
    assert_eq!(f32s(&y), vec![10.0, 11.0, 2.0, 4.0]);
    assert_eq!(f32s(&z), vec![3.0, 6.0, 9.0, 12.0]);
}

/// Assignments to a variable the same body also declares (later, or in a
/// nested block) are to the outer variable: the traced loop and branch
/// carry it.
#[cpu_kernel]
fn shadowing(x: Tensor, flag: Tensor, n: usize) -> (Tensor, Tensor) {
    let mut acc = x;
    let mut other = x;
    for i in 0..n {
        acc = acc + i.cast(F32);
        let acc = acc * 0.0;
        other = other + acc;
    }
    if flag > 0.0 {
        {
            let other = x * 10.0;
            acc = acc + other.sum(&[0]);
        }
        other = other * 2.0;
    }
    (acc, other)
}

#[test]
fn shadowed_names_are_still_carried() {
    let d = dev();
    let x = host(&[1.0, 2.0], &[2]);
    let on = shadowing::run(&d, &x, &HostTensor::scalar(1.0f32), 3).unwrap();
    assert_eq!(
        (f32s(&on.0), f32s(&on.1)),
        (vec![34.0, 35.0], vec![2.0, 4.0])
    );
    let off = shadowing::run(&d, &x, &HostTensor::scalar(0.0f32), 3).unwrap();
    assert_eq!(
        (f32s(&off.0), f32s(&off.1)),
        (vec![4.0, 5.0], vec![1.0, 2.0])
    );
}

/// A tensor `if` that assigns nothing outside and gives no value has no
/// effect: no conditional is traced, but its condition is still checked.
#[cpu_kernel]
fn no_effect(x: Tensor, c: Tensor) -> Tensor {
    if c > 0.0 {
        let _doubled = x * 2.0;
    }
    x + 1.0
}

#[test]
fn a_tensor_if_without_effect_traces_no_conditional() {
    let x = host(&[1.0, 2.0], &[2]);
    let y = no_effect::run(&dev(), &x, &HostTensor::scalar(1.0f32)).unwrap();
    assert_eq!(f32s(&y), vec![2.0, 3.0]);
    let text = no_effect::lower(x.spec(), &TensorSpec::scalar(F32)).unwrap();
    assert!(!text.contains("stablehlo.if"), "{text}");
    let err = no_effect::run(&dev(), &x, &x).unwrap_err();
    let k = err.as_kernel_error().expect("kernel error");
    assert!(k.message.contains("scalar pred"), "{}", k.message);
}

/// A labeled `break`/`continue` to a loop inside a traced loop or branch
/// stays inside it; `#[unroll]` may label its loop.
#[cpu_kernel]
fn labeled_exits(x: Tensor, c: Tensor, n: usize) -> Tensor {
    let mut acc = x.zeros_like();
    for i in 0..n {
        #[unroll]
        'rows: for k in 0..4usize {
            #[unroll]
            for j in 0..4usize {
                if j > k {
                    continue 'rows;
                }
                if k == 3 {
                    break 'rows;
                }
                acc = acc + (k * 10 + j) as f32;
            }
        }
        if c > 0.0 {
            'twice: for m in [1.0f32, 2.0, 4.0].iter() {
                if *m > 2.0 {
                    break 'twice;
                }
                acc = acc + i.cast(F32) * *m;
            }
        }
    }
    acc
}

#[test]
fn labeled_exits_inside_traced_code() {
    let x = host(&[0.0], &[1]);
    // Per iteration: (0) + (10 + 11) + (20 + 21 + 22) = 84, plus 3i when c > 0.
    let y = labeled_exits::run(&dev(), &x, &HostTensor::scalar(1.0f32), 3).unwrap();
    assert_eq!(f32s(&y), vec![3.0 * 84.0 + 3.0 * 3.0]);
    let y = labeled_exits::run(&dev(), &x, &HostTensor::scalar(0.0f32), 3).unwrap();
    assert_eq!(f32s(&y), vec![3.0 * 84.0]);
}

/// The guide's `check!` example (errors chapter).
#[cpu_kernel]
fn rows(x: Tensor, ids: Tensor) -> Tensor {
    let n = x.dim(0) as f64;
    check!(
        ids.ge(0.0) & ids.lt(n),
        "row ids {} out of 0..{}",
        ids,
        Tensor::scalar(n, S32)
    );
    x.take(ids, 0)
}

/// Checks in a body's traced `for` and in an `if` that assigns nothing
/// outside it: both reach the host.
#[cpu_kernel]
fn walk(x: Tensor, limit: Tensor) -> Tensor {
    let n = x.dim(0) as i32;
    let mut total = Tensor::scalar(0.0, F32);
    for i in 0..n {
        let xi = x[ds(i, 1)].reshape(&[]);
        check!(xi.ge(0.0), "x[{}] = {} is negative", i, xi);
        total = total + xi;
    }
    if total > limit {
        check!(total.lt(100.0), "total {} is far past the limit", total);
    }
    total
}

#[test]
fn checks_in_macro_kernels_are_raised_after_the_call() {
    let dev = dev();
    let x = host(&[1.0, 2.0, 3.0], &[3]);
    let ids = |v: Vec<i32>| HostTensor::from_vec(v, [2]).unwrap();
    assert_eq!(
        f32s(&rows::run(&dev, &x, &ids(vec![2, 0])).unwrap()),
        [3.0, 1.0]
    );
    match rows::run(&dev, &x, &ids(vec![1, 7])) {
        Err(Error::Check(c)) => {
            assert_eq!(c.kernel, "rows");
            assert_eq!(c.message, "row ids [1, 7] out of 0..3");
            assert!(c.location.file.ends_with("lang.rs"), "{}", c.location);
        }
        other => panic!("expected a check error, got {other:?}"),
    }
    let limit = |v: f32| HostTensor::from_vec(vec![v], Vec::<usize>::new()).unwrap();
    assert_eq!(f32s(&walk::run(&dev, &x, &limit(10.0)).unwrap()), [6.0]);
    assert_eq!(f32s(&walk::run(&dev, &x, &limit(1.0)).unwrap()), [6.0]);
    let neg = host(&[1.0, -2.0, -3.0], &[3]);
    match walk::run(&dev, &neg, &limit(10.0)) {
        Err(Error::Check(c)) => assert_eq!(c.message, "x[1] = -2 is negative"),
        other => panic!("expected a check error, got {other:?}"),
    }
    let big = host(&[50.0, 60.0, 0.0], &[3]);
    match walk::run(&dev, &big, &limit(10.0)) {
        Err(Error::Check(c)) => assert_eq!(c.message, "total 110 is far past the limit"),
        other => panic!("expected a check error, got {other:?}"),
    }
    assert_eq!(
        f32s(&walk::run(&dev, &big, &limit(200.0)).unwrap()),
        [110.0]
    );
}

/// `checks = "index"`: every dynamic index is checked.
#[cpu_kernel(checks = "index")]
fn window(x: Tensor, at: Tensor) -> Tensor {
    x[ds(at, 2)] * 2.0
}

#[test]
fn the_checks_option_turns_on_a_family() {
    const { assert!(window::CONFIG.checks.index && !window::CONFIG.checks.nan) };
    let dev = dev();
    let x = host(&[1.0, 2.0, 3.0], &[3]);
    let at = |v: i32| HostTensor::from_vec(vec![v], Vec::<usize>::new()).unwrap();
    assert_eq!(f32s(&window::run(&dev, &x, &at(1)).unwrap()), [4.0, 6.0]);
    match window::run(&dev, &x, &at(2)) {
        Err(Error::Check(c)) => {
            assert_eq!(
                c.message,
                "dynamic_slice start (2) out of range: at most [1]"
            )
        }
        other => panic!("expected a check error, got {other:?}"),
    }
}
