use tessel::prelude::*;

#[tpu_kernel]
struct K;

fn main() {}
