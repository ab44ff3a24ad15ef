//! The kernel language: a traced loop and an `if` on a tensor, written as
//! ordinary Rust.
//!
//! `for step in 0..steps` assigns `x` and `residual`, so it becomes one XLA
//! `while` carrying both; `if residual > tol` compares tensors, so it
//! becomes an XLA conditional that merges what its branches assign. The
//! `if warm_start` on a Rust `bool` is plain Rust: only the taken branch is
//! traced.
use tessel::prelude::*;

/// Jacobi iterations for `a · x = b`, stopping the update once the residual
/// is below `tol` (the loop still runs `steps` times: its trip count is static).
#[cpu_kernel(precision = "highest")]
fn jacobi(a: Tensor, b: Tensor, tol: Tensor, steps: usize, warm_start: bool) -> (Tensor, Tensor) {
    let n = a.dim(0);
    let diag = (a * Tensor::iota([n, n], 0, S32).eq(Tensor::iota([n, n], 1, S32)).select(1.0, 0.0)).sum(&[1]);
    let mut x = if warm_start { b / diag } else { b.zeros_like() };
    let mut residual = Tensor::scalar(f64::INFINITY, F32);
    for _step in 0..steps {
        let r = b - a.matmul(x);
        residual = r.square().sum(&[0]).sqrt();
        if residual > tol {
            x = x + r / diag;
        }
    }
    (x, residual)
}

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let a = HostTensor::from_vec(vec![4.0f32, 1.0, 0.0, 1.0, 5.0, 2.0, 0.0, 2.0, 6.0], [3, 3])?;
    let b = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    let tol = HostTensor::scalar(1e-5f32);
    let (x, residual) = jacobi::run(&dev, &a, &b, &tol, 50, true)?;
    println!("x = {:?}, residual = {:?}", x.to_vec::<f32>()?, residual.to_vec::<f32>()?);
    let text = jacobi::lower(a.spec(), b.spec(), tol.spec(), 50, true)?;
    println!(
        "{} ops lowered: {} while, {} if",
        text.lines().filter(|l| l.contains(" = \"")).count(),
        text.matches("stablehlo.while").count(),
        text.matches("stablehlo.if").count()
    );
    Ok(())
}
