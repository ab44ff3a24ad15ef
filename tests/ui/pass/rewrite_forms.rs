// Every body rewrite form compiles: comparisons and logic on tensors and on
// Rust values, indexing and index assignment, static and tensor `if`
// (with values and assignments), static and tensor `while`, traced and
// unrolled `for`, and plain Rust inside a kernel.
use tessel::lang::ds;
use tessel::prelude::*;

#[cpu_kernel]
fn forms(x: Tensor, t: Tensor, n: usize, flag: bool) -> (Tensor, Tensor) {
    let pos = x > 0.0;
    let both = pos && x < 1.0 || !(x >= 2.0);
    let eq = x == t && x != 0.0;
    // A number on the left, then a method on the result.
    let t = (0.0 < t).select(t, -t) + (-1.5 >= x).select(1.0, 0.0);
    let t = t + (2 == x.cast(S32)).cast(F32);
    let flag = flag && 0 < n;
    let mut y = both.select(x, 0.0) + eq.select(1.0, 0.0);
    if flag && n > 2 {
        y = y * 2.0;
    }
    let z = if t.sum(&[0]) > 1.0 { y + 1.0 } else { y - 1.0 };
    let mut acc = z;
    for i in 0..n {
        acc = acc + x[i];
        y[0] = acc[0];
    }
    for i in 1..=3 {
        acc = acc * i.cast(F32);
    }
    #[unroll]
    for k in 0..n {
        acc = acc + x.slice_axis(0, k, k + 1).sum(&[0]);
    }
    let mut steps = 0;
    while steps < n {
        steps += 1;
    }
    let mut w = acc;
    while w.sum(&[0]) < 100.0 {
        w = w * 2.0;
    }
    let window = x[(ds(t.argmax(0), 2),)];
    let sizes = vec![1usize, 2, 3];
    let mut v = vec![0.0f32; 3];
    v[1] = sizes[2] as f32;
    if v[1] == 3.0 && sizes.len() == 3 {
        w = w + v[1];
    }
    (w + window.sum(&[0]), y * steps as f32)
}

fn main() {
    let spec = TensorSpec::new([8], F32);
    let _ = forms::lower(&spec, &spec, 4, true);
}
