// A number on the left of a tensor operator is an f64 or an i32, so that an
// unsuffixed literal there resolves (`(2.0 * x).exp()`); an f32 variable
// goes on the right.
use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, scale: f32) -> Tensor {
    let y = (2.0 * x).exp() + (3 * x.cast(S32)).cast(F32);
    scale * y
}

fn main() {}
