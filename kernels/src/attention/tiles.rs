//! Tiles of the attention kernels: positions known while tracing or traced,
//! tile reads with padding, the ordering trick that keeps unrolled blocks
//! one after the other, the lane-split row reduction, and the dropout bits.

use tessel::ops::{split_row_reduce, ReduceKind};
use tessel::prelude::*;

use super::checks::Dims;

const GOLDEN: u32 = 0x9E37_79B9;

/// A start along one axis: known while tracing, or a traced `s32` scalar.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pos {
    /// Known while tracing.
    Static(usize),
    /// Traced; `in_range` promises that the whole tile lies inside the axis.
    Traced { start: Tensor, in_range: bool },
}

impl Pos {
    pub(crate) fn tensor(self) -> Tensor {
        match self {
            Pos::Static(s) => Tensor::scalar(s as f64, S32),
            Pos::Traced { start, .. } => start,
        }
    }
}

/// A block index: known while tracing, or a traced `s32` scalar.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Idx {
    Static(usize),
    Traced(Tensor),
}

/// The tile of `x` made of `size` elements from `pos` along each listed
/// axis (all of every other axis). Past the end of an axis it reads `pad`:
/// static tiles are sliced and padded; traced ones are read at a start
/// clamped into range and, on an axis whose last block is ragged, shifted
/// into place with `pad` behind (one block of work, no padded copy of `x`).
pub(crate) fn tile(x: Tensor, reads: &[(usize, Pos, usize)], pad: f64) -> Tensor {
    let mut shape = x.shape();
    let rank = shape.len();
    let dtype = x.dtype();
    if reads.iter().all(|(_, p, _)| matches!(p, Pos::Static(_))) {
        let mut t = x;
        for &(axis, pos, size) in reads {
            let Pos::Static(s) = pos else { continue };
            let n = shape[axis];
            let (s0, e) = (s.min(n), (s + size).min(n));
            if (s0, e) != (0, n) {
                t = t.slice_axis(axis as isize, s0, e);
            }
            if e - s0 < size {
                t = pad_axis(t, axis, size - (e - s0), pad);
            }
        }
        return t;
    }
    let mut x = x;
    for &(axis, _, size) in reads {
        if shape[axis] < size {
            x = pad_axis(x, axis, size - shape[axis], pad);
            shape[axis] = size;
        }
    }
    let zero = Tensor::scalar(0.0, S32);
    let mut starts = vec![zero; rank];
    let mut sizes = shape.clone();
    let mut shifts = Vec::new();
    for &(axis, pos, size) in reads {
        sizes[axis] = size;
        let n = shape[axis];
        match pos {
            Pos::Traced {
                start,
                in_range: true,
            } => starts[axis] = start,
            _ => {
                let start = pos.tensor();
                let clamped = start.minimum((n - size) as i32);
                starts[axis] = clamped;
                if !n.is_multiple_of(size) {
                    shifts.push((axis, start - clamped));
                }
            }
        }
    }
    let mut w = x.dynamic_slice(&starts, &sizes);
    for (axis, delta) in shifts {
        let fill = Tensor::full(sizes.clone(), pad, dtype);
        let ext = concat(&[w, fill], axis as isize);
        let mut st = vec![zero; rank];
        st[axis] = delta;
        w = ext.dynamic_slice(&st, &sizes);
    }
    w
}

fn pad_axis(t: Tensor, axis: usize, extra: usize, pad: f64) -> Tensor {
    let rank = t.rank();
    let mut high = vec![0i64; rank];
    high[axis] = extra as i64;
    let zeros = vec![0i64; rank];
    t.pad(pad, &zeros, &high, &zeros)
}

/// The static start `start` as a traced position that XLA can only compute
/// after `dep` (it adds `first element of dep > +inf`, always 0, as an s32).
///
/// The unrolled blocks of the static-layout kernels read their queries and
/// keys at such positions, each depending on the previous block's results:
/// otherwise XLA may schedule the independent matmuls of every unrolled
/// block first and keep all their logits alive at once (slower, and more
/// memory). Optimization barriers do not survive the CPU plugin's pipeline;
/// a data dependency does. An empty `dep` (values of head dimension 0)
/// has no element to depend on, and no work to order: the start stays static.
pub(crate) fn after(start: usize, dep: Tensor) -> Pos {
    if dep.shape().contains(&0) {
        return Pos::Static(start);
    }
    let rank = dep.rank();
    let first = dep.slice(&vec![0; rank], &vec![1; rank], &vec![1; rank]);
    let zero = first.reshape(&[]).gt(f64::INFINITY).cast(S32);
    Pos::Traced {
        start: zero + start as i32,
        in_range: true,
    }
}

