//! Reverse-mode rules of the indexing ops: gather, scatter, sort and top-k.

use crate::dtype::DType;
use crate::host::HostTensor;
use crate::ir::{GatherDims, ScatterCombine, ScatterDims};
use crate::trace::tensor::Tensor;

use super::rules::dims_of;

type Grads = Result<Vec<Option<Tensor>>, String>;

/// `indices` with each index-vector component clamped into
/// `[0, bound[k]]`, the way gather clamps its starts.
fn clamp_starts(indices: Tensor, ivd: usize, bounds: &[i64]) -> Tensor {
    let dt = indices.dtype();
    if ivd == indices.rank() {
        return indices.clamp(0.0, bounds[0] as f64);
    }
    let hi = match HostTensor::from_vec(bounds.to_vec(), [bounds.len()]) {
        Ok(h) => Tensor::constant(&h).cast(dt),
        Err(_) => return indices,
    };
    let hi = hi.broadcast_in_dim(indices.shape(), &[ivd]);
    indices.clamp(indices.zeros_like(), hi)
}

/// Whether each index vector of a scatter addresses a window that fits the
/// operand (XLA skips those that do not): a `pred` tensor over the scatter
/// axes of `indices`.
fn in_range(indices: Tensor, ivd: usize, bounds: &[i64]) -> Tensor {
    if ivd == indices.rank() {
        return indices.ge(0.0) & indices.le(bounds[0] as f64);
    }
    let dt = indices.dtype();
    let hi = match HostTensor::from_vec(bounds.to_vec(), [bounds.len()]) {
        Ok(h) => Tensor::constant(&h).cast(dt),
        Err(_) => return indices.ge(0.0).all(&[ivd as isize]),
    };
    let hi = hi.broadcast_in_dim(indices.shape(), &[ivd]);
    (indices.ge(0.0) & indices.le(hi)).all(&[ivd as isize])
}

/// The gradient of `gather`: the cotangent scattered back (added) at the
/// clamped starts the gather read from.
pub(crate) fn gather_vjp(
    x: Tensor,
    indices: Tensor,
    g: Tensor,
    dims: &GatherDims,
    slice_sizes: &[usize],
) -> Tensor {
    let shape = x.shape();
    let bounds: Vec<i64> = dims
        .start_index_map
        .iter()
        .map(|&d| shape[d] as i64 - slice_sizes[d] as i64)
        .collect();
    let idx = clamp_starts(indices, dims.index_vector_dim, &bounds);
    let sd = ScatterDims {
        update_window_dims: dims.offset_dims.clone(),
        inserted_window_dims: dims.collapsed_slice_dims.clone(),
        scatter_dims_to_operand_dims: dims.start_index_map.clone(),
        index_vector_dim: dims.index_vector_dim,
    };
    x.zeros_like().scatter(idx, g, sd, ScatterCombine::Add)
}

