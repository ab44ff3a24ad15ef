//! Shape ops: broadcast, reshape, transpose, static and dynamic slices,
//! concatenate, pad.

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::elementwise::{broadcast_to_at, Operand};
use crate::ops::Op;
use crate::shape::{distinct_axes, Shape, TensorSpec};
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

fn axis_of(axis: isize, s: &TensorSpec) -> Result<usize, String> {
    normalize_axis(axis, s.rank())
        .ok_or_else(|| format!("axis {axis} is out of range for {s} (rank {})", s.rank()))
}

impl Tensor {
    /// Broadcasts to `shape` with numpy rules (trailing axes aligned, extents of 1 stretch).
    #[track_caller]
    pub fn broadcast_to(self, shape: impl Into<Shape>) -> Tensor {
        broadcast_to_at(self, &shape.into(), &Location::caller())
    }

    /// XLA's `broadcast_in_dim`: operand axis `i` becomes result axis `dims[i]`.
    #[track_caller]
    pub fn broadcast_in_dim(self, shape: impl Into<Shape>, dims: &[usize]) -> Tensor {
        let shape = shape.into();
        let dims = dims.to_vec();
        build(
            "broadcast_in_dim",
            &[self],
            Location::caller(),
            1,
            move |s| {
                let src = &s[0];
                if dims.len() != src.rank() {
                    return Err(format!(
                        "{} dims given for an operand of rank {}",
                        dims.len(),
                        src.rank()
                    ));
                }
                for (i, &d) in dims.iter().enumerate() {
                    if d >= shape.len() || (src.shape[i] != 1 && src.shape[i] != shape[d]) {
                        return Err(format!(
                            "operand axis {i} cannot map to result axis {d} of {shape:?}"
                        ));
                    }
                    if i > 0 && dims[i - 1] >= d {
                        return Err("broadcast dims must be strictly increasing".into());
                    }
                }
                Ok((
                    Op::BroadcastInDim { dims },
                    vec![TensorSpec::new(shape, src.dtype)],
                ))
            },
        )[0]
    }

    /// The same elements under a new shape; one extent may be `-1` (inferred).
    #[track_caller]
    pub fn reshape(self, shape: &[isize]) -> Tensor {
        let shape = shape.to_vec();
        build("reshape", &[self], Location::caller(), 1, move |s| {
            let n = s[0].num_elements();
            let Some(known) = shape
                .iter()
                .filter(|&&d| d >= 0)
                .try_fold(1usize, |p, &d| p.checked_mul(d as usize))
            else {
                return Err(format!(
                    "cannot reshape {} to {shape:?}: the extents' product overflows",
                    s[0]
                ));
            };
            let holes = shape.iter().filter(|&&d| d < 0).count();
            let out: Shape = match holes {
                0 => shape.iter().map(|&d| d as usize).collect(),
                1 if known > 0 && n % known == 0 => shape
                    .iter()
                    .map(|&d| if d < 0 { n / known } else { d as usize })
                    .collect(),
                _ => return Err(format!("cannot reshape {} to {shape:?}", s[0])),
            };
            let out_n = TensorSpec::new(out.clone(), s[0].dtype).checked_num_elements();
            if out_n != Some(n) {
                let count = out_n.map_or_else(|| "overflowing".to_string(), |c| c.to_string());
                return Err(format!(
                    "cannot reshape {} ({n} elements) to {out:?} ({count} elements)",
                    s[0]
                ));
            }
            Ok((Op::Reshape, vec![TensorSpec::new(out, s[0].dtype)]))
        })[0]
    }

