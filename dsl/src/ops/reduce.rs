//! Reductions: sum, max, min, prod, mean, any/all, argmax/argmin, and the
//! stable softmax built from them.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{Op, ReduceKind};
use crate::ops::constant::full_at;
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

fn axes_of(axes: &[isize], s: &TensorSpec) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, s.rank())
            .ok_or_else(|| format!("axis {a} is out of range for {s}"))?;
        if out.contains(&n) {
            return Err(format!("axis {a} is given twice"));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

pub(crate) fn reduce_at(x: Tensor, kind: ReduceKind, axes: &[isize], loc: Location) -> Tensor {
    reduce_marked(x, kind, axes, false, loc)
}

/// `x` reduced with `kind` over its last axis, marked for the backends
/// whose own row reductions are slow to compute in lanes of 8 first (XLA's
/// CPU plugin 0.0.1: there, a row of 16 or more elements, a multiple of 8,
/// is reduced as `[.., N/8, 8]` over the 8 lanes, then, behind an
/// optimization barrier, over the partial results; see
/// [`split_row_reductions`](crate::lower::split_row_reductions)).
/// Elsewhere, and on the interpreter, it is the plain reduction: the values
/// are those of `x.sum(&[-1])`, `x.max(&[-1])` or `x.min(&[-1])` (a sum
/// within float rounding). The library's flash attention reduces its
/// blocks of scores this way. `kind` is `Sum`, `Max` or `Min`.
///
/// ```
/// use tessel_dsl::ir::ReduceKind;
/// use tessel_dsl::lower::{lower, split_row_reductions};
/// use tessel_dsl::{kernel::KernelConfig, ops::split_row_reduce, trace, TensorSpec, F32};
/// let x = [("x".into(), TensorSpec::new([4, 64], F32))];
/// let g = trace("rows", &x, KernelConfig::default(), |a| split_row_reduce(a[0], ReduceKind::Max))?;
/// assert!(!lower(&g).contains("optimization_barrier"));
/// assert!(lower(&split_row_reductions(&g)).contains("tensor<4x8x8xf32>"));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn split_row_reduce(x: Tensor, kind: ReduceKind) -> Tensor {
    let loc = Location::caller();
    if !matches!(kind, ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min) {
        let m = format!("split_row_reduce combines with sum, max or min, not {kind:?}");
        crate::trace::tensor::fail("split_row_reduce", &[x], m, &loc);
    }
    reduce_marked(x, kind, &[-1], true, loc)
}

fn reduce_marked(
    x: Tensor,
    kind: ReduceKind,
    axes: &[isize],
    split_rows: bool,
    loc: Location,
) -> Tensor {
    let dtype = x.dtype();
    let init = full_at(Vec::new(), kind.init(dtype), dtype, loc.clone());
    let axes = axes.to_vec();
    let name = match kind {
        ReduceKind::Sum => "sum",
        ReduceKind::Prod => "prod",
        ReduceKind::Max => "max",
        ReduceKind::Min => "min",
        ReduceKind::And => "all",
        ReduceKind::Or => "any",
    };
    let at = loc.clone();
    let r = build(name, &[x, init], loc, 1, move |s| {
        let dims = axes_of(&axes, &s[0])?;
        let d = s[0].dtype;
        let ok = match kind {
            ReduceKind::And | ReduceKind::Or => d.is_pred() || d.is_integer(),
            _ => !d.is_pred(),
        };
        if !ok {
            return Err(format!("{name} is not defined for {d} elements"));
        }
        let shape = (0..s[0].rank())
            .filter(|i| !dims.contains(i))
            .map(|i| s[0].shape[i])
            .collect::<Vec<_>>();
        let op = Op::Reduce {
            kind,
            dims,
            split_rows,
        };
        Ok((op, vec![TensorSpec::new(shape, d)]))
    })[0];
    crate::ops::check::nan_auto(r, name, &at);
    r
}

#[track_caller]
fn keep(x: Tensor, reduced: Tensor, axes: &[isize]) -> Tensor {
    let spec = x.spec();
    let mut shape: Vec<isize> = spec.shape.iter().map(|&d| d as isize).collect();
    for &a in axes {
        if let Some(n) = normalize_axis(a, spec.rank()) {
            shape[n] = 1;
        }
    }
    reduced.reshape(&shape)
}

