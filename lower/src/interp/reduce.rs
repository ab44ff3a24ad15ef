//! Reductions and orderings: `reduce` with its init value, the (value,
//! index) reduce of argmax/argmin, the stable `sort` and `top_k`.

use std::cmp::Ordering;

use crate::dtype::DType;
use crate::interp::elementwise::{float_binary, int_binary};
use crate::interp::value::{
    daz, int_cmp, int_key, num_elements, rounder, strides, Counter, Data, Val,
};
use crate::ir::{BinaryOp, ReduceKind};

type R<T> = Result<T, String>;

/// The shape without `dims`, and for each axis of `shape` its stride in
/// that result (0 for the reduced axes).
fn kept(shape: &[usize], dims: &[usize]) -> R<(Vec<usize>, Vec<usize>)> {
    if dims.iter().any(|&d| d >= shape.len()) {
        return Err(format!(
            "reduced axes {dims:?} are out of range for {shape:?}"
        ));
    }
    let out: Vec<usize> = (0..shape.len())
        .filter(|a| !dims.contains(a))
        .map(|a| shape[a])
        .collect();
    let os = strides(&out);
    let mut k = 0;
    let mut map = vec![0usize; shape.len()];
    for (a, m) in map.iter_mut().enumerate() {
        if !dims.contains(&a) {
            *m = os[k];
            k += 1;
        }
    }
    Ok((out, map))
}

/// `reduce(x, init)` over `dims`: every result element starts at `init` and
/// combines the operand's elements in row-major order; float sums and
/// products accumulate in `f64` and round once to the dtype.
pub(crate) fn reduce(x: &Val, init: &Val, kind: ReduceKind, dims: &[usize]) -> R<Val> {
    if init.len() != 1 || init.dtype != x.dtype {
        return Err(format!(
            "reduce init {} does not fit {}",
            init.spec(),
            x.spec()
        ));
    }
    let op = match kind {
        ReduceKind::Sum => BinaryOp::Add,
        ReduceKind::Prod => BinaryOp::Mul,
        ReduceKind::Max => BinaryOp::Max,
        ReduceKind::Min => BinaryOp::Min,
        ReduceKind::And => BinaryOp::And,
        ReduceKind::Or => BinaryOp::Or,
    };
    let (out, map) = kept(&x.shape, dims)?;
    let n_out = num_elements(&out)?;
    let mut c = Counter::new(&x.shape);
    let mut target = move || {
        let t: usize = c.idx.iter().zip(&map).map(|(a, b)| a * b).sum();
        c.step();
        t
    };
    let data = match (&x.data, &init.data) {
        (Data::F(v), Data::F(i)) if matches!(kind, ReduceKind::Sum | ReduceKind::Prod) => {
            // Accumulated in f64, rounded once: XLA sums narrow floats in
            // f32 and f32 in several partial sums, so that a long sum does
            // not stall where one accumulator of the dtype would.
            let (z, r) = (daz(x.dtype), rounder(x.dtype));
            let sum = kind == ReduceKind::Sum;
            let mut acc = vec![z(i[0]); n_out];
            for &e in v {
                let t = target();
                acc[t] = if sum { acc[t] + z(e) } else { acc[t] * z(e) };
            }
            Data::F(acc.into_iter().map(r).collect())
        }
        (Data::F(v), Data::F(i)) => {
            let f = float_binary(op, x.dtype)
                .ok_or_else(|| format!("{kind:?} is not defined for {}", x.dtype))?;
            let mut acc = vec![i[0]; n_out];
            for &e in v {
                let t = target();
                acc[t] = f(acc[t], e);
            }
            Data::F(acc)
        }
        (Data::I(v), Data::I(i)) => {
            let f = int_binary(op, x.dtype)
                .ok_or_else(|| format!("{kind:?} is not defined for {}", x.dtype))?;
            let mut acc = vec![i[0]; n_out];
            for &e in v {
                let t = target();
                acc[t] = f(acc[t], e);
            }
            Data::I(acc)
        }
        _ => return Err("reduce operands differ in kind".into()),
    };
    Val::new(x.dtype, out, data)
}

/// The (value, index) reduce of argmax (`max`) or argmin along `dim`: the
/// extreme value wins, ties go to the smaller index, a NaN counts as the
/// extreme (the first NaN wins), starting from (`init_v`, `init_i`).
pub(crate) fn arg_reduce(
    x: &Val,
    idx: &Val,
    init_v: &Val,
    init_i: &Val,
    max: bool,
    dim: usize,
) -> R<Vec<Val>> {
    if idx.shape != x.shape || init_v.len() != 1 || init_i.len() != 1 || init_v.dtype != x.dtype {
        return Err(format!("argument reduce operands do not fit {}", x.spec()));
    }
    let (out, map) = kept(&x.shape, &[dim])?;
    let n_out = num_elements(&out)?;
    let targets = || {
        let mut c = Counter::new(&x.shape);
        (0..x.len()).map(move |_| {
            let t: usize = c.idx.iter().zip(&map).map(|(a, b)| a * b).sum();
            c.step();
            t
        })
    };
    let init_i = init_i.i64_at(0);
    let mut acc_i = vec![init_i; n_out];
    let values = match (&x.data, &init_v.data) {
        (Data::F(v), Data::F(i)) => Data::F(select_args(
            v,
            i[0],
            idx,
            Selector {
                max,
                is_nan: f64::is_nan,
                read: daz(x.dtype),
            },
            targets(),
            &mut acc_i,
        )),
        (Data::I(v), Data::I(i)) => Data::I(select_args(
            v,
            i[0],
            idx,
            Selector {
                max,
                is_nan: |_| false,
                read: int_key(x.dtype),
            },
            targets(),
            &mut acc_i,
        )),
        _ => return Err("argument reduce operands differ in kind".into()),
    };
    Ok(vec![
        Val::new(x.dtype, out.clone(), values)?,
        Val::new(idx.dtype, out, Data::I(acc_i))?,
    ])
}

