//! Gather and scatter (XLA semantics), and the numpy-style `take` /
//! `index_update` built on them.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{GatherDims, Op, ScatterCombine, ScatterDims};
use crate::ops::constant::full_at;
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

/// How [`Tensor::take_with`] treats indices outside the axis (of `n`
/// elements), as JAX's `jnp.take` modes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TakeMode {
    /// An index in `-n .. 0` counts from the end; one outside `-n .. n`
    /// reads the fill value (NaN for floats, the least signed or the
    /// greatest unsigned integer, `true`). The default, as in JAX.
    #[default]
    Fill,
    /// An index in `-n .. 0` counts from the end; the others are clamped
    /// into `0 .. n`.
    Clip,
    /// Indices are taken modulo `n` (`-1` reads the last element, `n` the
    /// first).
    Wrap,
    /// The indices are in `0 .. n`, and nothing checks or adjusts them:
    /// the gather as XLA runs it (an index outside is clamped, which the
    /// interpreter reports as a
    /// [`FindingKind::ClampedIndex`](crate::interp::FindingKind::ClampedIndex)).
    /// No extra op: for indices computed in range.
    PromiseInBounds,
}

/// The value a [`TakeMode::Fill`] read gives outside the axis.
#[track_caller]
fn fill_value(dtype: DType, loc: &Location) -> Tensor {
    if dtype.is_float() {
        full_at(Vec::new(), f64::NAN, dtype, loc.clone())
    } else if dtype == DType::Pred {
        full_at(Vec::new(), 1.0, dtype, loc.clone())
    } else if dtype.is_unsigned() {
        // All ones: the greatest value.
        !full_at(Vec::new(), 0.0, dtype, loc.clone())
    } else {
        let bits = 8 * dtype.size_in_bytes() as i32;
        full_at(Vec::new(), -(2f64.powi(bits - 1)), dtype, loc.clone())
    }
}

/// `indices` into an axis of `n` elements made to read in range as `mode`
/// says, and (for [`TakeMode::Fill`]) which of them were in range.
#[track_caller]
fn in_range(indices: Tensor, n: usize, mode: TakeMode, loc: &Location) -> (Tensor, Option<Tensor>) {
    // An index type too narrow for `n` (or for `-n`) computes in s64.
    let dtype = indices.dtype();
    let fits = match dtype {
        DType::S32 => n <= i32::MAX as usize,
        DType::S64 | DType::U64 => true,
        DType::U32 => n <= u32::MAX as usize,
        _ => false,
    };
    let idx = if fits {
        indices
    } else {
        indices.cast(DType::S64)
    };
    let signed = !idx.dtype().is_unsigned();
    let n_t = full_at(Vec::new(), n as f64, idx.dtype(), loc.clone());
    let zero = full_at(Vec::new(), 0.0, idx.dtype(), loc.clone());
    if mode == TakeMode::Wrap {
        let r = idx % n_t;
        let r = if signed {
            r.lt(zero).select(r + n_t, r)
        } else {
            r
        };
        return (r, None);
    }
    let norm = if signed {
        idx.lt(zero).select(idx + n_t, idx)
    } else {
        idx
    };
    if mode == TakeMode::Clip {
        return (norm.clamp(0.0, (n - 1) as f64), None);
    }
    let valid = norm.ge(zero) & norm.lt(n_t);
    (valid.select(norm, zero), Some(valid))
}

