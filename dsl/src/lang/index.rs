//! Indexing syntax on tensors: `x[i]`, `x[(.., 2..5)]`, `x[(t, ..)]` with a
//! traced index `t`, `x[(.., ds(t, 128))]` for a traced window, and the
//! assignment `x[idx] = v` (which the kernel macros rewrite to
//! [`Target::assign`]).
//!
//! Static indices (integers and ranges, negative counting from the end)
//! become a `slice`; traced ones a `dynamic_slice` (XLA clamps the start into
//! range). Single indices drop their axis, ranges keep it. Missing trailing
//! axes are taken whole.

use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::constant::full_at;
use crate::ops::elementwise::{broadcast_to_at, Operand};
use crate::trace::build;
use crate::trace::tensor::Tensor;

/// One axis of an index.
#[derive(Clone, Copy, Debug)]
pub enum AxisIndex {
    /// A static position (negative from the end); drops the axis.
    At(i64),
    /// A static range with a step; keeps the axis.
    Range {
        /// First index (negative from the end), `None` for 0.
        start: Option<i64>,
        /// End (exclusive, negative from the end), `None` for the extent.
        end: Option<i64>,
        /// Step, at least 1.
        step: usize,
    },
    /// A traced scalar position; drops the axis.
    Dyn(Tensor),
    /// A traced window start with a static length; keeps the axis.
    DynWindow(Tensor, usize),
}

/// A traced window `start .. start + len` (Pallas' `pl.ds`): the start is a
/// traced integer scalar, the length static.
#[derive(Clone, Copy, Debug)]
pub struct DynSlice {
    start: Tensor,
    len: usize,
}

/// The window of `len` elements starting at the traced `start`.
pub fn ds(start: Tensor, len: usize) -> DynSlice {
    DynSlice { start, len }
}

/// One component of an index.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot index a tensor axis",
    label = "not a tensor index",
    note = "index with integers, ranges (`a..b`, `..`, `a..`), a traced integer `Tensor`, or `ds(start, len)`; \
            combine axes in a tuple: `x[(.., 1..3)]`"
)]
pub trait IndexItem {
    /// The axis index.
    fn axis_index(self) -> AxisIndex;
}

macro_rules! int_items {
    ($($t:ty),*) => {$(
        impl IndexItem for $t {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::At(self as i64)
            }
        }
        impl IndexItem for Range<$t> {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::Range { start: Some(self.start as i64), end: Some(self.end as i64), step: 1 }
            }
        }
        impl IndexItem for RangeInclusive<$t> {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::Range { start: Some(*self.start() as i64), end: Some(*self.end() as i64 + 1), step: 1 }
            }
        }
        impl IndexItem for RangeFrom<$t> {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::Range { start: Some(self.start as i64), end: None, step: 1 }
            }
        }
        impl IndexItem for RangeTo<$t> {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::Range { start: None, end: Some(self.end as i64), step: 1 }
            }
        }
        impl IndexItem for RangeToInclusive<$t> {
            fn axis_index(self) -> AxisIndex {
                AxisIndex::Range { start: None, end: Some(self.end as i64 + 1), step: 1 }
            }
        }
    )*};
}
int_items!(usize, isize, i32, i64, u32);

impl IndexItem for RangeFull {
    fn axis_index(self) -> AxisIndex {
        AxisIndex::Range {
            start: None,
            end: None,
            step: 1,
        }
    }
}

impl IndexItem for Tensor {
    fn axis_index(self) -> AxisIndex {
        AxisIndex::Dyn(self)
    }
}

impl IndexItem for DynSlice {
    fn axis_index(self) -> AxisIndex {
        AxisIndex::DynWindow(self.start, self.len)
    }
}

/// A whole index: one [`IndexItem`] or a tuple of them (one per leading axis).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot index a tensor",
    label = "not a tensor index",
    note = "index with integers, ranges, a traced integer `Tensor` or `ds(start, len)`, or a tuple of these"
)]
pub trait TensorIndex {
    /// The per-axis indices.
    fn axis_indices(self) -> Vec<AxisIndex>;
}

macro_rules! single_index {
    ($($t:ty),*) => {$(
        impl TensorIndex for $t {
            fn axis_indices(self) -> Vec<AxisIndex> {
                vec![self.axis_index()]
            }
        }
    )*};
}
single_index!(usize, isize, i32, i64, u32, RangeFull, Tensor, DynSlice);
single_index!(
    Range<usize>,
    Range<isize>,
    Range<i32>,
    Range<i64>,
    Range<u32>
);
single_index!(
    RangeFrom<usize>,
    RangeFrom<isize>,
    RangeFrom<i32>,
    RangeFrom<i64>,
    RangeFrom<u32>
);
single_index!(
    RangeTo<usize>,
    RangeTo<isize>,
    RangeTo<i32>,
    RangeTo<i64>,
    RangeTo<u32>
);
single_index!(
    RangeInclusive<usize>,
    RangeInclusive<i32>,
    RangeToInclusive<usize>,
    RangeToInclusive<i32>
);

