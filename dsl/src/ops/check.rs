//! `check`: a traced assertion whose failure leaves the program as a
//! result and is raised on the host after the call, as JAX's `checkify`
//! does.
//!
//! A check costs a reduction and a select where it is written; a program
//! with checks has one `s32` vector result more (the code and the reported
//! `s32` scalars, one fused kernel) and a result per other reported value,
//! and one small read after each run ([`CheckSite`] says the layout). A
//! program without checks is unchanged.

use crate::config::CheckFamilies;
use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{CheckSite, RegionId};
pub(crate) use crate::trace::checks::RegionChecks;
use crate::trace::tensor::{fail, Tensor};
use crate::trace::with_state;

/// Asserts that every element of `ok` (a `pred` tensor of any shape) is
/// true. Where it is not, the call that runs the program returns
/// [`Error::Check`](crate::Error::Check) naming the kernel, this line and
/// `message` with each `{}` replaced by one of `values` (read back from the
/// device; they may be any tensors, best small: the index or the value that
/// was wrong). The program itself runs to its end: the error is raised
/// after it, with no host sync inside it.
///
/// When several checks fail, the first in program order is reported (in a
/// loop: the first iteration that failed). Checks work at any depth of
/// loops and branches (a failure in a branch that did not run is not one),
/// inside `scan`, `vjp` and `checkpoint`; not in a loop's condition.
/// [`check!`](crate::check!) is the same with the values written after
/// the message.
///
/// ```
/// use tessel_dsl::prelude::*;
/// use tessel_dsl::{check, kernel::Kernel, Error};
/// let k = Kernel::new("gather_rows", |a: &[Tensor]| {
///     let (x, ids) = (a[0], a[1]);
///     let n = x.dim(0) as f64;
///     let bad = ids.lt(0).or(ids.ge(n));
///     check(!bad, "row id {} out of range", &[ids]);
///     x.take(ids, 0)
/// });
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
/// let ids = HostTensor::from_vec(vec![0i32, 5], [2])?;
/// let err = k.run(&dev, &[&x, &ids]).unwrap_err();
/// let Error::Check(c) = &err else { panic!("{err}") };
/// assert_eq!(c.message, "row id [0, 5] out of range");
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn check(ok: Tensor, message: impl Into<String>, values: &[Tensor]) {
    check_at(ok, message.into(), values, Location::caller());
}

/// [`check`] at `loc` (its ops at the caller's line).
#[track_caller]
pub(crate) fn check_at(ok: Tensor, message: String, values: &[Tensor], loc: Location) {
    let spec = ok.spec();
    if spec.dtype != DType::Pred {
        let m = format!(
            "the condition must be a pred tensor (a comparison), got {spec}; compare first \
             (x.ge(0.0))"
        );
        return fail("check", &[ok], m, &loc);
    }
    let holes = message.matches("{}").count();
    if holes != values.len() {
        let m = format!(
            "the message has {holes} `{{}}` but {} value{} reported: {message:?}",
            values.len(),
            if values.len() == 1 { " is" } else { "s are" }
        );
        return fail("check", values, m, &loc);
    }
    let was_busy = with_state(|s| std::mem::replace(&mut s.checks.busy, true)).unwrap_or(false);
    record(ok, message, values, loc);
    with_state(|s| s.checks.busy = was_busy);
}

/// Whether the check that `key` names, over `values`, is new in the region
/// being traced: `true` the first time (and outside a trace), `false` when
/// it was asked before in the same region of the same trace, over the very
/// same traced values, so that the check recorded then already covers
/// them. A library whose ops each check the metadata they read (a cache
/// update and the attention that reads the cache, called with one block
/// table) checks it once per program this way: each check is a reduction,
/// and costs the program a kernel. `key` holds what else decides the
/// check's outcome (its bounds); its type is part of it.
///
/// ```
/// use tessel_dsl::ops::check::first_check;
/// use tessel_dsl::{kernel::KernelConfig, trace, TensorSpec, S32};
/// let x = [("lens".into(), TensorSpec::new([4], S32))];
/// trace("once", &x, KernelConfig::default(), |a| {
///     assert!(first_check(&("in range", 0, 64), &[a[0]]));
///     assert!(!first_check(&("in range", 0, 64), &[a[0]]));
///     assert!(first_check(&("in range", 0, 32), &[a[0]]));
///     a[0]
/// })?;
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn first_check<K: std::hash::Hash + 'static>(key: &K, values: &[Tensor]) -> bool {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::any::TypeId::of::<K>().hash(&mut h);
    key.hash(&mut h);
    let ids: Vec<usize> = values.iter().map(|t| t.value).collect();
    with_state(|s| {
        if values.iter().any(|t| t.trace != s.id) {
            return true;
        }
        s.checks.seen.insert((s.region, h.finish(), ids))
    })
    .unwrap_or(true)
}

