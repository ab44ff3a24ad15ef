//! Ops at traced indices: `dynamic_slice`, `dynamic_update_slice`,
//! `gather` (start indices clamped so each window fits, as XLA does) and
//! `scatter` (windows that do not fit are skipped, as XLA does).

use crate::interp::checks::IndexNotes;
use crate::interp::elementwise::{float_binary, int_binary};
use crate::interp::value::{num_elements, strides, Counter, Data, Val};
use crate::ir::{BinaryOp, GatherDims, ScatterCombine, ScatterDims};
use crate::shape::TensorSpec;

type R<T> = Result<T, String>;

/// Combines element `i` of the updates into element `p` of the result.
type Combiner = dyn Fn(&mut Data, usize, &Data, usize);

/// Whether no axis is listed twice.
fn distinct(axes: &[usize]) -> bool {
    let mut v = axes.to_vec();
    v.sort_unstable();
    v.windows(2).all(|w| w[0] != w[1])
}

/// Start indices of a window of `sizes` into `shape`, clamped into range.
fn clamped_starts(
    shape: &[usize],
    sizes: &[usize],
    starts: &[&Val],
    notes: &mut IndexNotes,
) -> R<Vec<usize>> {
    if starts.len() != shape.len() || sizes.len() != shape.len() {
        return Err(format!(
            "{} start indices for rank {}",
            starts.len(),
            shape.len()
        ));
    }
    let mut out = Vec::with_capacity(shape.len());
    for (a, s) in starts.iter().enumerate() {
        if sizes[a] > shape[a] {
            return Err(format!(
                "window extent {} exceeds axis {a} of {shape:?}",
                sizes[a]
            ));
        }
        let given = s.scalar_index()?;
        let hi = (shape[a] - sizes[a]) as i64;
        let used = given.clamp(0, hi);
        if used != given {
            notes.note(a, given, used, false);
        }
        out.push(used as usize);
    }
    Ok(out)
}

/// The window of `sizes` at traced `starts` (clamped into range).
pub(crate) fn dynamic_slice(
    x: &Val,
    starts: &[&Val],
    sizes: &[usize],
    notes: &mut IndexNotes,
) -> R<Val> {
    let s = clamped_starts(&x.shape, sizes, starts, notes)?;
    let n = num_elements(sizes)?;
    let xs = strides(&x.shape);
    let base: usize = s.iter().zip(&xs).map(|(a, b)| a * b).sum();
    let mut c = Counter::new(sizes);
    let positions = (0..n).map(|_| {
        let p = base + c.idx.iter().zip(&xs).map(|(a, b)| a * b).sum::<usize>();
        c.step();
        p
    });
    Val::new(x.dtype, sizes.to_vec(), x.data.pick(positions))
}

/// `x` with the window at traced `starts` (clamped into range) replaced by `u`.
pub(crate) fn dynamic_update_slice(
    x: &Val,
    u: &Val,
    starts: &[&Val],
    notes: &mut IndexNotes,
) -> R<Val> {
    if u.dtype != x.dtype || u.shape.len() != x.shape.len() {
        return Err(format!("update {} does not fit {}", u.spec(), x.spec()));
    }
    let s = clamped_starts(&x.shape, &u.shape, starts, notes)?;
    let xs = strides(&x.shape);
    let base: usize = s.iter().zip(&xs).map(|(a, b)| a * b).sum();
    let mut data = x.data.clone();
    let mut c = Counter::new(&u.shape);
    for i in 0..u.len() {
        let p = base + c.idx.iter().zip(&xs).map(|(a, b)| a * b).sum::<usize>();
        data.copy_elem(p, &u.data, i);
        c.step();
    }
    Val::new(x.dtype, x.shape.clone(), data)
}