/// The gradient of `scatter` for each operand (operand, indices, updates).
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_vjp(
    x: Tensor,
    indices: Tensor,
    upd: Tensor,
    y: Tensor,
    g: Tensor,
    dims: &ScatterDims,
    combine: ScatterCombine,
    want: &[bool],
) -> Grads {
    let shape = x.shape();
    let ushape = upd.shape();
    // The window extent of each operand axis.
    let mut window = vec![1usize; shape.len()];
    let mut w = dims.update_window_dims.iter();
    for (d, slot) in window.iter_mut().enumerate() {
        if !dims.inserted_window_dims.contains(&d) {
            if let Some(&u) = w.next() {
                *slot = ushape[u];
            }
        }
    }
    let bounds: Vec<i64> = dims
        .scatter_dims_to_operand_dims
        .iter()
        .map(|&d| shape[d] as i64 - window[d] as i64)
        .collect();
    let ivd = dims.index_vector_dim;
    let scatter_axes: Vec<usize> = (0..ushape.len())
        .filter(|a| !dims.update_window_dims.contains(a))
        .collect();
    let valid = in_range(indices, ivd, &bounds).broadcast_in_dim(ushape.clone(), &scatter_axes);
    let gd = GatherDims {
        offset_dims: dims.update_window_dims.clone(),
        collapsed_slice_dims: dims.inserted_window_dims.clone(),
        start_index_map: dims.scatter_dims_to_operand_dims.clone(),
        index_vector_dim: ivd,
    };
    // A window larger than its axis (one element of an empty axis) fits
    // nowhere: no update lands, so none reads a cotangent back (and such a
    // gather does not trace).
    let fits = window.iter().zip(&shape).all(|(w, s)| w <= s);
    let back = |t: Tensor| {
        if fits {
            t.gather(indices, gd.clone(), &window)
        } else {
            Tensor::zeros(ushape.clone(), t.dtype())
        }
    };
    let zu = upd.zeros_like();
    let want_upd = want.get(2).copied().unwrap_or(false);
    let (dx, du) = match combine {
        ScatterCombine::Add => (g, want_upd.then(|| valid.select(back(g), zu))),
        ScatterCombine::Set => {
            let dx = g.scatter(indices, zu, dims.clone(), ScatterCombine::Set);
            let du = want_upd.then(|| {
                let n = upd.num_elements();
                let ids = Tensor::arange(n, DType::S32).reshape(&dims_of(&ushape));
                let owner = Tensor::full(shape.clone(), -1.0, DType::S32).scatter(
                    indices,
                    ids,
                    dims.clone(),
                    ScatterCombine::Set,
                );
                let won = back(owner).eq(ids) & valid;
                won.select(back(g), zu)
            });
            (dx, du)
        }
        ScatterCombine::Mul => {
            if want_upd {
                return Err(
                    "the gradient of a multiplying scatter with respect to its updates \
                            is not defined (as in JAX); differentiate with respect to the operand \
                            only, or write the product with a scatter-add of logarithms"
                        .into(),
                );
            }
            let factor = x
                .ones_like()
                .scatter(indices, upd, dims.clone(), ScatterCombine::Mul);
            (g * factor, None)
        }
        ScatterCombine::Max | ScatterCombine::Min => {
            let hit_u = (upd.eq(back(y)) & valid).select(upd.ones_like(), zu);
            let hit_x = x.eq(y).select(x.ones_like(), x.zeros_like());
            let count = hit_x
                + x.zeros_like()
                    .scatter(indices, hit_u, dims.clone(), ScatterCombine::Add);
            let share = g / count.maximum(1.0);
            (share * hit_x, want_upd.then(|| back(share) * hit_u))
        }
    };
    Ok(vec![Some(dx), None, du])
}

/// Adds `updates` into `target` along axis `dim` at the positions `idx`
/// (same rank as `target`; every other axis indexes itself). Used for the
/// gradients of sort and top-k.
pub(crate) fn scatter_along_dim(
    target: Tensor,
    idx: Tensor,
    updates: Tensor,
    dim: usize,
) -> Tensor {
    let tshape = target.shape();
    let ishape = idx.shape();
    let total = target.num_elements().max(1);
    let it = if total > i32::MAX as usize {
        DType::S64
    } else {
        DType::S32
    };
    let mut strides = vec![1usize; tshape.len()];
    for a in (0..tshape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * tshape[a + 1];
    }
    let mut lin = idx.cast(it) * (strides[dim] as f64);
    for (a, &st) in strides.iter().enumerate() {
        if a != dim {
            lin = lin + Tensor::iota(ishape.clone(), a, it) * (st as f64);
        }
    }
    let flat = target.reshape(&[-1]);
    let n = idx.num_elements() as isize;
    flat.index_update(
        0,
        lin.reshape(&[n]),
        updates.reshape(&[n]),
        ScatterCombine::Add,
    )
    .reshape(&dims_of(&tshape))
}

/// [`scatter_along_dim`] on the last axis.
pub(crate) fn scatter_along(target: Tensor, idx: Tensor, updates: Tensor) -> Tensor {
    let last = target.rank().saturating_sub(1);
    scatter_along_dim(target, idx, updates, last)
}

/// The gradient of a (multi-operand) sort: each cotangent moved back to the
/// position its element came from.
pub(crate) fn sort_vjp(keys: Tensor, gs: &[Tensor], dim: usize, descending: bool) -> Vec<Tensor> {
    let shape = keys.shape();
    let iota = Tensor::iota(shape, dim, DType::S32);
    let (_, perm) = keys.sort_with(iota, dim as isize, descending);
    gs.iter()
        .map(|&g| scatter_along_dim(g.zeros_like(), perm, g, dim))
        .collect()
}
