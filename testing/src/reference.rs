//! Reference-side helpers: shapes, broadcasting and a plain matmul, in f64.

use tessel_dsl::HostTensor;

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// The flat index of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

/// The numpy broadcast of two shapes (panics if they do not broadcast).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() < r {
                1
            } else {
                a[i + a.len() - r]
            };
            let db = if i + b.len() < r {
                1
            } else {
                b[i + b.len() - r]
            };
            match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => panic!("{a:?} and {b:?} do not broadcast"),
            }
        })
        .collect()
}

/// `data` of `shape` broadcast (numpy rules) to `target`.
pub fn broadcast(data: &[f64], shape: &[usize], target: &[usize]) -> Vec<f64> {
    let off = target.len() - shape.len();
    let n: usize = target.iter().product();
    (0..n)
        .map(|i| {
            let t = unravel(i, target);
            let src: Vec<usize> = (0..shape.len())
                .map(|a| if shape[a] == 1 { 0 } else { t[off + a] })
                .collect();
            data[ravel(&src, shape)]
        })
        .collect()
}

/// `f` applied elementwise to `a` and `b` after broadcasting them together;
/// returns the result and its shape.
pub fn zip_broadcast(
    a: &HostTensor,
    b: &HostTensor,
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let shape = broadcast_shape(a.shape(), b.shape());
    let x = broadcast(&a.to_f64_vec(), a.shape(), &shape);
    let y = broadcast(&b.to_f64_vec(), b.shape(), &shape);
    (x.iter().zip(&y).map(|(&p, &q)| f(p, q)).collect(), shape)
}

/// `a · b` for `[M, K] x [K, N]`, in f64 on the stored values.
pub fn matmul_ref(a: &HostTensor, b: &HostTensor) -> Vec<f64> {
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    (0..m * n)
        .map(|idx| {
            (0..k)
                .map(|p| av[idx / n * k + p] * bv[p * n + idx % n])
                .sum()
        })
        .collect()
}
