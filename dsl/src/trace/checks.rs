//! The checks a trace has recorded, per region, until they leave the
//! program as results (see [`CheckSite`]).
//!
//! A `check` in a region sets that region's *code*, an `s32[]` tensor: 0
//! while every check so far held, `k + 1` once check `k` failed first.
//! The values check `k` reports are kept beside it. A loop or branch that
//! closes carries its body's code and values out as extra results and
//! merges them into the enclosing region's (`ops::check` does that: it
//! builds ops); the function body's code and values become the program's
//! last results when the trace ends.

use crate::ir::{CheckSite, RegionId};
use crate::trace::tensor::Tensor;

/// The checks recorded in one region.
#[derive(Clone, Debug)]
pub(crate) struct RegionChecks {
    /// `s32[]`: 0, or `k + 1` for the first failed check `k`.
    pub(crate) code: Tensor,
    /// The reported values of each check whose code this region carries
    /// (check index, values), in check order.
    pub(crate) values: Vec<(usize, Vec<Tensor>)>,
}

/// Every check of one trace.
#[derive(Clone, Debug, Default)]
pub(crate) struct CheckState {
    /// The checks, in the order they were traced.
    pub(crate) sites: Vec<CheckSite>,
    /// The checks of the regions still open (or not yet merged).
    pub(crate) regions: Vec<(RegionId, RegionChecks)>,
    /// A check is being built: the ops it appends get no automatic
    /// checks of their own.
    pub(crate) busy: bool,
    /// The checks asked for with [`first_check`](crate::ops::check::first_check):
    /// (region, the key's hash, the values checked).
    pub(crate) seen: std::collections::HashSet<(RegionId, u64, Vec<usize>)>,
}

impl CheckState {
    /// Removes and returns the checks recorded in `region`.
    pub(crate) fn take(&mut self, region: RegionId) -> Option<RegionChecks> {
        let at = self.regions.iter().position(|(r, _)| *r == region)?;
        Some(self.regions.remove(at).1)
    }

    /// Sets the checks of `region`.
    pub(crate) fn put(&mut self, region: RegionId, checks: RegionChecks) {
        self.take(region);
        self.regions.push((region, checks));
    }
}