macro_rules! tuple_index {
    ($($t:ident $i:tt),+) => {
        impl<$($t: IndexItem),+> TensorIndex for ($($t,)+) {
            fn axis_indices(self) -> Vec<AxisIndex> {
                vec![$(self.$i.axis_index()),+]
            }
        }
    };
}
tuple_index!(A 0);
tuple_index!(A 0, B 1);
tuple_index!(A 0, B 1, C 2);
tuple_index!(A 0, B 1, C 2, D 3);
tuple_index!(A 0, B 1, C 2, D 3, E 4);
tuple_index!(A 0, B 1, C 2, D 3, E 4, F 5);

/// The resolved window of an index: per axis a start (static or traced), a
/// size, a step, and whether the axis is dropped.
struct Window {
    static_start: Vec<usize>,
    dyn_start: Vec<Option<Tensor>>,
    size: Vec<usize>,
    step: Vec<usize>,
    drop: Vec<bool>,
}

fn resolve(shape: &[usize], items: &[AxisIndex]) -> Result<Window, String> {
    if items.len() > shape.len() {
        return Err(format!(
            "{} indices given for a tensor of rank {}",
            items.len(),
            shape.len()
        ));
    }
    let mut w = Window {
        static_start: vec![0; shape.len()],
        dyn_start: vec![None; shape.len()],
        size: shape.to_vec(),
        step: vec![1; shape.len()],
        drop: vec![false; shape.len()],
    };
    for (a, item) in items.iter().enumerate() {
        let n = shape[a] as i64;
        let norm = |i: i64| if i < 0 { i + n } else { i };
        match *item {
            AxisIndex::At(i) => {
                let p = norm(i);
                if !(0..n).contains(&p) {
                    return Err(format!(
                        "index {i} is out of range for axis {a} of extent {n}"
                    ));
                }
                w.static_start[a] = p as usize;
                w.size[a] = 1;
                w.drop[a] = true;
            }
            AxisIndex::Range { start, end, step } => {
                let s = start.map(norm).unwrap_or(0);
                let e = end.map(norm).unwrap_or(n);
                if step == 0 || s < 0 || e > n || s > e {
                    return Err(format!(
                        "range {s}..{e} (step {step}) is not inside axis {a} of extent {n}"
                    ));
                }
                w.static_start[a] = s as usize;
                w.size[a] = ((e - s) as usize).div_ceil(step);
                w.step[a] = step;
            }
            AxisIndex::Dyn(t) => {
                w.dyn_start[a] = Some(t);
                w.size[a] = 1;
                w.drop[a] = true;
            }
            AxisIndex::DynWindow(t, len) => {
                if len as i64 > n {
                    return Err(format!(
                        "a window of {len} does not fit axis {a} of extent {n}"
                    ));
                }
                w.dyn_start[a] = Some(t);
                w.size[a] = len;
            }
        }
    }
    Ok(w)
}

fn fail(op: &str, x: Tensor, message: String, loc: Location) -> Tensor {
    build(op, &[x], loc, 1, move |_| Err(message))[0]
}

/// The traced start indices (s32 scalars) of a window whose static part is
/// already applied.
fn starts(w: &Window, loc: &Location) -> Vec<Tensor> {
    w.dyn_start
        .iter()
        .map(|d| match d {
            Some(t) => t.cast(DType::S32),
            None => full_at(Vec::new(), 0.0, DType::S32, loc.clone()),
        })
        .collect()
}

pub(crate) fn index_at(x: Tensor, items: &[AxisIndex], loc: Location) -> Tensor {
    let shape = x.shape();
    let w = match resolve(&shape, items) {
        Ok(w) => w,
        Err(m) => return fail("index", x, m, loc),
    };
    // Static part: one strided slice (dynamic axes taken whole).
    let mut start = w.static_start.clone();
    let mut limit: Vec<usize> = (0..shape.len())
        .map(|a| w.static_start[a] + (w.size[a].max(1) - 1) * w.step[a] + 1)
        .collect();
    for a in 0..shape.len() {
        if w.dyn_start[a].is_some() {
            start[a] = 0;
            limit[a] = shape[a];
        }
        if w.size[a] == 0 {
            limit[a] = start[a];
        }
    }
    let mut y = x;
    if start.iter().any(|&s| s > 0) || limit != shape || w.step.iter().any(|&s| s > 1) {
        y = y.slice(&start, &limit, &w.step);
    }
    if w.dyn_start.iter().any(Option::is_some) {
        let st = starts(&w, &loc);
        let sizes: Vec<usize> = (0..shape.len())
            .map(|a| {
                if w.dyn_start[a].is_some() {
                    w.size[a]
                } else {
                    y.shape()[a]
                }
            })
            .collect();
        y = y.dynamic_slice(&st, &sizes);
    }
    if w.drop.iter().any(|&d| d) {
        let kept: Vec<isize> = (0..shape.len())
            .filter(|&a| !w.drop[a])
            .map(|a| y.shape()[a] as isize)
            .collect();
        y = y.reshape(&kept);
    }
    y
}

