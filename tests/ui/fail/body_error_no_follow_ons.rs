// A body error is the only error: the rest of the body (a tensor `if`,
// which is not Rust before the rewrite) and the call through the
// companion give none.
use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, n: usize) -> Tensor {
    let mut y = x;
    if x.sum(&[0]) > 1.0 {
        y = x * 2.0;
    }
    for i in 0..n {
        y = y + x[i];
        if n > 3 {
            break;
        }
    }
    y
}

fn main() {
    let dev = Device::cpu().unwrap();
    let x = HostTensor::from_vec(vec![1f32; 4], [4]).unwrap();
    let _ = k::run(&dev, &x, 3);
}