/// How the argmax/argmin selector compares values of one element kind.
struct Selector<T> {
    /// argmax (`true`) or argmin.
    max: bool,
    /// Whether a value is a NaN.
    is_nan: fn(T) -> bool,
    /// The value as the CPU reads it (subnormals as zero), or as a key
    /// that orders like it (u64 bit patterns).
    read: fn(T) -> T,
}

/// Folds `v` into one (value, index) accumulator per target with the
/// argmax/argmin selector of the lowering.
fn select_args<T: Copy + PartialOrd>(
    v: &[T],
    init: T,
    idx: &Val,
    sel: Selector<T>,
    targets: impl Iterator<Item = usize>,
    acc_i: &mut [i64],
) -> Vec<T> {
    let mut acc_v = vec![init; acc_i.len()];
    // The region's selector: does (a, ai) win over (b, bi)? Values compare
    // as the CPU reads them, and keep their bits.
    let take_a = |a: T, ai: i64, b: T, bi: i64| {
        let (a, b) = ((sel.read)(a), (sel.read)(b));
        let better = if sel.max { a > b } else { a < b };
        let mut take = better || (a == b && ai < bi);
        if (sel.is_nan)(a) {
            take |= !(sel.is_nan)(b) || ai < bi;
        }
        take
    };
    for (e, t) in targets.enumerate() {
        let (b, bi) = (v[e], idx.i64_at(e));
        if !take_a(acc_v[t], acc_i[t], b, bi) {
            acc_v[t] = b;
            acc_i[t] = bi;
        }
    }
    acc_v
}

/// The total order XLA sorts floats by (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN).
fn key_order(key: &Val) -> Box<dyn Fn(usize, usize) -> Ordering + '_> {
    match &key.data {
        Data::F(v) => Box::new(move |a, b| v[a].total_cmp(&v[b])),
        Data::I(v) => {
            let cmp = int_cmp(key.dtype);
            Box::new(move |a, b| cmp(&v[a], &v[b]))
        }
    }
}

/// The stable order of each lane along `dim` of `key`: for every lane, the
/// source positions of its sorted elements.
fn lane_orders(
    key: &Val,
    dim: usize,
    descending: bool,
    take: usize,
) -> R<(Vec<usize>, Vec<usize>)> {
    if dim >= key.shape.len() {
        return Err(format!("axis {dim} is out of range for {}", key.spec()));
    }
    let st = strides(&key.shape);
    let len = key.shape[dim];
    let mut lanes_shape = key.shape.clone();
    lanes_shape[dim] = 1;
    let lanes = num_elements(&lanes_shape)?;
    let cmp = key_order(key);
    let mut out_shape = key.shape.clone();
    out_shape[dim] = take;
    let mut positions = vec![0usize; num_elements(&out_shape)?];
    let ost = strides(&out_shape);
    let mut c = Counter::new(&lanes_shape);
    let mut perm: Vec<usize> = Vec::with_capacity(len);
    for _ in 0..lanes {
        let base: usize = c.idx.iter().zip(&st).map(|(a, b)| a * b).sum();
        let obase: usize = c.idx.iter().zip(&ost).map(|(a, b)| a * b).sum();
        c.step();
        perm.clear();
        perm.extend((0..len).map(|j| base + j * st[dim]));
        if descending {
            perm.sort_by(|&a, &b| cmp(b, a));
        } else {
            perm.sort_by(|&a, &b| cmp(a, b));
        }
        for (j, &p) in perm.iter().take(take).enumerate() {
            positions[obase + j * ost[dim]] = p;
        }
    }
    Ok((out_shape, positions))
}

/// Stable sort along `dim` by the first operand; the others follow.
pub(crate) fn sort(xs: &[&Val], dim: usize, descending: bool) -> R<Vec<Val>> {
    let key = xs.first().ok_or("sort needs operands")?;
    if xs.iter().any(|x| x.shape != key.shape) {
        return Err("sorted operands differ in shape".into());
    }
    let len = key.shape.get(dim).copied().unwrap_or(0);
    let (shape, pos) = lane_orders(key, dim, descending, len)?;
    xs.iter()
        .map(|x| Val::new(x.dtype, shape.clone(), x.data.pick(pos.iter().copied())))
        .collect()
}

/// The `k` largest along the last axis, largest first (ties: smaller index
/// first), and their indices as s32.
pub(crate) fn top_k(x: &Val, k: usize) -> R<Vec<Val>> {
    let dim = x.shape.len().checked_sub(1).ok_or("top_k of a scalar")?;
    if k > x.shape[dim] {
        return Err(format!("k = {k} exceeds the last axis of {}", x.spec()));
    }
    let (shape, pos) = lane_orders(x, dim, true, k)?;
    let len = x.shape[dim].max(1);
    let idx = pos.iter().map(|&p| (p % len) as i64).collect();
    Ok(vec![
        Val::new(x.dtype, shape.clone(), x.data.pick(pos.iter().copied()))?,
        Val::new(DType::S32, shape, Data::I(idx))?,
    ])
}