    /// Permutes axes: result axis `i` is axis `perm[i]` of `self`.
    #[track_caller]
    pub fn transpose(self, perm: &[usize]) -> Tensor {
        let perm = perm.to_vec();
        build("transpose", &[self], Location::caller(), 1, move |s| {
            let r = s[0].rank();
            if perm.len() != r || !distinct_axes(&perm, r) {
                return Err(format!(
                    "{perm:?} is not a permutation of the {r} axes of {}",
                    s[0]
                ));
            }
            let shape = perm.iter().map(|&p| s[0].shape[p]).collect::<Vec<_>>();
            Ok((
                Op::Transpose { perm },
                vec![TensorSpec::new(shape, s[0].dtype)],
            ))
        })[0]
    }

    /// Swaps the last two axes (the matrix transpose of each batch element).
    #[track_caller]
    pub fn t(self) -> Tensor {
        let r = self.rank();
        let mut perm: Vec<usize> = (0..r).collect();
        if r >= 2 {
            perm.swap(r - 1, r - 2);
        }
        self.transpose(&perm)
    }

    /// Static strided slice `start..limit` step `strides` on every axis.
    #[track_caller]
    pub fn slice(self, start: &[usize], limit: &[usize], strides: &[usize]) -> Tensor {
        let (start, limit, strides) = (start.to_vec(), limit.to_vec(), strides.to_vec());
        build("slice", &[self], Location::caller(), 1, move |s| {
            let r = s[0].rank();
            if start.len() != r || limit.len() != r || strides.len() != r {
                return Err(format!(
                    "slice needs {r} starts, limits and strides for {}",
                    s[0]
                ));
            }
            let mut shape = Vec::with_capacity(r);
            for i in 0..r {
                if start[i] > limit[i] || limit[i] > s[0].shape[i] || strides[i] == 0 {
                    return Err(format!(
                        "axis {i}: {}..{} step {} is not inside 0..{}",
                        start[i], limit[i], strides[i], s[0].shape[i]
                    ));
                }
                shape.push((limit[i] - start[i]).div_ceil(strides[i]));
            }
            Ok((
                Op::Slice {
                    start,
                    limit,
                    strides,
                },
                vec![TensorSpec::new(shape, s[0].dtype)],
            ))
        })[0]
    }

    /// `start..end` along one axis (negative axis counts from the end).
    ///
    /// ```
    /// use tessel_dsl::config::KernelConfig;
    /// use tessel_dsl::{trace, Tensor, TensorSpec, F32};
    /// let x = ("x".to_string(), TensorSpec::new([4, 10], F32));
    /// let g = trace("cols", &[x], KernelConfig::default(), |a: &[Tensor]| a[0].slice_axis(1, 2, 7))?;
    /// assert_eq!(g.output_specs()[0].shape, vec![4, 5]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    #[track_caller]
    pub fn slice_axis(self, axis: isize, start: usize, end: usize) -> Tensor {
        self.axis_range("slice_axis", axis, start, Some(end), Location::caller())
    }

    /// `len` elements from `start` along one axis (negative axis counts from
    /// the end): candle's and PyTorch's `narrow`. Before tessel 0.2 the
    /// third argument was an end; [`slice_axis`](Tensor::slice_axis) takes
    /// one (see CHANGELOG.md).
    ///
    /// ```
    /// use tessel_dsl::config::KernelConfig;
    /// use tessel_dsl::{trace, Tensor, TensorSpec, F32};
    /// let x = ("x".to_string(), TensorSpec::new([4, 10], F32));
    /// let g = trace("cols", &[x], KernelConfig::default(), |a: &[Tensor]| a[0].narrow(1, 2, 7))?;
    /// assert_eq!(g.output_specs()[0].shape, vec![4, 7]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    #[track_caller]
    pub fn narrow(self, axis: isize, start: usize, len: usize) -> Tensor {
        self.axis_range(
            "narrow",
            axis,
            start,
            start.checked_add(len),
            Location::caller(),
        )
    }