/// The largest index a scatter of `upd` into `x` takes per index vector
/// component (an extent less its window's), or -1 where the dims do not fit.
fn scatter_bounds(x: &[usize], upd: &[usize], d: &ScatterDims) -> Vec<i64> {
    let windowed: Vec<usize> = (0..x.len())
        .filter(|a| !d.inserted_window_dims.contains(a))
        .collect();
    d.scatter_dims_to_operand_dims
        .iter()
        .map(|&a| {
            let Some(&n) = x.get(a) else { return -1 };
            let w = if d.inserted_window_dims.contains(&a) {
                Some(1)
            } else {
                windowed
                    .iter()
                    .position(|&b| b == a)
                    .and_then(|j| d.update_window_dims.get(j))
                    .and_then(|&u| upd.get(u).copied())
            };
            w.map_or(-1, |w| n as i64 - w as i64)
        })
        .collect()
}

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
        let loc = Location::caller();
        let shape = self.shape();
        let bounds: Vec<i64> = dims
            .start_index_map
            .iter()
            .map(|&d| match (shape.get(d), slice_sizes.get(d)) {
                (Some(&n), Some(&w)) => n as i64 - w as i64,
                _ => -1,
            })
            .collect();
        crate::ops::check::indices_auto("gather", indices, dims.index_vector_dim, &bounds, &loc);
        let slice_sizes = slice_sizes.to_vec();
        build("gather", &[self, indices], loc, 1, move |s| {
            let shape = gather_shape(&s[0], &s[1], &dims, &slice_sizes)?;
            Ok((
                Op::Gather { dims, slice_sizes },
                vec![TensorSpec::new(shape, s[0].dtype)],
            ))
        })[0]
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
        let loc = Location::caller();
        let bounds = scatter_bounds(&self.shape(), &updates.shape(), &dims);
        crate::ops::check::indices_auto("scatter", indices, dims.index_vector_dim, &bounds, &loc);
        build("scatter", &[self, indices, updates], loc, 1, move |s| {
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
        })[0]
    }

    /// numpy `take`: elements along `axis` at integer `indices` (any shape);
    /// the result is `shape[..axis] ++ indices.shape ++ shape[axis+1..]`.
    ///
    /// As JAX's `jnp.take` by default ([`TakeMode::Fill`]): with `n`
    /// elements along `axis`, an index in `-n .. 0` counts from the end, and
    /// an index outside `-n .. n` reads a fill value (NaN for floats, the
    /// least value of a signed integer type, the greatest of an unsigned
    /// one, `true` for `pred`), never another element. See
    /// [`take_with`](Self::take_with) for the other modes. An `axis` with
    /// no elements (`n = 0`) has nothing to take from: a kernel error,
    /// unless there are no indices either (the result is then empty).
    ///
    /// ```
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let k = Kernel::new("take", |a: &[Tensor]| a[0].take(a[1], 0));
    /// let x = HostTensor::from_vec(vec![10i32, 20, 30], [3])?;
    /// let i = HostTensor::from_vec(vec![-1i32, 5, 1], [3])?;
    /// let out = k.run(&Device::cpu()?, &[&x, &i])?;
    /// assert_eq!(out[0].to_vec::<i32>()?, vec![30, i32::MIN, 20]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    #[track_caller]
    pub fn take(self, indices: Tensor, axis: isize) -> Tensor {
        self.take_at(indices, axis, TakeMode::Fill, Location::caller())
    }

    /// [`take`](Self::take) with out-of-range indices handled as `mode`
    /// says (JAX's `mode=` of `jnp.take`).
    #[track_caller]
    pub fn take_with(self, indices: Tensor, axis: isize, mode: TakeMode) -> Tensor {
        self.take_at(indices, axis, mode, Location::caller())
    }

    #[track_caller]
    fn take_at(self, indices: Tensor, axis: isize, mode: TakeMode, loc: Location) -> Tensor {
        let (x, i) = (self.spec(), indices.spec());
        let Some(a) = normalize_axis(axis, x.rank()) else {
            let m = format!("axis {axis} is out of range for {x}");
            return build("take", &[self, indices], loc, 1, move |_| Err(m))[0];
        };
        if !i.dtype.is_integer() {
            let m = format!("the indices must be integers, got {i}; cast them first (.cast(S32))");
            return build("take", &[self, indices], loc, 1, move |_| Err(m))[0];
        }
        let n = x.shape[a];
        let mut shape = x.shape[..a].to_vec();
        shape.extend(&i.shape);
        shape.extend(&x.shape[a + 1..]);
        if n == 0 {
            // No element to gather a window of one from.
            if i.shape.contains(&0) {
                return full_at(shape, 0.0, x.dtype, loc);
            }
            let m = format!("takes along axis {a} of {x}, which has no element, at indices {i}");
            return build("take", &[self, indices], loc, 1, move |_| Err(m))[0];
        }
        let (idx, valid) = match mode {
            TakeMode::PromiseInBounds => (indices, None),
            _ => in_range(indices, n, mode, &loc),
        };
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
        let taken = self.gather(idx, dims, &sizes);
        let Some(valid) = valid else {
            return taken;
        };
        // `valid` over the result: the indices' extents, ones elsewhere.
        let mut at: Vec<isize> = vec![1; a];
        at.extend(i.shape.iter().map(|&e| e as isize));
        at.extend(std::iter::repeat_n(1, x.rank() - a - 1));
        let fill = fill_value(x.dtype, &loc);
        valid.reshape(&at).select(taken, fill)
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
