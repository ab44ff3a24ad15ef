//! The checks a trace has recorded, per region, until they leave the
//! program as results (see [`CheckSite`]).
//!
//! A `check` in a region sets that region's *code*, an `s32[]` tensor: 0
//! while every check so far held, `k + 1` once check `k` failed first.
//! The values check `k` reports are kept beside it. A loop or branch that
//! closes carries its body's code and values out as extra results and
//! merges them into the enclosing region's (`ops::check` does that: it
//! builds ops); the function body's code and values become the program's
//! last results when the trace ends, laid out by [`pack_body`].

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{CheckSite, Comparison, Op, RegionId};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::{build, with_state};

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

/// Lays out the function body's checks (region 0, once the body returned)
/// as [`CheckSite`] says: the code and every reported `s32` scalar
/// ([`CheckSite::packs`]) become one `s32[1 + P]` vector, the code first;
/// the other values stay as they are. Element `i` is selected from an iota
/// rather than concatenated: XLA writes each operand of a concatenation
/// into its slice by a kernel of its own, but fuses a chain of selects (and
/// the scalars they read) into one.
pub(crate) fn pack_body(loc: &Location) {
    let Some(Some(mut body)) = with_state(|s| s.checks.take(0)) else {
        return;
    };
    body.values.sort_by_key(|(k, _)| *k);
    let sites = with_state(|s| {
        s.checks
            .sites
            .iter()
            .map(|c| c.values.clone())
            .collect::<Vec<_>>()
    })
    .unwrap_or_default();
    let mut packed = vec![body.code];
    for (k, values) in &mut body.values {
        let specs = sites.get(*k).cloned().unwrap_or_default();
        let mut rest = Vec::with_capacity(values.len());
        for (v, spec) in values.drain(..).zip(specs) {
            if CheckSite::packs(&spec) {
                packed.push(v);
            } else {
                rest.push(v);
            }
        }
        *values = rest;
    }
    let n = packed.len();
    let vector = TensorSpec::new([n], DType::S32);
    let op = |name: &str, operands: &[Tensor], op: Op, spec: &TensorSpec| {
        let spec = spec.clone();
        build(name, operands, loc.clone(), 1, move |_| {
            Ok((op, vec![spec]))
        })[0]
    };
    // A packed value must be an s32 scalar, as the runtime reads it.
    let broadcast = |v: Tensor| {
        let spec = vector.clone();
        build("broadcast", &[v], loc.clone(), 1, move |s| {
            match s.first() {
                Some(v) if !CheckSite::packs(v) => Err(format!(
                    "internal: a check's reported value {v} is packed as an s32 scalar"
                )),
                _ => Ok((Op::BroadcastInDim { dims: Vec::new() }, vec![spec])),
            }
        })[0]
    };
    let splat = |x: f64| {
        let data = DType::S32.encode_f64(x);
        op("constant", &[], Op::Constant { data }, &vector)
    };
    let at = op("iota", &[], Op::Iota { dim: 0 }, &vector);
    let mask = TensorSpec::new([n], DType::Pred);
    let mut code = splat(0.0);
    for (i, v) in packed.into_iter().enumerate() {
        let here = op(
            "compare",
            &[at, splat(i as f64)],
            Op::Compare(Comparison::Eq),
            &mask,
        );
        code = op("select", &[here, broadcast(v), code], Op::Select, &vector);
    }
    with_state(|s| s.checks.put(0, RegionChecks { code, ..body }));
}
