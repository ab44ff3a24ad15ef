// A typo in an option is the only error: the companion is still generated
// (with that option at its default), so calls to it type-check.
use tessel::prelude::*;

#[cpu_kernel(precison = "highest", block_size = 8)]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {
    let dev = Device::cpu_with_devices(1).unwrap();
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let _: tessel::Result<HostTensor> = k::run(&dev, &x);
    let _ = k::CONFIG.block_size;
}
