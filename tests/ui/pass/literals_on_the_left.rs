// A number literal on the left of a tensor operator or comparison, then a
// method on the result: the literal's type resolves at once (the operators
// take an f64 or an i32 on the left; comparisons are mirrored by the
// rewrite), and a typed static still compares on the left.
use tessel::prelude::*;

#[cpu_kernel]
fn k(x: Tensor, scale: f32, step: usize) -> Tensor {
    let y = (2.0 * x).exp() + (3 * x.cast(S32)).cast(F32) + (1.0 - x).abs();
    let y = (0.0 < y).select(y, 1.0) + (2 == x.cast(S32)).select(y, 0.0);
    let early = (scale < x) && !(-1.0 >= x);
    let y = early.select(x * scale, y);
    if 0 < step {
        y * 2.0
    } else {
        y
    }
}

fn main() {
    let spec = TensorSpec::new([8], F32);
    let _ = k::lower(&spec, 0.5, 2);
}
