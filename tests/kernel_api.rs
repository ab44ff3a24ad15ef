//! The kernel API a user sees: the attribute's companion module (`run`,
//! `call`, `lower`, `compile`, `with_config`, `CONFIG`), static parameters
//! in the cache key, the compile cache, the closure path, and bad calls.

use std::sync::Arc;
use std::thread;

use tessel::kernel::Kernel;
use tessel::prelude::*;
use tessel_testing::{close_f32 as close, dev};

#[tpu_kernel(precision = "highest")]
fn scaled_softmax(x: Tensor, scale: f32) -> Tensor {
    (x * scale).softmax(-1)
}

/// Two outputs and a static flag.
#[cpu_kernel(name = "stats")]
fn row_stats(x: Tensor, squared: bool) -> (Tensor, Tensor) {
    let y = if squared { x.square() } else { x };
    (y.sum(&[-1]), y.max(&[-1]))
}

/// A kernel calling a kernel: `scaled_softmax` is inlined into this trace.
#[tpu_kernel]
fn softmax_then_sum(x: Tensor) -> Tensor {
    scaled_softmax(x, 2.0).sum(&[-1])
}

fn softmax_ref(x: &[f32], cols: usize, scale: f32) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = row
                .iter()
                .map(|&v| f64::from(v * scale))
                .fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row
                .iter()
                .map(|&v| (f64::from(v * scale) - m).exp())
                .collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

#[test]
fn run_matches_reference_for_odd_shapes() {
    let d = dev();
    for (r, c) in [(1, 1), (3, 7), (5, 129)] {
        let data: Vec<f32> = (0..r * c)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let x = HostTensor::from_vec(data.clone(), [r, c]).unwrap();
        let y = scaled_softmax::run(&d, &x, 0.5).unwrap();
        assert_eq!(y.shape(), &[r, c]);
        close(
            &y.to_vec::<f32>().unwrap(),
            &softmax_ref(&data, c, 0.5),
            1e-6,
        );
    }
}

#[test]
fn tuple_outputs_and_static_flags() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 3.0, 4.0, 0.5, -6.0], [2, 3]).unwrap();
    let (s, m) = row_stats::run(&d, &x, false).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![2.0, -1.5]);
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    let (s2, m2) = row_stats::run(&d, &x, true).unwrap();
    assert_eq!(s2.to_vec::<f32>().unwrap(), vec![14.0, 52.25]);
    assert_eq!(m2.to_vec::<f32>().unwrap(), vec![9.0, 36.0]);
    assert_eq!(row_stats::CONFIG.name, Some("stats"));
    assert!(row_stats::lower(x.spec(), true)
        .unwrap()
        .contains("module @stats"));
}

#[test]
fn kernels_inline_into_kernels() {
    let d = dev();
    let x = HostTensor::from_vec(vec![0.1f32, 0.2, 0.3, 0.4], [2, 2]).unwrap();
    let y = softmax_then_sum::run(&d, &x).unwrap();
    close(&y.to_vec::<f32>().unwrap(), &[1.0, 1.0], 1e-6);
    let text = softmax_then_sum::lower(x.spec()).unwrap();
    assert_eq!(text.matches("func.func").count(), 1, "inlined, not called");
}

#[test]
fn cache_hit_does_not_retrace_and_statics_are_keyed() {
    let d = Device::cpu_with_devices(1).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [1, 3]).unwrap();
    scaled_softmax::run(&d, &x, 1.0).unwrap();
    let before = (tessel::thread_trace_count(), d.cache().stats());
    let again = scaled_softmax::run(&d, &x, 1.0).unwrap();
    let after = (tessel::thread_trace_count(), d.cache().stats());
    assert_eq!(after.0, before.0, "a cache hit must not trace");
    assert_eq!(after.1.hits, before.1.hits + 1);
    assert_eq!(after.1.entries, before.1.entries);
    assert_eq!(after.1.compiles, before.1.compiles);
    close(
        &again.to_vec::<f32>().unwrap(),
        &softmax_ref(&[1.0, 2.0, 3.0], 3, 1.0),
        1e-6,
    );
    // A different static value is a different program.
    scaled_softmax::run(&d, &x, 2.0).unwrap();
    assert_eq!(d.cache().stats().entries, before.1.entries + 1);
    assert_eq!(d.cache().stats().compiles, before.1.compiles + 1);
    // A different shape too.
    let x2 = HostTensor::from_vec(vec![1.0f32; 4], [2, 2]).unwrap();
    scaled_softmax::run(&d, &x2, 1.0).unwrap();
    assert_eq!(d.cache().stats().entries, before.1.entries + 2);
}