    /// `start..end` along `axis` (`end` `None`: past `usize::MAX`), as op `op`.
    fn axis_range(
        self,
        op: &'static str,
        axis: isize,
        start: usize,
        end: Option<usize>,
        loc: Location,
    ) -> Tensor {
        let spec = self.spec();
        let a = match axis_of(axis, &spec) {
            Ok(a) => a,
            Err(m) => return build(op, &[self], loc, 1, move |_| Err(m))[0],
        };
        let Some(end) = end.filter(|&e| start <= e && e <= spec.shape[a]) else {
            let m = format!(
                "{start}..{} is not inside axis {a} of {spec}",
                end.map_or_else(|| "(past usize::MAX)".to_string(), |e| e.to_string())
            );
            return build(op, &[self], loc, 1, move |_| Err(m))[0];
        };
        let mut lo = vec![0; spec.rank()];
        let mut hi = spec.shape.clone();
        lo[a] = start;
        hi[a] = end;
        let ones = vec![1; spec.rank()];
        build("slice", &[self], loc, 1, move |s| {
            let mut shape = s[0].shape.clone();
            shape[a] = end - start;
            Ok((
                Op::Slice {
                    start: lo,
                    limit: hi,
                    strides: ones,
                },
                vec![TensorSpec::new(shape, s[0].dtype)],
            ))
        })[0]
    }

    /// A window of `sizes` starting at traced scalar integer indices (clamped
    /// into range, as XLA does).
    #[track_caller]
    pub fn dynamic_slice(self, starts: &[Tensor], sizes: &[usize]) -> Tensor {
        let loc = Location::caller();
        let bounds = window_bounds(&self.shape(), sizes);
        crate::ops::check::starts_auto("dynamic_slice", starts, &bounds, &loc);
        let sizes = sizes.to_vec();
        let mut operands = vec![self];
        operands.extend_from_slice(starts);
        build("dynamic_slice", &operands, loc, 1, move |s| {
            let x = &s[0];
            check_starts(x, &s[1..])?;
            if sizes.len() != x.rank() || sizes.iter().zip(&x.shape).any(|(a, b)| a > b) {
                return Err(format!("slice sizes {sizes:?} do not fit {x}"));
            }
            Ok((
                Op::DynamicSlice {
                    sizes: sizes.clone(),
                },
                vec![TensorSpec::new(sizes, x.dtype)],
            ))
        })[0]
    }

