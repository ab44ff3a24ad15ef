//! Ops that make or move elements without arithmetic: `constant`, `iota`,
//! `broadcast_in_dim`, `reshape`, `transpose`, `slice`, `concatenate` and
//! `pad`.

use crate::interp::value::{decode, num_elements, round, strides, wrap, Counter, Data, Val};
use crate::shape::{distinct_axes, TensorSpec};

type R<T> = Result<T, String>;

/// A literal of `spec` from its little-endian bytes (one element: a splat).
pub(crate) fn constant(spec: &TensorSpec, bytes: &[u8]) -> R<Val> {
    let n = num_elements(&spec.shape)?;
    let size = spec.dtype.size_in_bytes();
    if bytes.len() != size && bytes.len() != n.saturating_mul(size) {
        return Err(format!("constant of {spec} has {} bytes", bytes.len()));
    }
    Ok(decode(spec.dtype, spec.shape.clone(), bytes, n))
}

/// `0, 1, 2, ...` along `dim` of `spec`.
pub(crate) fn iota(spec: &TensorSpec, dim: usize) -> R<Val> {
    if dim >= spec.rank() {
        return Err(format!("iota axis {dim} is out of range for {spec}"));
    }
    let n = num_elements(&spec.shape)?;
    let st = strides(&spec.shape);
    let ext = spec.shape[dim];
    let coord = move |i: usize| (i / st[dim]) % ext;
    let d = spec.dtype;
    let data = if d.is_float() {
        Data::F((0..n).map(|i| round(d, coord(i) as f64)).collect())
    } else {
        Data::I((0..n).map(|i| wrap(d, coord(i) as i64)).collect())
    };
    Val::new(d, spec.shape.clone(), data)
}

/// Broadcast: operand axis `i` becomes result axis `dims[i]`.
pub(crate) fn broadcast_in_dim(x: &Val, dims: &[usize], spec: &TensorSpec) -> R<Val> {
    let out = &spec.shape;
    if dims.len() != x.shape.len()
        || !distinct_axes(dims, out.len())
        || dims
            .iter()
            .zip(&x.shape)
            .any(|(&d, &e)| d >= out.len() || (e != 1 && e != out[d]))
    {
        return Err(format!(
            "cannot broadcast {} to {spec} along {dims:?}",
            x.spec()
        ));
    }
    let n = num_elements(out)?;
    let xs = strides(&x.shape);
    // The stride in the operand of each result axis (0 where it repeats).
    let mut src = vec![0usize; out.len()];
    for (i, &d) in dims.iter().enumerate() {
        if x.shape[i] != 1 {
            src[d] = xs[i];
        }
    }
    let mut c = Counter::new(out);
    let positions = (0..n).map(|_| {
        let p = c.idx.iter().zip(&src).map(|(a, b)| a * b).sum();
        c.step();
        p
    });
    Val::new(x.dtype, out.clone(), x.data.pick(positions))
}

/// Same elements, new shape.
pub(crate) fn reshape(x: &Val, spec: &TensorSpec) -> R<Val> {
    Val::new(x.dtype, spec.shape.clone(), x.data.clone())
}

/// Result axis `i` is operand axis `perm[i]`.
pub(crate) fn transpose(x: &Val, perm: &[usize]) -> R<Val> {
    let r = x.shape.len();
    if perm.len() != r || !distinct_axes(perm, r) {
        return Err(format!(
            "{perm:?} is not a permutation of the axes of {}",
            x.spec()
        ));
    }
    let out: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let xs = strides(&x.shape);
    let src: Vec<usize> = perm.iter().map(|&p| xs[p]).collect();
    let n = x.len();
    let mut c = Counter::new(&out);
    let positions = (0..n).map(|_| {
        let p = c.idx.iter().zip(&src).map(|(a, b)| a * b).sum();
        c.step();
        p
    });
    Val::new(x.dtype, out, x.data.pick(positions))
}

