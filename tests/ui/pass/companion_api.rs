// Every attribute, options, static parameters, tuple returns, kernels in
// function bodies and kernels calling kernels.
use tessel::prelude::*;

#[derive(Clone, Debug, Hash)]
enum Mode {
    Fast,
    Exact,
}
tessel::static_arg!(Mode);

#[tpu_kernel(precision = "high", block_size = 256, use_bfloat16 = true, donate(x), name = "custom")]
pub fn tpu(x: Tensor, scale: f32, mode: Mode) -> Tensor {
    match mode {
        Mode::Fast => x * scale,
        Mode::Exact => (x * scale).exp().log(),
    }
}

#[gpu_kernel(dtype = "f16", accumulate = true, auto_pad = false)]
fn gpu(a: Tensor, b: Tensor) -> (Tensor, Tensor) {
    (a + b, a - b)
}

#[cpu_kernel]
fn cpu(a: Tensor) -> Vec<Tensor> {
    vec![tpu(a, 2.0, Mode::Fast), a]
}

fn main() {
    #[cpu_kernel]
    fn local(a: Tensor, n: usize) -> Tensor {
        a * n as f32
    }
    let spec = TensorSpec::new([2, 2], F32);
    let _: tessel::Result<String> = tpu::lower(&spec, 1.0, Mode::Exact);
    let _: tessel::Result<String> = gpu::lower(&spec, &spec);
    let _: tessel::Result<String> = cpu::lower(&spec);
    let _: tessel::Result<String> = local::lower(&spec, 3);
    let _ = tpu::CONFIG.precision == Precision::High;
    let _ = gpu::lower_with(&gpu::CONFIG.with_precision(Precision::Highest), &spec, &spec);
    let run: fn(&Device, &HostTensor, &HostTensor) -> tessel::Result<(HostTensor, HostTensor)> = gpu::run;
    let _ = run;
}

#[expert_kernel(num_experts = 4, top_k = 2, capacity_factor = 1.5, renormalize = false, precision = "highest")]
fn expert(x: Tensor, w: Tensor) -> Tensor {
    x.matmul(w).relu()
}

#[allow(dead_code)]
fn uses_the_routed_layer(dev: &Device, x: &HostTensor, r: &HostTensor, w: &HostTensor) {
    let _: tessel::Result<(HostTensor, HostTensor, HostTensor, HostTensor)> = expert::run(dev, x, r, w);
}

#[cpu_kernel]
fn by_name(x: Tensor, mode: &'static str) -> Tensor {
    if mode == "double" {
        x * 2.0
    } else {
        x
    }
}

#[allow(dead_code)]
fn lowers_by_name(spec: &TensorSpec) -> tessel::Result<String> {
    by_name::lower(spec, "double")
}
