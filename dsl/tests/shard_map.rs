//! Per-device kernels (`run_shard_map`) and their collectives on 2- and
//! 4-device CPU clients, each against a plain-Rust reference computed from
//! the whole host tensor: psum / pmax / pmin over one axis and both axes of
//! a 2-D mesh, all_gather, psum_scatter, all_to_all, ppermute, axis_index,
//! a psum inside a traced loop, s32 and f32 elements; and the errors.

use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::{axis_index, fori_loop};
use tessel_dsl::prelude::*;
use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};

const R: usize = 4;
const C: usize = 6;

fn p(axes: &[Option<&str>]) -> PartitionSpec {
    PartitionSpec::new(axes.iter().copied())
}

/// `x[r][c]`, uneven values.
fn x_at(r: usize, c: usize) -> f64 {
    ((r * 37 + c * 11) % 23) as f64 - 9.5 + 0.25 * c as f64
}

fn x_host(dtype: DType) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new([R, C], dtype), |i| {
        let v = x_at(i / C, i % C);
        if dtype.is_integer() {
            v.round()
        } else {
            v
        }
    })
}

/// The 2 × 2 mesh `data` × `model` on a 4-device client.
fn mesh4() -> Mesh {
    let dev = Device::cpu_with_devices(4).expect("4-device client");
    Mesh::new(&dev, &[("data", 2), ("model", 2)]).expect("mesh")
}

/// The block of device `(d, m)` of `x` split as `P(data, model)`: rows
/// `2d..2d+2`, columns `3m..3m+3`.
fn block(d: usize, m: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for r in 2 * d..2 * d + 2 {
        for c in 3 * m..3 * m + 3 {
            out.push(x_at(r, c));
        }
    }
    out
}

/// The whole `[4, 6]` tensor whose `(d, m)` block is `f(d, m)`.
fn assemble(f: impl Fn(usize, usize) -> Vec<f64>) -> Vec<f64> {
    let mut out = vec![0.0; R * C];
    for d in 0..2 {
        for m in 0..2 {
            let b = f(d, m);
            for (i, v) in b.iter().enumerate() {
                out[(2 * d + i / 3) * C + 3 * m + i % 3] = *v;
            }
        }
    }
    out
}

fn close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

fn split2() -> Shardings {
    Shardings::new(
        [p(&[Some("data"), Some("model")])],
        [p(&[Some("data"), Some("model")])],
    )
}

