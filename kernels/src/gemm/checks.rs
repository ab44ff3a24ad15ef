//! The argument checks of the matrix-product kernels ([`gemm`](crate::gemm),
//! [`quantized`](crate::quantized)): what is wrong with the arguments' types,
//! found before any op is built. The kernels record it with
//! [`trace_error`](tessel::tensor::trace_error) under their own name and at
//! their caller's line; without the checks, a misuse failed inside the
//! kernel, as an error of its `dot_general` at a line of this crate.

use tessel::prelude::*;

/// The numpy broadcast of two shapes, or `None`.
pub(crate) fn broadcast(x: &[usize], y: &[usize]) -> Option<Vec<usize>> {
    let n = x.len().max(y.len());
    let at = |s: &[usize], i: usize| {
        let pad = n - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..n)
        .map(|i| match (at(x, i), at(y, i)) {
            (p, q) if p == q || q == 1 => Some(p),
            (1, q) => Some(q),
            _ => None,
        })
        .collect()
}

/// The result shape of `a · b` as `matmul` takes them (`[.., M, K] ×
/// [.., K, N]`, a vector operand as one row or column, batch axes
/// broadcast), after swapping the last two axes of an operand whose
/// `transpose_*` is set; or what is wrong.
pub(crate) fn product_shape(
    a: &TensorSpec,
    b: &TensorSpec,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Vec<usize>, String> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(format!("a and b need rank 1 or more, got {a} and {b}"));
    }
    let swapped = |s: &TensorSpec, t: bool| {
        let mut v = s.shape.clone();
        let r = v.len();
        if t && r >= 2 {
            v.swap(r - 1, r - 2);
        }
        v
    };
    let (sa, sb) = (swapped(a, transpose_a), swapped(b, transpose_b));
    let ka = sa[sa.len() - 1];
    let kb = if sb.len() == 1 {
        sb[0]
    } else {
        sb[sb.len() - 2]
    };
    if ka != kb {
        let note = match (transpose_a, transpose_b) {
            (false, false) => String::new(),
            (ta, tb) => format!(" (transpose_a = {ta}, transpose_b = {tb})"),
        };
        return Err(format!(
            "the contracting extents differ: a {a} has K = {ka}, b {b} has K = {kb}{note}"
        ));
    }
    let batch = |s: &[usize]| s[..s.len().saturating_sub(2)].to_vec();
    let (ba, bb) = (batch(&sa), batch(&sb));
    let Some(mut out) = broadcast(&ba, &bb) else {
        return Err(format!(
            "the batch axes of a {a} and b {b} do not broadcast ({ba:?} and {bb:?})"
        ));
    };
    if sa.len() >= 2 {
        out.push(sa[sa.len() - 2]);
    }
    if sb.len() >= 2 {
        out.push(sb[sb.len() - 1]);
    }
    Ok(out)
}

/// What is wrong with a dtype that must be a float.
pub(crate) fn float(name: &str, s: &TensorSpec) -> Result<(), String> {
    if s.dtype.is_float() {
        Ok(())
    } else {
        Err(format!(
            "`{name}` must be a float tensor, got {s}; cast it first"
        ))
    }
}

/// What is wrong with `s` where `[shape]` is wanted (`what` says why).
pub(crate) fn shaped(
    name: &str,
    s: &TensorSpec,
    shape: &[usize],
    what: &str,
) -> Result<(), String> {
    if s.shape == shape {
        Ok(())
    } else {
        Err(format!("`{name}` must be {shape:?} ({what}), got {s}"))
    }
}

/// What is wrong with `s` where a matrix is wanted.
pub(crate) fn matrix(name: &str, s: &TensorSpec, axes: &str) -> Result<(usize, usize), String> {
    match s.shape[..] {
        [r, c] => Ok((r, c)),
        _ => Err(format!("`{name}` must be a matrix {axes}, got {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: &[usize]) -> TensorSpec {
        TensorSpec::new(shape.to_vec(), F32)
    }

    #[test]
    fn product_shapes_follow_matmul() {
        let p = |a: &[usize], b: &[usize], ta, tb| product_shape(&f32s(a), &f32s(b), ta, tb);
        assert_eq!(p(&[2, 3], &[3, 4], false, false), Ok(vec![2, 4]));
        assert_eq!(p(&[3, 2], &[4, 3], true, true), Ok(vec![2, 4]));
        assert_eq!(
            p(&[5, 1, 2, 3], &[4, 3, 6], false, false),
            Ok(vec![5, 4, 2, 6])
        );
        assert_eq!(p(&[3], &[7, 3, 4], false, false), Ok(vec![7, 4]));
        assert_eq!(p(&[2, 3], &[3], false, false), Ok(vec![2]));
        assert!(p(&[2, 3], &[4, 5], false, false)
            .unwrap_err()
            .contains("K = 3"));
        assert!(p(&[2, 2, 3], &[3, 3, 4], false, false)
            .unwrap_err()
            .contains("do not broadcast"));
        assert!(p(&[], &[3], false, false).unwrap_err().contains("rank 1"));
    }

    #[test]
    fn broadcasts_right_aligned() {
        assert_eq!(broadcast(&[4, 1], &[3]), Some(vec![4, 3]));
        assert_eq!(broadcast(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast(&[2], &[3]), None);
    }
}