impl Tensor {
    /// Sum over `axes` (removed from the shape).
    #[track_caller]
    pub fn sum(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::Sum, axes, Location::caller())
    }

    /// Product over `axes`.
    #[track_caller]
    pub fn prod(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::Prod, axes, Location::caller())
    }

    /// Maximum over `axes`.
    #[track_caller]
    pub fn max(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::Max, axes, Location::caller())
    }

    /// Minimum over `axes`.
    #[track_caller]
    pub fn min(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::Min, axes, Location::caller())
    }

    /// Whether all elements over `axes` are true (`pred` tensors).
    #[track_caller]
    pub fn all(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::And, axes, Location::caller())
    }

    /// Whether any element over `axes` is true (`pred` tensors).
    #[track_caller]
    pub fn any(self, axes: &[isize]) -> Tensor {
        reduce_at(self, ReduceKind::Or, axes, Location::caller())
    }

    /// Mean over `axes` (floats).
    #[track_caller]
    pub fn mean(self, axes: &[isize]) -> Tensor {
        let loc = Location::caller();
        let spec = self.spec();
        let count = axes
            .iter()
            .filter_map(|&a| normalize_axis(a, spec.rank()))
            .map(|a| spec.shape[a])
            .fold(1usize, usize::saturating_mul);
        let s = reduce_at(self, ReduceKind::Sum, axes, loc.clone());
        let c = full_at(Vec::new(), count as f64, spec.dtype, loc.clone());
        crate::ops::elementwise::binary_at(s, c, crate::ops::BinaryOp::Div, loc)
    }

    /// Sum over `axes`, keeping them with extent 1.
    #[track_caller]
    pub fn sum_keepdims(self, axes: &[isize]) -> Tensor {
        keep(
            self,
            reduce_at(self, ReduceKind::Sum, axes, Location::caller()),
            axes,
        )
    }

    /// Maximum over `axes`, keeping them with extent 1.
    #[track_caller]
    pub fn max_keepdims(self, axes: &[isize]) -> Tensor {
        keep(
            self,
            reduce_at(self, ReduceKind::Max, axes, Location::caller()),
            axes,
        )
    }

    /// Mean over `axes`, keeping them with extent 1.
    #[track_caller]
    pub fn mean_keepdims(self, axes: &[isize]) -> Tensor {
        keep(self, self.mean(axes), axes)
    }

    /// Index (s32) of the largest element along `axis`; the first one on ties.
    #[track_caller]
    pub fn argmax(self, axis: isize) -> Tensor {
        arg_reduce(self, true, axis, Location::caller())
    }

    /// Index (s32) of the smallest element along `axis`; the first one on ties.
    #[track_caller]
    pub fn argmin(self, axis: isize) -> Tensor {
        arg_reduce(self, false, axis, Location::caller())
    }

    /// Numerically stable softmax along `axis`.
    #[track_caller]
    pub fn softmax(self, axis: isize) -> Tensor {
        let m = self.max_keepdims(&[axis]);
        let e = (self - m).exp();
        e / e.sum_keepdims(&[axis])
    }

    /// Numerically stable log-softmax along `axis`.
    #[track_caller]
    pub fn log_softmax(self, axis: isize) -> Tensor {
        let m = self.max_keepdims(&[axis]);
        let z = self - m;
        z - z.exp().sum_keepdims(&[axis]).log()
    }

    /// `log(sum(exp(x)))` along `axis`, stable.
    #[track_caller]
    pub fn logsumexp(self, axis: isize) -> Tensor {
        let m = self.max_keepdims(&[axis]);
        let s = (self - m).exp().sum_keepdims(&[axis]).log() + m;
        s.squeeze(axis)
    }
}

fn arg_reduce(x: Tensor, max: bool, axis: isize, loc: Location) -> Tensor {
    let spec = x.spec();
    let name = if max { "argmax" } else { "argmin" };
    let Some(a) = normalize_axis(axis, spec.rank()) else {
        let m = format!("axis {axis} is out of range for {spec}");
        return build(name, &[x], loc, 1, move |_| Err(m))[0];
    };
    let idx = build("iota", &[], loc.clone(), 1, {
        let spec = TensorSpec::new(spec.shape.clone(), DType::S32);
        move |_| Ok((Op::Iota { dim: a }, vec![spec]))
    })[0];
    let kind = if max {
        ReduceKind::Max
    } else {
        ReduceKind::Min
    };
    let init_v = full_at(Vec::new(), kind.init(spec.dtype), spec.dtype, loc.clone());
    let init_i = full_at(Vec::new(), 0.0, DType::S32, loc.clone());
    build(name, &[x, idx, init_v, init_i], loc, 2, move |s| {
        if s[0].dtype.is_pred() {
            return Err(format!("{name} is not defined for pred"));
        }
        let shape: Vec<usize> = (0..s[0].rank())
            .filter(|&i| i != a)
            .map(|i| s[0].shape[i])
            .collect();
        Ok((
            Op::ArgReduce { max, dim: a },
            vec![
                TensorSpec::new(shape.clone(), s[0].dtype),
                TensorSpec::new(shape, DType::S32),
            ],
        ))
    })[1]
}