pub(crate) fn set_index_at(x: Tensor, items: &[AxisIndex], value: Tensor, loc: Location) -> Tensor {
    let shape = x.shape();
    let w = match resolve(&shape, items) {
        Ok(w) => w,
        Err(m) => return fail("index_assign", x, m, loc),
    };
    if w.step.iter().any(|&s| s > 1) {
        let m = "strided assignment is not supported; use scatter (index_update)".to_string();
        return fail("index_assign", x, m, loc);
    }
    let value = if value.dtype() != x.dtype() && value.rank() == 0 {
        value.cast(x.dtype())
    } else {
        value
    };
    let kept: Vec<usize> = (0..shape.len())
        .filter(|&a| !w.drop[a])
        .map(|a| w.size[a])
        .collect();
    let v = broadcast_to_at(value, &kept, &loc);
    let window: Vec<isize> = w.size.iter().map(|&s| s as isize).collect();
    let v = v.reshape(&window);
    let mut st = starts(&w, &loc);
    for (a, s) in st.iter_mut().enumerate() {
        if w.dyn_start[a].is_none() {
            *s = full_at(
                Vec::new(),
                w.static_start[a] as f64,
                DType::S32,
                loc.clone(),
            );
        }
    }
    x.dynamic_update_slice(v, &st)
}

impl<I: TensorIndex> std::ops::Index<I> for Tensor {
    type Output = Tensor;

    /// Indexes while tracing, outside a kernel body. The returned reference
    /// points to a new 16-byte handle that lives for the rest of the process
    /// (indexing syntax must return a reference). Inside a kernel body the
    /// macros rewrite `x[i]` to a read that allocates nothing; by hand,
    /// write [`Tensor::at`].
    #[track_caller]
    fn index(&self, index: I) -> &Tensor {
        let t = index_at(*self, &index.axis_indices(), Location::caller());
        Box::leak(Box::new(t))
    }
}

impl Tensor {
    /// `self[index]` as a value (what the indexing syntax computes).
    #[track_caller]
    pub fn at(self, index: impl TensorIndex) -> Tensor {
        index_at(self, &index.axis_indices(), Location::caller())
    }

    /// `self` with `self[index]` replaced by `value` (broadcast to the window).
    #[track_caller]
    pub fn with_index(self, index: impl TensorIndex, value: impl Operand) -> Tensor {
        let loc = Location::caller();
        let v = value.to_tensor(self, &loc);
        set_index_at(self, &index.axis_indices(), v, loc)
    }
}

/// A tensor read by indexing syntax in a kernel body; dereferences to the
/// window's [`Tensor`].
#[derive(Clone, Copy, Debug)]
pub struct Indexed(Tensor);

impl std::ops::Deref for Indexed {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.0
    }
}

impl Tensor {
    /// `self[index]` as the kernel macros rewrite an indexing read
    /// (`*base.__tessel_read(index)`): the window, by value, so nothing is
    /// allocated. Found before [`IndexPlain`] by method resolution, for a
    /// tensor and a reference to one.
    #[doc(hidden)]
    #[track_caller]
    pub fn __tessel_read(&self, index: impl TensorIndex) -> Indexed {
        Indexed(index_at(*self, &index.axis_indices(), Location::caller()))
    }
}

/// `base[index]` on Rust values, as the kernel macros rewrite an indexing
/// read: a reference through `Index`, so the read is the same place Rust's
/// `base[index]` is (method-call syntax auto-dereferences `base` as
/// indexing does).
pub trait IndexPlain<I> {
    /// What indexing yields.
    type Output: ?Sized;
    /// A reference to `self[index]`.
    fn __tessel_read(&self, index: I) -> &Self::Output;
}

impl<C: std::ops::Index<I> + ?Sized, I> IndexPlain<I> for C {
    type Output = C::Output;
    #[track_caller]
    fn __tessel_read(&self, index: I) -> &C::Output {
        &self[index]
    }
}

/// The target of `target[index] = value` in a kernel body, which the kernel
/// macros rewrite to `Target(&mut target).assign(index, value)`: on a tensor
/// the inherent [`Target::assign`] (a `dynamic_update_slice`), on any other
/// value [`AssignPlain::assign`] (`IndexMut`).
pub struct Target<'a, C: ?Sized>(pub &'a mut C);

impl Target<'_, Tensor> {
    /// `tensor[index] = value`: the tensor becomes a copy with that window replaced.
    #[track_caller]
    pub fn assign<I: TensorIndex, V: Operand>(self, index: I, value: V) {
        *self.0 = self.0.with_index(index, value);
    }
}

/// `target[index] = value` on Rust values (through `IndexMut`).
pub trait AssignPlain<I, V> {
    /// Performs the assignment.
    fn assign(self, index: I, value: V);
}

impl<C: std::ops::IndexMut<I, Output = V> + ?Sized, I, V> AssignPlain<I, V> for Target<'_, C> {
    fn assign(self, index: I, value: V) {
        self.0[index] = value;
    }
}
