use tessel::prelude::*;

#[cpu_kernel(check_args = "inputs_ok")]
fn k(x: Tensor) -> Tensor {
    x
}

fn main() {}
