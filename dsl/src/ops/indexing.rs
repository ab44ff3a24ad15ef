//! Gather and scatter (XLA semantics), and the numpy-style `take` /
//! `index_update` built on them.

use crate::error::Location;
use crate::ir::{GatherDims, Op, ScatterCombine, ScatterDims};
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

fn gather_shape(
    x: &TensorSpec,
    idx: &TensorSpec,
    d: &GatherDims,
    sizes: &[usize],
) -> Result<Vec<usize>, String> {
    if !idx.dtype.is_integer() {
        return Err(format!("gather indices must be integers, got {idx}"));
    }
    if d.index_vector_dim > idx.rank() {
        return Err(format!(
            "index_vector_dim {} is out of range for {idx}",
            d.index_vector_dim
        ));
    }
    let vec_len = if d.index_vector_dim == idx.rank() {
        1
    } else {
        idx.shape[d.index_vector_dim]
    };
    if d.start_index_map.len() != vec_len || d.start_index_map.iter().any(|&a| a >= x.rank()) {
        return Err(format!(
            "start_index_map {:?} does not fit index vectors of length {vec_len}",
            d.start_index_map
        ));
    }
    if sizes.len() != x.rank() || sizes.iter().zip(&x.shape).any(|(s, n)| s > n) {
        return Err(format!("slice sizes {sizes:?} do not fit {x}"));
    }
    if d.collapsed_slice_dims
        .iter()
        .any(|&a| a >= x.rank() || sizes[a] != 1)
    {
        return Err("collapsed slice axes must exist and have slice size 1".into());
    }
    let window: Vec<usize> = (0..x.rank())
        .filter(|a| !d.collapsed_slice_dims.contains(a))
        .map(|a| sizes[a])
        .collect();
    if window.len() != d.offset_dims.len() {
        return Err(format!(
            "{} offset dims given for {} window axes",
            d.offset_dims.len(),
            window.len()
        ));
    }
    let batch: Vec<usize> = (0..idx.rank())
        .filter(|&a| a != d.index_vector_dim)
        .map(|a| idx.shape[a])
        .collect();
    let rank = batch.len() + window.len();
    let (mut bi, mut wi) = (0, 0);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        if d.offset_dims.contains(&i) {
            out.push(window[wi]);
            wi += 1;
        } else if bi < batch.len() {
            out.push(batch[bi]);
            bi += 1;
        } else {
            return Err(format!(
                "offset dims {:?} do not fit a result of rank {rank}",
                d.offset_dims
            ));
        }
    }
    Ok(out)
}

impl Tensor {
    /// XLA gather: slices of `slice_sizes` starting at each index vector of `indices`
    /// (clamped into range).
    ///
    /// Out-of-range starts follow XLA's rule: component `k` of a start
    /// vector addresses operand axis `d = start_index_map[k]` and is clamped
    /// into `[0, shape[d] - slice_sizes[d]]`, so that the whole slice fits.
    /// A start below 0 reads the slice at 0; a start whose slice would run
    /// past the end reads the last full slice (`shape[d] - slice_sizes[d]`),
    /// never a padded or shortened one. Indices are read as integers of
    /// their dtype (a negative index does not count from the end; an
    /// unsigned one is never negative). Nothing signals a clamp: check the
    /// indices first, or mask the result, where they may be out of range.
    #[track_caller]
    pub fn gather(self, indices: Tensor, dims: GatherDims, slice_sizes: &[usize]) -> Tensor {
        let slice_sizes = slice_sizes.to_vec();
        build(
            "gather",
            &[self, indices],
            Location::caller(),
            1,
            move |s| {
                let shape = gather_shape(&s[0], &s[1], &dims, &slice_sizes)?;
                Ok((
                    Op::Gather { dims, slice_sizes },
                    vec![TensorSpec::new(shape, s[0].dtype)],
                ))
            },
        )[0]
    }

