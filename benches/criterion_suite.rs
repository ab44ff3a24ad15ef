//! The benchmark suite under criterion (`cargo bench --bench criterion_suite`):
//! each kernel of `tessel bench` at a moderate size, called on device-resident
//! arguments (compiled once, outside the timed loop), beside its reference.

use criterion::{criterion_group, criterion_main, Criterion};
use tessel::kernels::attention::{attention_reference, flash_attention, FlashOptions};
use tessel::kernels::gemm::{gemm, GemmOptions};
use tessel::kernels::norm::layer_norm;
use tessel::prelude::*;

fn data(shape: Vec<usize>, dtype: DType) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new(shape, dtype), |i| {
        (((i * 7919) % 1999) as f64 / 999.5 - 1.0) * 0.5
    })
}

fn ready(out: Vec<DeviceBuffer>) {
    for b in out {
        b.block_until_ready().expect("kernel runs");
    }
}

fn suite(c: &mut Criterion) {
    let dev = Device::cpu().expect("the CPU plugin loads");
    let up = |h: &HostTensor| dev.to_device(h).expect("copy in");

    let n = 512;
    let (a, b) = (data(vec![n, n], F32), data(vec![n, n], F32));
    let (da, db) = (up(&a), up(&b));
    let (a16, b16) = (up(&a.cast(BF16)), up(&b.cast(BF16)));
    let f32_exe =
        gemm::compile(&dev, a.spec(), b.spec(), GemmOptions::default()).expect("compiles");
    let bf16_opts = GemmOptions {
        out_dtype: Some(F32),
        ..GemmOptions::default()
    };
    let bf16_exe = gemm::compile(
        &dev,
        &a.cast(BF16).spec().clone(),
        &b.cast(BF16).spec().clone(),
        bf16_opts,
    )
    .expect("compiles");
    let mut g = c.benchmark_group("gemm 512");
    g.bench_function("f32", |bench| {
        bench.iter(|| ready(f32_exe.execute(&[&da, &db]).expect("runs")))
    });
    g.bench_function("bf16 operands", |bench| {
        bench.iter(|| ready(bf16_exe.execute(&[&a16, &b16]).expect("runs")))
    });
    g.finish();

    let s = 1024;
    let (q, k, v) = (
        data(vec![1, 8, s, 64], F32),
        data(vec![1, 8, s, 64], F32),
        data(vec![1, 8, s, 64], F32),
    );
    let (dq, dk, dv) = (up(&q), up(&k), up(&v));
    let opts = FlashOptions::new().causal(true);
    let flash =
        flash_attention::compile(&dev, q.spec(), k.spec(), v.spec(), opts).expect("compiles");
    let reference =
        attention_reference::compile(&dev, q.spec(), k.spec(), v.spec(), opts).expect("compiles");
    let mut g = c.benchmark_group("causal attention S=1024");
    g.sample_size(20);
    g.bench_function("reference", |bench| {
        bench.iter(|| ready(reference.execute(&[&dq, &dk, &dv]).expect("runs")))
    });
    g.bench_function("flash", |bench| {
        bench.iter(|| ready(flash.execute(&[&dq, &dk, &dv]).expect("runs")))
    });
    g.finish();

    let (x, scale, bias) = (
        data(vec![4096, 1024], F32),
        data(vec![1024], F32),
        data(vec![1024], F32),
    );
    let (dx, ds, dbias) = (up(&x), up(&scale), up(&bias));
    let ln =
        layer_norm::compile(&dev, x.spec(), scale.spec(), bias.spec(), 1e-5).expect("compiles");
    let mut g = c.benchmark_group("layer_norm 4096x1024");
    g.bench_function("layer_norm", |bench| {
        bench.iter(|| ready(ln.execute(&[&dx, &ds, &dbias]).expect("runs")))
    });
    g.finish();
}

criterion_group!(benches, suite);
criterion_main!(benches);
