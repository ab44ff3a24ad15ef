use tessel::prelude::*;

#[tpu_kernel]
fn k(x: Tensor, causal: bool) -> Tensor {
    x
}

fn main() {
    let dev = Device::cpu().unwrap();
    let x = HostTensor::scalar(1.0f32);
    // A tensor parameter takes a host tensor, a static one its value.
    let _ = k::run(&dev, 1.0f32, true);
    let _ = k::run(&dev, &x, "yes");
    let _ = k::run(&dev, &x);
}