    /// XLA scatter: combines each window of `updates` into `self` at the index
    /// vectors of `indices` (out-of-range windows are skipped).
    #[track_caller]
    pub fn scatter(
        self,
        indices: Tensor,
        updates: Tensor,
        dims: ScatterDims,
        combine: ScatterCombine,
    ) -> Tensor {
        build(
            "scatter",
            &[self, indices, updates],
            Location::caller(),
            1,
            move |s| {
                let (x, idx, upd) = (&s[0], &s[1], &s[2]);
                if !idx.dtype.is_integer() {
                    return Err(format!("scatter indices must be integers, got {idx}"));
                }
                if upd.dtype != x.dtype {
                    return Err(format!(
                        "updates {upd} must have the operand's dtype {}",
                        x.dtype
                    ));
                }
                if dims.index_vector_dim > idx.rank() {
                    return Err(format!(
                        "index_vector_dim {} is out of range for {idx}",
                        dims.index_vector_dim
                    ));
                }
                let scatter_rank = idx.rank() - usize::from(dims.index_vector_dim < idx.rank());
                if upd.rank() != scatter_rank + dims.update_window_dims.len()
                    || dims.update_window_dims.len() + dims.inserted_window_dims.len() != x.rank()
                {
                    return Err(format!(
                        "updates {upd} do not match operand {x} and indices {idx}"
                    ));
                }
                Ok((Op::Scatter { dims, combine }, vec![x.clone()]))
            },
        )[0]
    }

    /// numpy `take`: elements along `axis` at integer `indices` (any shape);
    /// the result is `shape[..axis] ++ indices.shape ++ shape[axis+1..]`.
    ///
    /// Out-of-range indices are clamped, as in XLA's gather (and JAX's
    /// `take` with `mode="clip"`): with `n` elements along `axis`, an index
    /// below 0 reads element 0 and an index of `n` or more reads element
    /// `n - 1`. Unlike numpy, a negative index does not count from the end
    /// (`-1` reads element 0, not `n - 1`), and no error or NaN marks a
    /// clamped read. Where indices may be out of range, check them on the
    /// host or mask the result with `indices.ge(0) & indices.lt(n)`; to
    /// find where a kernel clamps, run its graph through
    /// [`interp::evaluate`](crate::interp::evaluate) with the default
    /// [`Checks`](crate::interp::Checks): each clamped `take` is a
    /// [`FindingKind::ClampedIndex`](crate::interp::FindingKind::ClampedIndex)
    /// finding on its `gather`, at the line that called `take`. An
    /// `axis` with no elements (`n = 0`) has nothing to clamp to: taking
    /// from it is a kernel error, unless there are no indices either (the
    /// result is then empty).
    #[track_caller]
    pub fn take(self, indices: Tensor, axis: isize) -> Tensor {
        let (x, i) = (self.spec(), indices.spec());
        let Some(a) = normalize_axis(axis, x.rank()) else {
            let m = format!("axis {axis} is out of range for {x}");
            return build("take", &[self, indices], Location::caller(), 1, move |_| {
                Err(m)
            })[0];
        };
        if x.shape[a] == 0 && i.dtype.is_integer() {
            // No element to gather a window of one from.
            let mut shape = x.shape[..a].to_vec();
            shape.extend(&i.shape);
            shape.extend(&x.shape[a + 1..]);
            if i.shape.contains(&0) {
                return Tensor::zeros(shape, x.dtype);
            }
            let m = format!("takes along axis {a} of {x}, which has no element, at indices {i}");
            return build("take", &[self, indices], Location::caller(), 1, move |_| {
                Err(m)
            })[0];
        }
        let mut sizes = x.shape.clone();
        sizes[a] = 1;
        let offset_dims = (0..a)
            .chain(a + i.rank()..x.rank() - 1 + i.rank())
            .collect();
        let dims = GatherDims {
            offset_dims,
            collapsed_slice_dims: vec![a],
            start_index_map: vec![a],
            index_vector_dim: i.rank(),
        };
        self.gather(indices, dims, &sizes)
    }

    /// Combines `updates` into `self` along `axis` at integer `indices` (a
    /// vector or any shape), like `x.at[.., idx, ..].add(u)` in JAX: `updates`
    /// has shape `shape[..axis] ++ indices.shape ++ shape[axis+1..]`.
    /// Out-of-range indices are skipped.
    #[track_caller]
    pub fn index_update(
        self,
        axis: isize,
        indices: Tensor,
        updates: Tensor,
        combine: ScatterCombine,
    ) -> Tensor {
        let (x, i) = (self.spec(), indices.spec());
        let Some(a) = normalize_axis(axis, x.rank()) else {
            let m = format!("axis {axis} is out of range for {x}");
            return build(
                "index_update",
                &[self, indices, updates],
                Location::caller(),
                1,
                move |_| Err(m),
            )[0];
        };
        let dims = ScatterDims {
            update_window_dims: (0..a)
                .chain(a + i.rank()..x.rank() - 1 + i.rank())
                .collect(),
            inserted_window_dims: vec![a],
            scatter_dims_to_operand_dims: vec![a],
            index_vector_dim: i.rank(),
        };
        self.scatter(indices, updates, dims, combine)
    }
}