#[test]
fn config_override_changes_the_program() {
    let spec = TensorSpec::new([2, 3], F32);
    assert_eq!(scaled_softmax::CONFIG.precision, Precision::Highest);
    let x = spec.clone();
    assert!(scaled_softmax::lower(&x, 1.0)
        .unwrap()
        .contains("module @scaled_softmax"));
    let cfg = scaled_softmax::CONFIG.with_precision(Precision::High);
    let text = softmax_then_sum::lower_with(&cfg, &spec).unwrap();
    assert!(text.contains("module @softmax_then_sum"));
    // The override reaches dots traced under it.
    #[tpu_kernel]
    fn mm(a: Tensor, b: Tensor) -> Tensor {
        a.matmul(b)
    }
    let a = TensorSpec::new([2, 2], F32);
    assert!(mm::lower(&a, &a).unwrap().contains("precision DEFAULT"));
    assert!(mm::lower_with(&cfg, &a, &a)
        .unwrap()
        .contains("precision HIGH>"));
}

#[test]
fn call_keeps_buffers_on_the_device() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    let buf = d.to_device(&x).unwrap();
    let y = scaled_softmax::call(&d, &buf, 1.0).unwrap();
    let z = softmax_then_sum::call(&d, &y).unwrap();
    close(
        &z.to_host().unwrap().to_vec::<f32>().unwrap(),
        &[1.0, 1.0],
        1e-6,
    );
}

