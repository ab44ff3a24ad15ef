use tessel::prelude::*;

struct Layer;

impl Layer {
    #[tpu_kernel]
    fn k(&self, x: Tensor) -> Tensor {
        x
    }
}

fn main() {}
