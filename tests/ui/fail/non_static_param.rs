use tessel::prelude::*;

struct Settings {
    scale: f32,
}

#[tpu_kernel]
fn k(x: Tensor, s: Settings) -> Tensor {
    x * s.scale
}

fn main() {}