#[test]
fn eight_threads_agree_with_one() {
    let d = dev();
    let x = HostTensor::from_fn(TensorSpec::new([16, 33], F32), |i| {
        ((i * 7919) % 101) as f64 / 10.0
    });
    let one = scaled_softmax::run(&d, &x, 0.7).unwrap();
    let x = Arc::new(x);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (d, x) = (d.clone(), Arc::clone(&x));
            thread::spawn(move || {
                (0..10)
                    .map(|_| scaled_softmax::run(&d, &x, 0.7).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for h in handles {
        for r in h.join().unwrap() {
            assert_eq!(r, one);
        }
    }
}

#[test]
fn closure_kernels_check_their_argument_count() {
    let d = dev();
    let k = Kernel::new("axpy", |a: &[Tensor]| a[0] * 2.0 + a[1]).params(["x", "y"]);
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let out = k.run(&d, &[&x, &x]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
    let err = k.run(&d, &[&x]).unwrap_err();
    let msg = err.to_string();
    assert!(err.is_kernel_error(), "{msg}");
    assert!(msg.contains("takes 2 arguments (x, y), got 1"), "{msg}");
}

#[test]
fn trace_errors_name_kernel_op_shapes_and_line() {
    #[cpu_kernel]
    fn bad_matmul(a: Tensor, b: Tensor) -> Tensor {
        a.matmul(b)
    }
    let d = dev();
    let a = HostTensor::zeros(TensorSpec::new([2, 3], F32));
    let b = HostTensor::zeros(TensorSpec::new([4, 5], F32));
    let err = bad_matmul::run(&d, &a, &b).unwrap_err();
    let k = err.as_kernel_error().expect("a kernel error");
    assert_eq!(k.kernel, "bad_matmul");
    assert_eq!(k.op, "dot_general");
    assert_eq!(k.operands, vec!["f32[2,3]", "f32[4,5]"]);
    assert!(k.location.file.ends_with("kernel_api.rs"), "{}", k.location);
    assert!(k.message.contains("contracting"), "{}", k.message);
    let text = err.to_string();
    assert!(
        text.contains("kernel `bad_matmul`") && text.contains("f32[2,3]"),
        "{text}"
    );
}

#[test]
fn wrong_dtype_at_run_is_a_kernel_error_not_an_abort() {
    let d = dev();
    let x = HostTensor::from_vec(vec![1i32, 2, 3], [1, 3]).unwrap();
    // exp is undefined on integers: caught while tracing.
    let err = scaled_softmax::run(&d, &x, 1.0).unwrap_err();
    assert!(err.is_kernel_error(), "{err}");
}

#[test]
fn executables_refuse_mismatched_arguments() {
    let d = dev();
    let spec = TensorSpec::new([2, 2], F32);
    let exe = scaled_softmax::compile(&d, &spec, 1.0).unwrap();
    let wrong_shape = HostTensor::zeros(TensorSpec::new([3, 2], F32));
    let wrong_dtype = HostTensor::zeros(TensorSpec::new([2, 2], F16));
    for args in [vec![&wrong_shape], vec![&wrong_dtype], vec![]] {
        let err = exe.run(&args).unwrap_err();
        assert!(err.is_device_error(), "{err}");
    }
}

#[tpu_kernel]
fn tpu_mm(a: Tensor, b: Tensor) -> Tensor {
    a.matmul(b)
}

#[test]
fn platform_matmul_dtype_is_applied_at_default_precision() {
    let d = dev();
    // Values that bf16 cannot hold exactly.
    let av = vec![1.001f32, 2.003, -0.501, 3.007];
    let bv = vec![0.999f32, -1.002, 2.0, 0.333];
    let (a, b) = (
        HostTensor::from_vec(av.clone(), [2, 2]).unwrap(),
        HostTensor::from_vec(bv.clone(), [2, 2]).unwrap(),
    );
    let mm_ref = |round: bool| -> Vec<f64> {
        let r = |x: f32| {
            if round {
                half::bf16::from_f32(x).to_f64()
            } else {
                f64::from(x)
            }
        };
        (0..2)
            .flat_map(|i| (0..2).map(move |j| (i, j)))
            .map(|(i, j)| (0..2).map(|k| r(av[i * 2 + k]) * r(bv[k * 2 + j])).sum())
            .collect()
    };
    // TPU default: bf16 operands, f32 accumulation, f32 result.
    let y = tpu_mm::run(&d, &a, &b).unwrap();
    assert_eq!(y.dtype(), F32);
    close(&y.to_vec::<f32>().unwrap(), &mm_ref(true), 1e-6);
    let text = tpu_mm::lower(a.spec(), b.spec()).unwrap();
    assert!(
        text.contains("tensor<2x2xbf16>, tensor<2x2xbf16>) -> tensor<2x2xf32>"),
        "{text}"
    );
    // Highest precision keeps f32 operands.
    let hi = tpu_mm::CONFIG.with_precision(Precision::Highest);
    let y = tpu_mm::run_with(&hi, &d, &a, &b).unwrap();
    close(&y.to_vec::<f32>().unwrap(), &mm_ref(false), 1e-6);
    // No compute dtype: f32 throughout.
    let plain = tpu_mm::CONFIG.with_dtype(None);
    let y = tpu_mm::run_with(&plain, &d, &a, &b).unwrap();
    close(&y.to_vec::<f32>().unwrap(), &mm_ref(false), 1e-6);
}

#[test]
fn profile_reports_times_costs_and_memory() {
    #[cpu_kernel]
    fn mm_tanh(a: Tensor, b: Tensor) -> Tensor {
        a.matmul(b).tanh()
    }
    let d = dev();
    let a = HostTensor::from_fn(TensorSpec::new([64, 48], F32), |i| (i % 7) as f64 * 0.1);
    let b = HostTensor::from_fn(TensorSpec::new([48, 32], F32), |i| (i % 5) as f64 * 0.1);
    let opts = tessel::profile::ProfileOptions { warmup: 1, runs: 5 };
    let p = mm_tanh::profile(&d, opts, &a, &b).unwrap();
    assert_eq!(p.kernel, "mm_tanh");
    assert_eq!(p.runs, 5);
    assert!(p.run.min > 0.0 && p.run.min <= p.run.median && p.run.median <= p.run.max);
    assert!(p.compile_seconds > 0.0);
    // 2·M·N·K for the dot, within what XLA adds for tanh.
    let dot = 2.0 * 64.0 * 48.0 * 32.0;
    assert!(p.flops >= dot && p.flops < dot * 1.5, "flops {}", p.flops);
    assert!(p.bytes_accessed >= ((64 * 48 + 48 * 32 + 64 * 32) * 4) as f64);
    assert!(p
        .memory
        .as_ref()
        .is_some_and(|m| m.output_bytes == 64 * 32 * 4));
    let summary = p.summary();
    assert!(
        summary.contains("kernel mm_tanh(f32[64,48], f32[48,32]) -> (f32[64,32])"),
        "{summary}"
    );
    assert!(summary.contains("GFLOP/s"));
    let json = p.to_json();
    assert!(
        json.starts_with("{\"kernel\": \"mm_tanh\"") && json.ends_with('}'),
        "{json}"
    );
    assert!(
        json.contains("\"runs\": 5") && json.contains("\"memory\": {\"peak_bytes\""),
        "{json}"
    );
    let (gf, _, gt) = tessel::profile::graph_cost(
        &tessel::kernel::Kernel::new("g", |x: &[Tensor]| x[0].matmul(x[1]).tanh())
            .trace(&[a.spec().clone(), b.spec().clone()])
            .unwrap(),
    );
    assert_eq!(gf, dot + 64.0 * 32.0);
    assert_eq!(gt, 64.0 * 32.0);
}

#[test]
fn donated_buffers_are_reused_for_results() {
    #[cpu_kernel(donate(acc))]
    fn accumulate(acc: Tensor, x: Tensor) -> Tensor {
        acc + x * 2.0
    }
    let d = dev();
    let acc = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap();
    let x = HostTensor::from_vec(vec![10.0f32, 20.0, 30.0], [3]).unwrap();
    let text = accumulate::lower(acc.spec(), x.spec()).unwrap();
    assert!(
        text.contains("%v0: tensor<3xf32> {tf.aliasing_output = 0 : i32}"),
        "{text}"
    );
    assert!(
        !text.contains("%v1: tensor<3xf32> {tf.aliasing_output"),
        "only the donated parameter aliases"
    );
    // Host calls copy in fresh buffers, so donation is invisible.
    assert_eq!(
        accumulate::run(&d, &acc, &x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![21.0, 42.0, 63.0]
    );
    // Device calls hand the donated buffer over: reading it afterwards is an error, not a crash.
    let (ab, xb) = (d.to_device(&acc).unwrap(), d.to_device(&x).unwrap());
    let out = accumulate::call(&d, &ab, &xb).unwrap();
    assert_eq!(
        out.to_host().unwrap().to_vec::<f32>().unwrap(),
        vec![21.0, 42.0, 63.0]
    );
    assert!(ab.to_host().is_err(), "the donated buffer was consumed");
    assert!(xb.to_host().is_ok(), "the other argument was not");

    #[cpu_kernel(donate(x))]
    fn shrink(x: Tensor) -> Tensor {
        x.sum(&[0])
    }
    let err = shrink::run(&d, &x).unwrap_err();
    assert!(
        err.is_kernel_error() && err.to_string().contains("donated"),
        "{err}"
    );
}

#[test]
fn profile_kernel_scope_counts_calls() {
    #[cpu_kernel]
    fn triple(x: Tensor) -> Tensor {
        x * 3.0
    }
    let d = Device::cpu_with_devices(1).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let (outs, report) = tessel::profile::profile_kernel(|| {
        let a = triple::run(&d, &x).unwrap();
        let b = triple::run(&d, &x).unwrap();
        let buf = d.to_device(&x).unwrap();
        let c = scaled_softmax::call(&d, &buf, 1.0).unwrap();
        (a, b, c)
    });
    assert_eq!(outs.0.to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
    let t = &report.kernels["triple"];
    assert_eq!((t.calls, t.compiles), (2, 1));
    assert!(t.min_seconds <= t.max_seconds && t.total_seconds > 0.0);
    assert_eq!(report.kernels["scaled_softmax"].calls, 1);
    assert!(report.summary().contains("triple"));
    assert!(
        report
            .to_json()
            .starts_with("{\"scaled_softmax\": {\"calls\": 1"),
        "{}",
        report.to_json()
    );
    // Calls outside the scope are not recorded.
    let (_, empty) = tessel::profile::profile_kernel(|| ());
    assert!(empty.kernels.is_empty());
}

/// Always interpreted, whatever device it is given.
#[cpu_kernel(interpret = true)]
fn interpreted_scale(x: Tensor, by: f32) -> Tensor {
    x * by + 1.0
}

#[test]
fn interpret_runs_one_kernel_on_the_interpreter() {
    const { assert!(interpreted_scale::CONFIG.interpret) };
    let cpu = dev();
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 0.5], [3]).unwrap();
    let exe = interpreted_scale::compile(&cpu, x.spec(), 3.0).unwrap();
    assert!(exe.is_interpreted());
    let y = interpreted_scale::run(&cpu, &x, 3.0).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![4.0, -5.0, 2.5]);
    // Buffers of the device in, buffers of the device out.
    let xb = cpu.to_device(&x).unwrap();
    let yb = interpreted_scale::call(&cpu, &xb, 3.0).unwrap();
    assert_eq!(yb.device(), cpu);
    assert_eq!(yb.to_host().unwrap(), y);
    // And any kernel, for one call, through its config.
    let cfg = scaled_softmax::CONFIG.interpret(true);
    assert!(scaled_softmax::compile_with(&cfg, &cpu, x.spec(), 2.0)
        .unwrap()
        .is_interpreted());
    assert!(!scaled_softmax::compile(&cpu, x.spec(), 2.0)
        .unwrap()
        .is_interpreted());
}

/// Refuses a first element below 0, under any block size but 24.
fn first_not_negative(config: &KernelConfig, args: &[&HostTensor]) -> Result<()> {
    let first = args[0].to_f64_vec().first().copied().unwrap_or(0.0);
    if first < 0.0 && config.block_size != Some(24) {
        return Err(tessel::HostError::InvalidInput {
            what: "guarded",
            message: format!("the first element is {first}"),
        }
        .into());
    }
    Ok(())
}

#[cpu_kernel(check_args = first_not_negative)]
fn guarded(x: Tensor) -> Tensor {
    x.sqrt().sum(&[0])
}

#[test]
fn check_args_runs_before_host_entry_points() {
    let d = dev();
    let bad = HostTensor::from_vec(vec![-4.0f32, 9.0], [2]).unwrap();
    let good = HostTensor::from_vec(vec![4.0f32, 9.0], [2]).unwrap();
    let refused = |r: Result<String>| {
        let m = r.unwrap_err().to_string();
        assert!(m.contains("the first element is -4"), "{m}");
    };
    refused(guarded::run(&d, &bad).map(|_| String::new()));
    refused(
        guarded::profile(&d, tessel::profile::ProfileOptions::default(), &bad)
            .map(|_| String::new()),
    );
    refused(guarded::value_and_grad(&d, &["x"], &bad).map(|_| String::new()));
    // The configuration is passed to the check.
    let cfg = guarded::CONFIG.with_block_size(Some(24));
    assert!(guarded::run_with(&cfg, &d, &bad).unwrap().to_f64_vec()[0].is_nan());
    assert_eq!(guarded::run(&d, &good).unwrap().to_f64_vec(), vec![5.0]);
    // Specs and device buffers have no host values to check.
    assert!(guarded::lower(bad.spec()).is_ok());
    let y = guarded::call(&d, &d.to_device(&bad).unwrap()).unwrap();
    assert!(y.to_host().unwrap().to_f64_vec()[0].is_nan());
}

/// How many columns `chunked_sum` adds at a time: a tunable static argument
/// whose candidates include one the shapes do not allow.
#[derive(Clone, Copy, Debug, Hash, PartialEq)]
struct Chunk(usize);

impl tessel::kernel::StaticArg for Chunk {
    fn write_key(&self, key: &mut tessel::kernel::StaticKey) {
        key.push_hash(self);
    }
    fn tuning_candidates(&self, _inputs: &[TensorSpec]) -> Vec<Self> {
        vec![*self, Chunk(5), Chunk(4), Chunk(3)]
    }
    fn tuning_label(&self) -> String {
        format!("chunk = {}", self.0)
    }
}

/// The sum of `x` (`[n]`), added `chunk` elements at a time.
#[cpu_kernel(autotune = true)]
fn chunked_sum(x: Tensor, chunk: Chunk) -> Tensor {
    let (n, c) = (x.shape()[0] as isize, chunk.0 as isize);
    x.reshape(&[n / c, c]).sum(&[1]).sum(&[0])
}

#[test]
fn autotune_skips_candidates_that_fail_and_shows_its_choice() {
    const { assert!(chunked_sum::CONFIG.autotune) };
    let d = dev();
    let x = HostTensor::from_fn(TensorSpec::new([12], F32), |i| i as f64);
    let y = chunked_sum::run(&d, &x, Chunk(6)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![66.0]);
    let opts = tessel::profile::ProfileOptions { warmup: 0, runs: 1 };
    let p = chunked_sum::profile(&d, opts, &x, Chunk(6)).unwrap();
    assert_eq!(p.tuned.len(), 1, "{:?}", p.tuned);
    assert!(
        ["chunk: chunk = 6", "chunk: chunk = 4", "chunk: chunk = 3"].contains(&p.tuned[0].as_str()),
        "{:?}",
        p.tuned
    );
    // Off: the argument as given, and nothing shown.
    let off = chunked_sum::CONFIG.autotune(false);
    let p = chunked_sum::profile_with(&off, &d, opts, &x, Chunk(6)).unwrap();
    assert!(p.tuned.is_empty());
    // Every candidate fails: the first one's error.
    let odd = HostTensor::from_fn(TensorSpec::new([13], F32), |i| i as f64);
    let e = chunked_sum::run(&d, &odd, Chunk(6))
        .unwrap_err()
        .to_string();
    assert!(e.contains("chunked_sum") && e.contains("reshape"), "{e}");
}

#[test]
fn a_tuning_run_copies_its_arguments_once_unless_the_kernel_donates() {
    use tessel::kernel::autotune::{run_host, Uploads};
    let d = dev();
    let x = HostTensor::from_fn(TensorSpec::new([5, 3], F32), |i| i as f64);
    let y = HostTensor::from_fn(TensorSpec::new([3], F32), |i| 10.0 * i as f64);
    let k = Kernel::new("tuned_add", |a: &[Tensor]| a[0] + a[1]).params(["x", "y"]);
    let mut uploads = Uploads::default();
    assert!(uploads.is_empty());
    run_host(&k, &d, &[&x, &y], &mut uploads).unwrap();
    assert_eq!(uploads.len(), 2);
    run_host(&k, &d, &[&x, &y], &mut uploads).unwrap();
    assert_eq!(uploads.len(), 2);
    // Donated buffers do not survive a run: each run copies, nothing is kept.
    let donating = KernelConfig {
        donate: &["x"],
        ..KernelConfig::default()
    };
    let k = Kernel::new("tuned_add_donating", |a: &[Tensor]| a[0] + a[1])
        .params(["x", "y"])
        .config(donating);
    let mut uploads = Uploads::default();
    for _ in 0..2 {
        run_host(&k, &d, &[&x, &y], &mut uploads).unwrap();
    }
    assert!(uploads.is_empty());
    // A kernel that does not trace for these arguments: its error, nothing kept.
    let bad = HostTensor::from_fn(TensorSpec::new([4], F32), |i| i as f64);
    let k = Kernel::new("tuned_add_bad", |a: &[Tensor]| a[0] + a[1]).params(["x", "y"]);
    let mut uploads = Uploads::default();
    let e = run_host(&k, &d, &[&x, &bad], &mut uploads)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tuned_add_bad"), "{e}");
    assert!(uploads.is_empty());
}