/// The max (or sum) of `s` over its last axis, kept as an axis of 1.
///
/// Marked to be split into lanes of 8 where the plugin's own row
/// reductions are slow ([`split_row_reduce`]): on the pinned CPU plugin
/// (0.0.1) a plain max over the minor axis compiles to a scalar loop that
/// costs as much as both matmuls of the block. Reducing each run of 8 keys
/// first, then (behind an optimization barrier, so that XLA does not merge
/// the two back) the partial results, made causal flash attention 1.7×
/// faster there, and 5–7% faster than reducing over the `keys / 8` axis
/// first (B1 H8 D64: 38.2–38.4 against 40.7–41.8 ms at S = 2048). The newer
/// CPU builds reduce the rows whole, which is faster on them (lammps 0.11.2,
/// S = 2048: 40–43 ms against 48–50 split).
pub(crate) fn row_reduce(s: Tensor, max: bool) -> Tensor {
    let shape: Vec<isize> = s.shape().iter().map(|&x| x as isize).collect();
    let kind = if max {
        ReduceKind::Max
    } else {
        ReduceKind::Sum
    };
    let n = shape.len();
    let kept = [&shape[..n - 1], &[1]].concat();
    split_row_reduce(s, kind).reshape(&kept)
}

/// A `[B|1, Hq|1, Sq, Skv]` tensor viewed as `[B|1, Hkv|1, G|1, Sq, Skv]`.
pub(crate) fn per_head_5d(t: Tensor, d: &Dims) -> Tensor {
    let s = t.shape();
    let (hk, g) = if s[1] == 1 { (1, 1) } else { (d.hkv, d.g) };
    t.reshape(&[
        s[0] as isize,
        hk as isize,
        g as isize,
        s[2] as isize,
        s[3] as isize,
    ])
}

/// murmur3's finalizer on u32 tensors (wrapping arithmetic).
fn mix(h: Tensor) -> Tensor {
    let h = h ^ h.shift_right_logical(16u32);
    let h = h * 0x85eb_ca6bu32;
    let h = h ^ h.shift_right_logical(13u32);
    let h = h * 0xc2b2_ae35u32;
    h ^ h.shift_right_logical(16u32)
}

/// `x mod 2^32`, for index arithmetic in wrapping u32.
fn wrap(x: usize) -> u32 {
    (x as u64 & 0xFFFF_FFFF) as u32
}

/// The dropout keep-mask of a `[B, Hkv, G, rows, keys]` block whose first
/// row is query `q0` and first column key `k0`: element `(b, h, q, k)` of
/// the `[B, Hq, Sq, Skv]` probabilities is kept iff
/// `uniform(seed)[((b·Hq + h)·Sq + q)·Skv + k] >= rate`, the bits of
/// [`tessel::ops::random::random_bits`] (so the same seed gives the same mask
/// at any block size, and on the host through
/// [`random_bits_reference`](tessel::ops::random::random_bits_reference)).
pub(crate) fn dropout_keep(
    seed: Tensor,
    d: &Dims,
    q0: Pos,
    k0: Pos,
    rows: usize,
    keys: usize,
    rate: f64,
) -> Tensor {
    let row_shape = [d.b, d.hkv, d.g, rows, 1];
    let iota = |dim: usize| Tensor::iota(row_shape, dim, U32);
    let head = iota(1) * wrap(d.g) + iota(2);
    let q = iota(3) + q0.tensor().cast(U32);
    let row = ((iota(0) * wrap(d.hq) + head) * wrap(d.sq) + q) * wrap(d.skv);
    let col = Tensor::iota([1, 1, 1, 1, keys], 4, U32) + k0.tensor().cast(U32);
    let index = row + col;
    let bits = mix(index * GOLDEN + mix(seed.cast(U32)));
    let u = bits.shift_right_logical(8u32).cast(F32) * (0.5f64).powi(24);
    u.ge(rate)
}