/// Static strided slice.
pub(crate) fn slice(x: &Val, start: &[usize], limit: &[usize], step: &[usize]) -> R<Val> {
    let r = x.shape.len();
    if start.len() != r || limit.len() != r || step.len() != r {
        return Err(format!(
            "slice bounds do not match the rank of {}",
            x.spec()
        ));
    }
    let mut out = Vec::with_capacity(r);
    for a in 0..r {
        if start[a] > limit[a] || limit[a] > x.shape[a] || step[a] == 0 {
            return Err(format!(
                "slice {}..{} step {} of axis {a} does not fit {}",
                start[a],
                limit[a],
                step[a],
                x.spec()
            ));
        }
        out.push((limit[a] - start[a]).div_ceil(step[a]));
    }
    let n = num_elements(&out)?;
    let xs = strides(&x.shape);
    let base: usize = start.iter().zip(&xs).map(|(a, b)| a * b).sum();
    let src: Vec<usize> = step.iter().zip(&xs).map(|(a, b)| a * b).collect();
    let mut c = Counter::new(&out);
    let positions = (0..n).map(|_| {
        let p = base + c.idx.iter().zip(&src).map(|(a, b)| a * b).sum::<usize>();
        c.step();
        p
    });
    Val::new(x.dtype, out, x.data.pick(positions))
}

/// Join along `dim`.
pub(crate) fn concatenate(xs: &[&Val], dim: usize, spec: &TensorSpec) -> R<Val> {
    let first = xs.first().ok_or("concatenate needs operands")?;
    let r = first.shape.len();
    if dim >= r {
        return Err(format!("axis {dim} is out of range for {}", first.spec()));
    }
    for x in xs {
        let other_axes_agree = (0..r).all(|a| a == dim || x.shape.get(a) == first.shape.get(a));
        if x.dtype != first.dtype || x.shape.len() != r || !other_axes_agree {
            return Err(format!(
                "cannot concatenate {} and {}",
                first.spec(),
                x.spec()
            ));
        }
    }
    let outer: usize = first.shape[..dim].iter().product();
    let n = num_elements(&spec.shape)?;
    let mut data = first.data.with_capacity_like(n);
    for o in 0..outer {
        for x in xs {
            let inner: usize = x.shape[dim..].iter().product();
            data.extend_from(&x.data, o * inner..(o + 1) * inner);
        }
    }
    Val::new(first.dtype, spec.shape.clone(), data)
}

/// Pad with the scalar `value`: `low`/`high` before/after each axis
/// (negative crops), `interior` between elements.
pub(crate) fn pad(x: &Val, value: &Val, low: &[i64], high: &[i64], interior: &[i64]) -> R<Val> {
    let r = x.shape.len();
    if low.len() != r || high.len() != r || interior.len() != r || value.len() != 1 {
        return Err(format!("padding does not match {}", x.spec()));
    }
    if value.dtype != x.dtype || interior.iter().any(|&i| i < 0) {
        return Err("bad padding value or negative interior padding".into());
    }
    let mut out = Vec::with_capacity(r);
    for a in 0..r {
        let e = x.shape[a] as i128;
        let dilated = if e == 0 {
            0
        } else {
            e + (e - 1) * interior[a] as i128
        };
        let size = dilated + low[a] as i128 + high[a] as i128;
        if size < 0 || size > isize::MAX as i128 {
            return Err(format!("padding gives a negative extent on axis {a}"));
        }
        out.push(size as usize);
    }
    let n = num_elements(&out)?;
    let xs = strides(&x.shape);
    let mut c = Counter::new(&out);
    let positions = (0..n).map(|_| {
        let mut p = 0usize;
        let mut inside = true;
        for a in 0..r {
            // Position in the dilated operand.
            let q = c.idx[a] as i128 - i128::from(low[a]);
            let step = i128::from(interior[a]) + 1;
            if q < 0 || q % step != 0 || q / step >= x.shape[a] as i128 {
                inside = false;
                break;
            }
            p += (q / step) as usize * xs[a];
        }
        c.step();
        inside.then_some(p)
    });
    Val::new(x.dtype, out, x.data.pick_or(positions, &value.data))
}