    /// `self` with the window at traced `starts` replaced by `update` (clamped into range).
    #[track_caller]
    pub fn dynamic_update_slice(self, update: Tensor, starts: &[Tensor]) -> Tensor {
        let loc = Location::caller();
        let bounds = window_bounds(&self.shape(), &update.shape());
        crate::ops::check::starts_auto("dynamic_update_slice", starts, &bounds, &loc);
        let mut operands = vec![self, update];
        operands.extend_from_slice(starts);
        build("dynamic_update_slice", &operands, loc, 1, |s| {
            let (x, u) = (&s[0], &s[1]);
            check_starts(x, &s[2..])?;
            if u.dtype != x.dtype
                || u.rank() != x.rank()
                || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b)
            {
                return Err(format!("update {u} does not fit into {x}"));
            }
            Ok((Op::DynamicUpdateSlice, vec![x.clone()]))
        })[0]
    }

    /// Inserts an axis of extent 1 at `axis` (negative counts from the end of the result).
    #[track_caller]
    pub fn expand_dims(self, axis: isize) -> Tensor {
        let mut shape: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        let a = normalize_axis(axis, shape.len() + 1).unwrap_or(shape.len() + 1);
        if a > shape.len() {
            let m = format!(
                "axis {axis} is out of range for expand_dims of rank {}",
                shape.len()
            );
            return build("expand_dims", &[self], Location::caller(), 1, move |_| {
                Err(m)
            })[0];
        }
        shape.insert(a, 1);
        self.reshape(&shape)
    }

    /// Removes axis `axis`, which must have extent 1.
    #[track_caller]
    pub fn squeeze(self, axis: isize) -> Tensor {
        let spec = self.spec();
        match axis_of(axis, &spec) {
            Ok(a) if spec.shape[a] == 1 => {
                let shape: Vec<isize> = spec
                    .shape
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != a)
                    .map(|(_, &d)| d as isize)
                    .collect();
                self.reshape(&shape)
            }
            Ok(a) => {
                let m = format!("axis {a} of {spec} has extent {}, not 1", spec.shape[a]);
                build("squeeze", &[self], Location::caller(), 1, move |_| Err(m))[0]
            }
            Err(m) => build("squeeze", &[self], Location::caller(), 1, move |_| Err(m))[0],
        }
    }

    /// Splits axis `axis` (negative counts from the end) into axes of extents
    /// `sizes`, whose product must be its extent — PyTorch's `unflatten`,
    /// and what `x.reshape(*x.shape[:-1], H, D)` does in JAX: `[B, S, 64]`
    /// with `unflatten(-1, &[4, 16])` is `[B, S, 4, 16]`, for any leading axes.
    ///
    /// ```
    /// use tessel_dsl::{kernel::Kernel, runtime::Device, HostTensor, Tensor};
    /// let k = Kernel::new("heads", |a: &[Tensor]| a[0].unflatten(-1, &[2, 3]).flatten(0, 1));
    /// let x = HostTensor::from_vec((0..12).map(|i| i as f32).collect(), [2, 6])?;
    /// let y = k.run(&Device::cpu()?, &[&x])?;
    /// assert_eq!(y[0].shape(), &[4, 3]);
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    #[track_caller]
    pub fn unflatten(self, axis: isize, sizes: &[usize]) -> Tensor {
        let spec = self.spec();
        let fits = |a: usize| {
            sizes.iter().try_fold(1usize, |p, &d| p.checked_mul(d)) == Some(spec.shape[a])
        };
        match axis_of(axis, &spec) {
            Ok(a) if fits(a) => {
                let mut shape: Vec<isize> = spec.shape.iter().map(|&d| d as isize).collect();
                shape.splice(a..=a, sizes.iter().map(|&d| d as isize));
                self.reshape(&shape)
            }
            found => {
                let m = match found {
                    Ok(a) => format!(
                        "axis {a} of {spec} has extent {}, not the product of {sizes:?}",
                        spec.shape[a]
                    ),
                    Err(m) => m,
                };
                build("unflatten", &[self], Location::caller(), 1, move |_| Err(m))[0]
            }
        }
    }

    /// Merges axes `start..=end` (negative count from the end) into one
    /// axis — PyTorch's `flatten`: `[B, S, 4, 16]` with `flatten(-2, -1)` is
    /// `[B, S, 64]`.
    #[track_caller]
    pub fn flatten(self, start: isize, end: isize) -> Tensor {
        let spec = self.spec();
        match (axis_of(start, &spec), axis_of(end, &spec)) {
            (Ok(a), Ok(b)) if a <= b => {
                let mut shape: Vec<isize> = spec.shape.iter().map(|&d| d as isize).collect();
                let merged = spec.shape[a..=b].iter().product::<usize>() as isize;
                shape.splice(a..=b, [merged]);
                self.reshape(&shape)
            }
            (a, b) => {
                let m = match (a, b) {
                    (Err(m), _) | (_, Err(m)) => m,
                    (Ok(a), Ok(b)) => format!("axes {a}..={b} of {spec} are in the wrong order"),
                };
                build("flatten", &[self], Location::caller(), 1, move |_| Err(m))[0]
            }
        }
    }

    /// Pads with `value`: `low[i]`/`high[i]` elements before/after axis `i`
    /// (negative values crop) and `interior[i]` between elements.
    #[track_caller]
    pub fn pad(self, value: impl Operand, low: &[i64], high: &[i64], interior: &[i64]) -> Tensor {
        let loc = Location::caller();
        let v = value.to_tensor(self, &loc);
        let (low, high, interior) = (low.to_vec(), high.to_vec(), interior.to_vec());
        build("pad", &[self, v], loc, 1, move |s| {
            let (x, p) = (&s[0], &s[1]);
            let r = x.rank();
            if p.rank() != 0 || p.dtype != x.dtype {
                return Err(format!(
                    "the padding value must be a scalar {}, got {p}",
                    x.dtype
                ));
            }
            if low.len() != r || high.len() != r || interior.len() != r {
                return Err(format!("pad needs {r} low, high and interior amounts"));
            }
            let mut shape = Vec::with_capacity(r);
            for i in 0..r {
                let d = x.shape[i] as i64;
                let n = low[i] + high[i] + d + (d - 1).max(0) * interior[i];
                if interior[i] < 0 || n < 0 {
                    return Err(format!("axis {i}: padding gives a negative extent"));
                }
                shape.push(n as usize);
            }
            Ok((
                Op::Pad {
                    low,
                    high,
                    interior,
                },
                vec![TensorSpec::new(shape, x.dtype)],
            ))
        })[0]
    }

    /// Pads axis `axis` at the end up to a multiple of `multiple`, with `value`.
    #[track_caller]
    pub fn pad_to_multiple(self, axis: isize, multiple: usize, value: impl Operand) -> Tensor {
        let spec = self.spec();
        let Some(a) = normalize_axis(axis, spec.rank()) else {
            let m = format!("axis {axis} is out of range for {spec}");
            return build(
                "pad_to_multiple",
                &[self],
                Location::caller(),
                1,
                move |_| Err(m),
            )[0];
        };
        let m = multiple.max(1);
        let extra = (m - spec.shape[a] % m) % m;
        if extra == 0 {
            return self;
        }
        let mut high = vec![0; spec.rank()];
        high[a] = extra as i64;
        self.pad(value, &vec![0; spec.rank()], &high, &vec![0; spec.rank()])
    }
}