/// The index vectors of `indices` along `ivd` (`== rank`: a trailing axis
/// of 1): the batch shape and, per batch position, its `len` components.
fn index_vectors(indices: &Val, ivd: usize, len: usize) -> R<(Vec<usize>, Vec<i64>)> {
    let r = indices.shape.len();
    if ivd > r {
        return Err(format!(
            "index_vector_dim {ivd} is out of range for {}",
            indices.spec()
        ));
    }
    let have = if ivd == r { 1 } else { indices.shape[ivd] };
    if have != len {
        return Err(format!(
            "index vectors of {have} components, {len} expected"
        ));
    }
    let batch: Vec<usize> = (0..r)
        .filter(|&a| a != ivd)
        .map(|a| indices.shape[a])
        .collect();
    let st = strides(&indices.shape);
    let vstride = if ivd == r { 0 } else { st[ivd] };
    let bstrides: Vec<usize> = (0..r).filter(|&a| a != ivd).map(|a| st[a]).collect();
    let nb = num_elements(&batch)?;
    let mut out = Vec::with_capacity(nb.saturating_mul(len));
    let mut c = Counter::new(&batch);
    for _ in 0..nb {
        let base: usize = c.idx.iter().zip(&bstrides).map(|(a, b)| a * b).sum();
        for k in 0..len {
            out.push(indices.index_at(base + k * vstride));
        }
        c.step();
    }
    Ok((batch, out))
}

/// XLA gather: a window of `slice_sizes` per index vector, starts clamped.
pub(crate) fn gather(
    x: &Val,
    indices: &Val,
    dims: &GatherDims,
    slice_sizes: &[usize],
    spec: &TensorSpec,
    notes: &mut IndexNotes,
) -> R<Val> {
    let r = x.shape.len();
    let map = &dims.start_index_map;
    let bad = !distinct(map)
        || slice_sizes.len() != r
        || slice_sizes.iter().zip(&x.shape).any(|(s, e)| s > e)
        || map.iter().any(|&d| d >= r)
        || dims
            .collapsed_slice_dims
            .iter()
            .any(|&d| d >= r || slice_sizes[d] != 1);
    if bad {
        return Err(format!(
            "gather dimensions {dims:?} do not fit {}",
            x.spec()
        ));
    }
    let (batch, vecs) = index_vectors(indices, dims.index_vector_dim, map.len())?;
    let window: Vec<usize> = (0..r)
        .filter(|d| !dims.collapsed_slice_dims.contains(d))
        .collect();
    let out = &spec.shape;
    let batch_axes: Vec<usize> = (0..out.len())
        .filter(|a| !dims.offset_dims.contains(a))
        .collect();
    let fits = dims.offset_dims.len() == window.len()
        && batch_axes.len() == batch.len()
        && batch_axes.iter().zip(&batch).all(|(&a, &b)| out[a] == b)
        && dims
            .offset_dims
            .iter()
            .zip(&window)
            .all(|(&a, &d)| a < out.len() && out[a] == slice_sizes[d]);
    if !fits {
        return Err(format!(
            "gather result {spec} does not match its dimensions {dims:?}"
        ));
    }
    // Clamped starts per batch position, as operand offsets.
    let xs = strides(&x.shape);
    let nb = num_elements(&batch)?;
    let mut base = Vec::with_capacity(nb);
    for b in 0..nb {
        let mut off = 0usize;
        for (k, &d) in map.iter().enumerate() {
            let given = vecs[b * map.len() + k];
            let used = given.clamp(0, (x.shape[d] - slice_sizes[d]) as i64);
            if used != given {
                notes.note(d, given, used, false);
            }
            off += used as usize * xs[d];
        }
        base.push(off);
    }
    let bst = strides(&batch);
    let n = num_elements(out)?;
    let mut c = Counter::new(out);
    let positions = (0..n).map(|_| {
        let b: usize = batch_axes
            .iter()
            .zip(&bst)
            .map(|(&a, s)| c.idx[a] * s)
            .sum();
        let w: usize = dims
            .offset_dims
            .iter()
            .zip(&window)
            .map(|(&a, &d)| c.idx[a] * xs[d])
            .sum();
        c.step();
        base[b] + w
    });
    Val::new(x.dtype, out.clone(), x.data.pick(positions))
}

