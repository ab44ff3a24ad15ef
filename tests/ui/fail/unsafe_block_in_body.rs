use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor) -> Tensor {
    let y = unsafe { std::mem::transmute::<Tensor, Tensor>(x) };
    y
}

fn main() {}