/// Records the check of [`check_at`] once its arguments are valid.
#[track_caller]
fn record(ok: Tensor, message: String, values: &[Tensor], loc: Location) {
    let spec = ok.spec();
    let all = if spec.rank() == 0 {
        ok
    } else {
        let axes: Vec<isize> = (0..spec.rank() as isize).collect();
        crate::ops::reduce::reduce_at(ok, crate::ir::ReduceKind::And, &axes, loc.clone())
    };
    let site = CheckSite {
        message,
        location: loc.clone(),
        values: values.iter().map(|v| v.spec()).collect(),
    };
    let Some((k, region, prev)) = with_state(|s| {
        s.checks.sites.push(site);
        let region = s.region;
        (s.checks.sites.len() - 1, region, s.checks.take(region))
    }) else {
        return;
    };
    let failed = crate::ops::constant::full_at(Vec::new(), (k + 1) as f64, DType::S32, loc.clone());
    let here = all.select(0, failed);
    let code = match &prev {
        Some(p) => p.code.ne(0).select(p.code, here),
        None => here,
    };
    let mut kept = prev.map(|p| p.values).unwrap_or_default();
    kept.push((k, values.to_vec()));
    put(region, RegionChecks { code, values: kept });
}

/// `check(ok, "message {}", value, ..)`: [`check`] with the reported values
/// written after the message, one per `{}`.
///
/// ```
/// use tessel_dsl::prelude::*;
/// use tessel_dsl::{check, kernel::Kernel};
/// let k = Kernel::new("positive", |a: &[Tensor]| {
///     let x = a[0];
///     check!(x.gt(0.0), "x has a value {} <= 0", x.min(&[0]));
///     x.log()
/// });
/// # let _ = k;
/// ```
#[macro_export]
macro_rules! check {
    ($ok:expr, $message:expr $(, $value:expr)* $(,)?) => {
        $crate::ops::check::check($ok, $message, &[$($value),*])
    };
}

/// Adds the automatic check `make` builds (the condition, the message and
/// its values) when the trace's [`CheckFamilies`] turn on the family
/// `pick` selects, and no check is being built (so a check's own ops are
/// not checked). The check is located at `loc`, the op's line.
pub(crate) fn auto(
    pick: fn(&CheckFamilies) -> bool,
    loc: &Location,
    make: impl FnOnce() -> (Tensor, String, Vec<Tensor>),
) {
    let on = with_state(|s| pick(&s.options.checks) && !s.checks.busy && s.error.is_none());
    if on != Some(true) {
        return;
    }
    with_state(|s| s.checks.busy = true);
    let (ok, message, values) = make();
    with_state(|s| s.checks.busy = false);
    check_at(ok, message, &values, loc.clone());
}

/// Removes and returns the checks recorded in `region`.
pub(crate) fn take(region: RegionId) -> Option<RegionChecks> {
    with_state(|s| s.checks.take(region)).flatten()
}

fn put(region: RegionId, checks: RegionChecks) {
    with_state(|s| s.checks.put(region, checks));
}

/// The types of the values check `k` reports.
pub(crate) fn site_values(k: usize) -> Vec<crate::shape::TensorSpec> {
    with_state(|s| s.checks.sites.get(k).map(|c| c.values.clone()))
        .flatten()
        .unwrap_or_default()
}

/// The layout of checks carried out of a region as results: each check's
/// index and how many values it reports, in order.
pub(crate) type Layout = Vec<(usize, usize)>;

/// The code and values of `checks` as a flat list, and their layout.
pub(crate) fn flatten(checks: &RegionChecks) -> (Vec<Tensor>, Layout) {
    let mut flat = vec![checks.code];
    let mut layout = Vec::new();
    for (k, v) in &checks.values {
        flat.extend(v);
        layout.push((*k, v.len()));
    }
    (flat, layout)
}

/// The flat list of `checks` (or of none: code 0) over the sites of
/// `layout`, with zeros for the values of sites `checks` does not hold;
/// built in the current region.
#[track_caller]
pub(crate) fn flatten_as(checks: Option<&RegionChecks>, layout: &Layout) -> Vec<Tensor> {
    let loc = Location::caller();
    let zero = || crate::ops::constant::full_at(Vec::new(), 0.0, DType::S32, loc.clone());
    let mut flat = vec![checks.map_or_else(zero, |c| c.code)];
    for &(k, _) in layout {
        match checks.and_then(|c| c.values.iter().find(|(j, _)| *j == k)) {
            Some((_, v)) => flat.extend(v),
            None => flat.extend(site_values(k).into_iter().map(|spec| {
                crate::ops::constant::full_at(spec.shape, 0.0, spec.dtype, loc.clone())
            })),
        }
    }
    flat
}

