//! `check`: a traced assertion whose failure leaves the program as a
//! result and is raised on the host after the call, as JAX's `checkify`
//! does.
//!
//! A check costs a reduction and a select where it is written, one `s32[]`
//! result (and its reported values) per program, and one 4-byte read after
//! each run. A program without checks is unchanged.

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