/// Joins tensors along `axis`; all other extents and the dtype must agree.
#[track_caller]
pub fn concat(tensors: &[Tensor], axis: isize) -> Tensor {
    build("concat", tensors, Location::caller(), 1, move |s| {
        let Some(first) = s.first() else {
            return Err("concat needs at least one tensor".into());
        };
        let a = axis_of(axis, first)?;
        let mut shape = first.shape.clone();
        shape[a] = 0;
        for t in s {
            let same = t.rank() == first.rank()
                && t.dtype == first.dtype
                && (0..t.rank()).all(|i| i == a || t.shape[i] == first.shape[i]);
            if !same {
                return Err(format!("{t} does not match {first} outside axis {a}"));
            }
            shape[a] += t.shape[a];
        }
        Ok((
            Op::Concatenate { dim: a },
            vec![TensorSpec::new(shape, first.dtype)],
        ))
    })[0]
}

fn check_starts(x: &TensorSpec, starts: &[TensorSpec]) -> Result<(), String> {
    if starts.len() != x.rank() {
        return Err(format!(
            "{} start indices given for {x}, which has rank {}",
            starts.len(),
            x.rank()
        ));
    }
    let d0 = starts.first().map(|s| s.dtype).unwrap_or(DType::S32);
    for s in starts {
        if s.rank() != 0 || !s.dtype.is_integer() || s.dtype != d0 {
            return Err(format!(
                "start indices must be integer scalars of one dtype, got {s}"
            ));
        }
    }
    Ok(())
}

/// The largest start of a window of `sizes` in `shape`, per axis
/// (negative where it does not fit; empty on a rank mismatch).
fn window_bounds(shape: &[usize], sizes: &[usize]) -> Vec<i64> {
    if shape.len() != sizes.len() {
        return Vec::new();
    }
    shape
        .iter()
        .zip(sizes)
        .map(|(&d, &w)| d as i64 - w as i64)
        .collect()
}