/// XLA scatter: each window of `updates` combined into `x` at its index
/// vector, in row-major order of the index positions; windows that do not
/// fit are skipped.
pub(crate) fn scatter(
    x: &Val,
    indices: &Val,
    updates: &Val,
    dims: &ScatterDims,
    combine: ScatterCombine,
    notes: &mut IndexNotes,
) -> R<Val> {
    let r = x.shape.len();
    let map = &dims.scatter_dims_to_operand_dims;
    let win_axes: Vec<usize> = (0..r)
        .filter(|d| !dims.inserted_window_dims.contains(d))
        .collect();
    let us = &updates.shape;
    let uw = &dims.update_window_dims;
    let scatter_axes: Vec<usize> = (0..us.len()).filter(|a| !uw.contains(a)).collect();
    let (batch, vecs) = index_vectors(indices, dims.index_vector_dim, map.len())?;
    let fits = updates.dtype == x.dtype
        && distinct(map)
        && distinct(uw)
        && map.iter().all(|&d| d < r)
        && uw.len() == win_axes.len()
        && uw.iter().all(|&a| a < us.len())
        && scatter_axes.len() == batch.len()
        && scatter_axes.iter().zip(&batch).all(|(&a, &b)| us[a] == b);
    if !fits {
        return Err(format!(
            "scatter of {} into {} does not match its dimensions {dims:?}",
            updates.spec(),
            x.spec()
        ));
    }
    // Window extent per operand axis.
    let mut wsize = vec![1usize; r];
    for (&a, &d) in uw.iter().zip(&win_axes) {
        wsize[d] = us[a];
    }
    if wsize.iter().zip(&x.shape).any(|(w, e)| w > e) {
        return Err(format!(
            "scatter windows of {} exceed {}",
            updates.spec(),
            x.spec()
        ));
    }
    let wshape: Vec<usize> = uw.iter().map(|&a| us[a]).collect();
    let nw = num_elements(&wshape)?;
    let (xs, ust) = (strides(&x.shape), strides(us));
    let f: Box<Combiner> = match combine {
        ScatterCombine::Set => Box::new(|d: &mut Data, p, u: &Data, i| d.copy_elem(p, u, i)),
        c => {
            let op = match c {
                ScatterCombine::Add => BinaryOp::Add,
                ScatterCombine::Mul => BinaryOp::Mul,
                ScatterCombine::Max => BinaryOp::Max,
                _ => BinaryOp::Min,
            };
            let fl = float_binary(op, x.dtype).ok_or("no combiner")?;
            let int = int_binary(op, x.dtype).ok_or("no integer combiner")?;
            Box::new(move |d: &mut Data, p, u: &Data, i| match (d, u) {
                (Data::F(a), Data::F(b)) => a[p] = fl(a[p], b[i]),
                (Data::I(a), Data::I(b)) => a[p] = int(a[p], b[i]),
                _ => {}
            })
        }
    };
    let mut data = x.data.clone();
    let nb = num_elements(&batch)?;
    let mut bc = Counter::new(&batch);
    'windows: for b in 0..nb {
        let ubase: usize = scatter_axes
            .iter()
            .zip(&bc.idx)
            .map(|(&a, i)| i * ust[a])
            .sum();
        bc.step();
        let mut xbase = 0usize;
        for (k, &d) in map.iter().enumerate() {
            let s = vecs[b * map.len() + k];
            if s < 0 || s > (x.shape[d] as i64) - (wsize[d] as i64) {
                notes.note(d, s, s, true);
                continue 'windows;
            }
            xbase += s as usize * xs[d];
        }
        let mut wc = Counter::new(&wshape);
        for _ in 0..nw {
            let mut u = ubase;
            let mut p = xbase;
            for (j, &i) in wc.idx.iter().enumerate() {
                u += i * ust[uw[j]];
                p += i * xs[win_axes[j]];
            }
            f(&mut data, p, &updates.data, u);
            wc.step();
        }
    }
    Val::new(x.dtype, x.shape.clone(), data)
}
