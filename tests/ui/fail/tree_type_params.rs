use tessel::prelude::*;

// Two type parameters and neither is marked as the leaf by `= Tensor`.
#[derive(Tree)]
struct Unmarked<P, T> {
    params: P,
    step: T,
}

// A lifetime parameter.
#[derive(Tree)]
struct Borrowed<'a, T = Tensor> {
    w: T,
    name: &'a str,
}

// No type parameter at all.
#[derive(Tree)]
struct Fixed {
    w: Tensor,
}

fn main() {}