#[test]
fn all_reductions_over_one_axis_and_both() {
    let mesh = mesh4();
    let x = x_host(F32);
    // One kernel name per body: the compile cache files a kernel under its
    // name and the line of `Kernel::new`.
    let run = |name: &'static str, body: fn(Tensor) -> Tensor| {
        let k = Kernel::new(name, move |a: &[Tensor]| body(a[0]));
        k.run_shard_map(&mesh, &split2(), &[&x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()
    };
    let zip = |a: Vec<f64>, b: Vec<f64>, f: fn(f64, f64) -> f64| -> Vec<f64> {
        a.iter().zip(&b).map(|(x, y)| f(*x, *y)).collect()
    };
    // psum over `model`: device (d, m) gets block(d, 0) + block(d, 1).
    close(
        &run("psum", |t| t.psum(&["model"])),
        &assemble(|d, _| zip(block(d, 0), block(d, 1), |a, b| a + b)),
    );
    close(
        &run("pmax", |t| t.pmax(&["data"])),
        &assemble(|_, m| zip(block(0, m), block(1, m), f64::max)),
    );
    let all_min = |_: usize, _: usize| {
        let mut acc = block(0, 0);
        for (d, m) in [(0, 1), (1, 0), (1, 1)] {
            acc = zip(acc, block(d, m), f64::min);
        }
        acc
    };
    close(
        &run("pmin", |t| t.pmin(&["model", "data"])),
        &assemble(all_min),
    );
}

#[test]
fn integer_psum_inside_a_traced_loop() {
    let mesh = mesh4();
    let x = x_host(S32);
    // Three rounds of `x = psum(x, data) - x`, in a fori_loop.
    let k = Kernel::new("loop", |a: &[Tensor]| {
        fori_loop(0, 3, a[0], |_, t: Tensor| t.psum(&["data"]) - t)
    });
    let got = k.run_shard_map(&mesh, &split2(), &[&x]).unwrap()[0]
        .to_vec::<i32>()
        .unwrap();
    let want = assemble(|d, m| {
        let (mut mine, mut other) = (block(d, m), block(1 - d, m));
        for v in mine.iter_mut().chain(other.iter_mut()) {
            *v = v.round();
        }
        for _ in 0..3 {
            let total: Vec<f64> = mine.iter().zip(&other).map(|(a, b)| a + b).collect();
            (mine, other) = (
                total.iter().zip(&mine).map(|(s, a)| s - a).collect(),
                total.iter().zip(&other).map(|(s, b)| s - b).collect(),
            );
        }
        mine
    });
    assert_eq!(got, want.iter().map(|v| *v as i32).collect::<Vec<_>>());
}

#[test]
fn all_gather_reassembles_and_psum_scatter_splits() {
    let mesh = mesh4();
    let x = x_host(F32);
    // Gathering the `model` blocks along axis 1 gives every device of a
    // `data` row its two whole rows: laid out as P(data, None) that is x.
    let k = Kernel::new("gather", |a: &[Tensor]| a[0].all_gather(&["model"], 1));
    let sh = Shardings::new(
        [p(&[Some("data"), Some("model")])],
        [p(&[Some("data"), None])],
    );
    let got = k.run_shard_map(&mesh, &sh, &[&x]).unwrap();
    assert_eq!(got[0].spec().shape, vec![R, C]);
    close(&got[0].to_vec::<f32>().unwrap(), &assemble(block));

    // psum_scatter over `data` along axis 0 of a replicated [4, 6]: device
    // (d, m) gets rows 2d..2d+2 of 2 · x (both devices of the group hold x).
    let k = Kernel::new("scatter", |a: &[Tensor]| a[0].psum_scatter(&["data"], 0));
    let sh = Shardings::new([p(&[])], [p(&[Some("data"), None])]);
    let got = k.run_shard_map(&mesh, &sh, &[&x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let want: Vec<f64> = (0..R * C).map(|i| 2.0 * x_at(i / C, i % C)).collect();
    close(&got, &want);
}

#[test]
fn all_to_all_and_ppermute_move_blocks_between_devices() {
    let mesh = mesh4();
    let x = x_host(F32);
    // all_to_all over `model`, splitting axis 0 (2 rows: one per device)
    // and joining along axis 1: device (d, m) gets row m of block(d, 0)
    // followed by row m of block(d, 1), as a [1, 6].
    let k = Kernel::new("a2a", |a: &[Tensor]| a[0].all_to_all(&["model"], 0, 1));
    let got = k.run_shard_map(&mesh, &split2(), &[&x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    // The whole result is [2, 12]: row d holds devices (d, 0) and (d, 1).
    let mut want = Vec::new();
    for d in 0..2 {
        for m in 0..2 {
            for src in 0..2 {
                want.extend_from_slice(&block(d, src)[3 * m..3 * m + 3]);
            }
        }
    }
    close(&got, &want);

    // A ring shift along `data`: device (d, m) receives block(1 - d, m); a
    // one-way send leaves the other device zeros.
    let k = Kernel::new("ring", |a: &[Tensor]| {
        a[0].ppermute("data", &[(0, 1), (1, 0)])
    });
    let got = k.run_shard_map(&mesh, &split2(), &[&x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    close(&got, &assemble(|d, m| block(1 - d, m)));
    let k = Kernel::new("send", |a: &[Tensor]| a[0].ppermute("model", &[(0, 1)]));
    let got = k.run_shard_map(&mesh, &split2(), &[&x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    close(
        &got,
        &assemble(|d, m| if m == 1 { block(d, 0) } else { vec![0.0; 6] }),
    );
}

#[test]
fn axis_index_numbers_devices_along_each_axis() {
    let mesh = mesh4();
    let x = HostTensor::from_vec(vec![0.0f32; 4], [2, 2]).unwrap();
    let k = Kernel::new("index", |a: &[Tensor]| {
        let d = axis_index("data").reshape(&[1, 1]);
        let m = axis_index("model").reshape(&[1, 1]);
        (d * 10 + m).cast(F32) + a[0]
    });
    let sh = Shardings::new(
        [p(&[Some("data"), Some("model")])],
        [p(&[Some("data"), Some("model")])],
    );
    let got = k.run_shard_map(&mesh, &sh, &[&x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(got, vec![0.0, 1.0, 10.0, 11.0]);
}

#[test]
fn a_two_device_psum_of_partial_dot_products() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let mesh = Mesh::new(&dev, &[("x", 2)]).unwrap();
    // Row-parallel matmul: each device multiplies its half of the
    // contraction, psum adds the halves.
    let a = HostTensor::from_fn(TensorSpec::new([3, 8], F32), |i| (i % 7) as f64 - 3.0);
    let b = HostTensor::from_fn(TensorSpec::new([8, 5], F32), |i| (i % 5) as f64 * 0.5);
    let k = Kernel::new("rowpar", |t: &[Tensor]| t[0].matmul(t[1]).psum(&["x"]));
    let sh = Shardings::new([p(&[None, Some("x")]), p(&[Some("x"), None])], []);
    let got = k.run_shard_map(&mesh, &sh, &[&a, &b]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let mut want = vec![0.0f64; 15];
    for i in 0..3 {
        for j in 0..5 {
            want[i * 5 + j] = (0..8).map(|k| (av[i * 8 + k] * bv[k * 5 + j]) as f64).sum();
        }
    }
    close(&got, &want);
}

#[test]
fn collective_errors_name_the_op_the_axis_and_the_line() {
    let mesh = mesh4();
    let x = x_host(F32);
    let k = Kernel::new("bad", |a: &[Tensor]| a[0].psum(&["expert"]));
    let e = k
        .run_shard_map(&mesh, &split2(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("psum") && e.contains("no axis `expert`; its axes: data=2, model=2"),
        "{e}"
    );
    assert!(e.contains("shard_map.rs"), "{e}");

    let k = Kernel::new("odd", |a: &[Tensor]| a[0].psum_scatter(&["model"], 1));
    let e = k
        .run_shard_map(&mesh, &split2(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not split into 2 equal parts"), "{e}");

    let k = Kernel::new("twice", |a: &[Tensor]| {
        a[0].ppermute("data", &[(0, 1), (1, 1)])
    });
    let e = k
        .run_shard_map(&mesh, &split2(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("index 1 receives twice"), "{e}");

    // A collective in a kernel run on one device has no mesh to name.
    let dev = Device::cpu().unwrap();
    let k = Kernel::new("alone", |a: &[Tensor]| a[0].psum(&["data"]));
    let e = k.run(&dev, &[&x]).unwrap_err().to_string();
    assert!(
        e.contains("needs a device mesh") && e.contains("run_shard_map"),
        "{e}"
    );

    // A spec that does not split its argument evenly fails before tracing.
    let k = Kernel::new("uneven", |a: &[Tensor]| a[0] * 2.0);
    let y = HostTensor::from_vec(vec![1.0f32; 3], [3]).unwrap();
    let sh = Shardings::new([p(&[Some("data")])], []);
    let e = k.run_shard_map(&mesh, &sh, &[&y]).unwrap_err().to_string();
    assert!(e.contains("does not split evenly"), "{e}");
}

#[test]
fn call_shard_map_keeps_blocks_on_the_devices_between_calls() {
    use tessel_dsl::shard::ShardedBuffer;
    let mesh = mesh4();
    let x = x_host(F32);
    let spec = p(&[Some("data"), Some("model")]);
    let xs = ShardedBuffer::from_host(&mesh, &x, &spec).unwrap();
    // y = psum(x, model) on the devices, then z = y · 2 from y's blocks.
    let sum = Kernel::new("sum_model", |a: &[Tensor]| a[0].psum(&["model"]));
    let y = sum
        .call_shard_map(&mesh, std::slice::from_ref(&spec), &[&xs])
        .unwrap();
    assert_eq!(y[0].partition_spec(), &spec);
    assert_eq!(y[0].spec().shape, vec![R, C]);
    let double = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0);
    let z = double.call_shard_map(&mesh, &[spec], &[&y[0]]).unwrap();
    let got = z[0].to_host().unwrap().to_vec::<f32>().unwrap();
    let want = assemble(|d, _| {
        block(d, 0)
            .iter()
            .zip(block(d, 1))
            .map(|(a, b)| 2.0 * (a + b))
            .collect()
    });
    close(&got, &want);

    // A buffer from another mesh is refused before anything runs.
    let other = Mesh::new(&Device::cpu_with_devices(4).unwrap(), &[("a", 4)]).unwrap();
    let e = double
        .call_shard_map(&other, &[], &[&y[0]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("lives on mesh (data=2, model=2)"), "{e}");
}

/// A `check` in a per-device kernel and in an SPMD (GSPMD) kernel: each
/// device's program reports it; a holding check returns the results.
#[test]
fn checks_in_sharded_and_per_device_kernels() {
    let mesh = mesh4();
    let x = x_host(F32);
    let k = Kernel::new("checked_block", |a: &[Tensor]| {
        let b = a[0];
        check(b.lt(100.0), "a value {} is 100 or more", &[b.max(&[0, 1])]);
        b * 2.0
    });
    let got = k.run_shard_map(&mesh, &split2(), &[&x]).unwrap();
    assert_eq!(
        got[0].to_f64_vec(),
        x.to_f64_vec().iter().map(|v| v * 2.0).collect::<Vec<_>>()
    );
    let mut big = x.to_f64_vec();
    big[C + 4] = 250.0; // row 1: device (0, 1)'s block
    let big = HostTensor::from_fn(TensorSpec::new([R, C], F32), |i| big[i]);
    match k.run_shard_map(&mesh, &split2(), &[&big]) {
        Err(Error::Check(c)) => assert_eq!(c.message, "a value 250 is 100 or more"),
        other => panic!("expected a check error, got {other:?}"),
    }
    let spmd = Kernel::new("checked_spmd", |a: &[Tensor]| {
        check(
            a[0].lt(100.0),
            "a value {} is 100 or more",
            &[a[0].max(&[0, 1])],
        );
        a[0] + 1.0
    });
    let got = spmd.run_sharded(&mesh, &split2(), &[&x]).unwrap();
    assert_eq!(
        got[0].to_f64_vec(),
        x.to_f64_vec().iter().map(|v| v + 1.0).collect::<Vec<_>>()
    );
    match spmd.run_sharded(&mesh, &split2(), &[&big]) {
        Err(Error::Check(c)) => assert_eq!(c.message, "a value 250 is 100 or more"),
        other => panic!("expected a check error, got {other:?}"),
    }
}