/// The union of two layouts, in check order.
pub(crate) fn union(a: &Layout, b: &Layout) -> Layout {
    let mut u: Layout = a.iter().chain(b).copied().collect();
    u.sort_unstable();
    u.dedup();
    u
}

/// Merges checks carried out of a closed region (`flat`: code then values,
/// laid out as `layout`) into the current region's: a check recorded here
/// before them keeps its precedence.
#[track_caller]
pub(crate) fn merge(flat: &[Tensor], layout: &Layout) {
    let Some(&code) = flat.first() else {
        return;
    };
    let Some(region) = with_state(|s| s.region) else {
        return;
    };
    let prev = take(region);
    let mut rest = flat[1..].iter().copied();
    let mut values: Vec<(usize, Vec<Tensor>)> = layout
        .iter()
        .map(|&(k, n)| (k, rest.by_ref().take(n).collect()))
        .collect();
    let checks = match prev {
        Some(mut p) => {
            p.values.append(&mut values);
            RegionChecks {
                code: p.code.ne(0).select(p.code, code),
                values: p.values,
            }
        }
        None => RegionChecks { code, values },
    };
    put(region, checks);
}

/// The NaN family's check of an op's result `r` (float results only).
pub(crate) fn nan_auto(r: Tensor, op: &str, loc: &Location) {
    if !r.dtype().is_float() {
        return;
    }
    auto(
        |f| f.nan,
        loc,
        || (r.eq(r), format!("{op} produced a NaN"), Vec::new()),
    );
}

/// The division family's check of an integer division or remainder by
/// `divisor`.
pub(crate) fn div_auto(divisor: Tensor, op: &str, loc: &Location) {
    if !divisor.dtype().is_integer() {
        return;
    }
    auto(
        |f| f.div,
        loc,
        || (divisor.ne(0), format!("integer {op} by zero"), Vec::new()),
    );
}

/// `t` (an integer tensor) within `0 ..= bound`, elementwise; `None` when
/// every value of its type is.
fn within(t: Tensor, bound: i64) -> Option<Tensor> {
    let d = t.dtype();
    let bits = 8 * d.size_in_bytes() as u32;
    let max = if d.is_unsigned() {
        u64::MAX >> (64 - bits)
    } else {
        (i64::MAX as u64) >> (64 - bits)
    };
    let low = (!d.is_unsigned()).then(|| t.ge(0));
    let high = ((bound as u64) < max).then(|| t.le(bound as f64));
    match (low, high) {
        (Some(l), Some(h)) => Some(l & h),
        (l, h) => l.or(h),
    }
}

/// The conjunction of `oks` (true when there is none).
fn all_of(oks: impl Iterator<Item = Tensor>) -> Tensor {
    oks.reduce(|a, b| a & b).unwrap_or_else(|| {
        crate::ops::constant::full_at(Vec::new(), 1.0, DType::Pred, Location::caller())
    })
}

/// The index family's check of an op's scalar `starts`, each in `0 ..=
/// bounds[i]` (an extent less a window's): XLA would clamp it silently.
pub(crate) fn starts_auto(op: &str, starts: &[Tensor], bounds: &[i64], loc: &Location) {
    if bounds.iter().any(|&b| b < 0) || starts.len() != bounds.len() {
        return;
    }
    auto(
        |f| f.index,
        loc,
        || {
            let ok = all_of(
                starts
                    .iter()
                    .zip(bounds)
                    .filter_map(|(&s, &b)| within(s, b)),
            );
            let holes = vec!["{}"; starts.len()].join(", ");
            let message = format!("{op} start ({holes}) out of range: at most {bounds:?}");
            (ok, message, starts.to_vec())
        },
    );
}

/// The index family's check of a gather's or scatter's index vectors:
/// component `k` (along `vector_dim`, or the whole tensor when
/// `vector_dim` is its rank) in `0 ..= bounds[k]`.
pub(crate) fn indices_auto(
    op: &str,
    indices: Tensor,
    vector_dim: usize,
    bounds: &[i64],
    loc: &Location,
) {
    if bounds.iter().any(|&b| b < 0) || !indices.dtype().is_integer() {
        return;
    }
    auto(
        |f| f.index,
        loc,
        || {
            let rank = indices.spec().rank();
            let ok = all_of(bounds.iter().enumerate().filter_map(|(k, &b)| {
                let c = if vector_dim >= rank {
                    indices
                } else {
                    indices.slice_axis(vector_dim as isize, k, k + 1)
                };
                within(c, b)
            }));
            let message =
                format!("{op} indices {{}} out of range: at most {bounds:?} per index vector");
            (ok, message, vec![indices])
        },
    );
}
