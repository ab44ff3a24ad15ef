//! The checks a traced program carries out of itself (`check`, the
//! serving kernels' metadata checks): what each one says and which of the
//! program's results report it.

use crate::dtype::DType;
use crate::error::Location;
use crate::shape::TensorSpec;

/// One `check` in a traced program: its message, where it was written, and
/// the types of the values it reports when it fails.
///
/// A graph with checks has [`check_outputs`] more results than its body
/// returned, after them. The first is an `s32[1 + P]` vector: the code (0:
/// every check held; `k + 1`: check `k` failed first), then each reported
/// value that is an `s32` scalar ([`CheckSite::packs`]; the index or the
/// entry a metadata check names), `P` of them, in check order. Then each
/// other reported value, in check order ([`check_slots`] says where check
/// `k`'s are). Carrying the scalars in one vector lets XLA compute them in
/// one fused kernel instead of one kernel per result. The runtime reads the
/// first result after every run and turns a failure into
/// [`Error::Check`](crate::Error::Check); the results a caller sees are the
/// body's own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckSite {
    /// The message, with one `{}` per reported value.
    pub message: String,
    /// Where the check was written.
    pub location: Location,
    /// The types of the values it reports.
    pub values: Vec<TensorSpec>,
}

impl CheckSite {
    /// Whether a reported value of type `spec` travels in the checks' first
    /// result (an `s32` scalar does) rather than as a result of its own.
    ///
    /// ```
    /// use tessel_ir::ir::CheckSite;
    /// use tessel_ir::{TensorSpec, F32, S32};
    /// assert!(CheckSite::packs(&TensorSpec::new([], S32)));
    /// assert!(!CheckSite::packs(&TensorSpec::new([4], S32)));
    /// assert!(!CheckSite::packs(&TensorSpec::new([], F32)));
    /// ```
    pub fn packs(spec: &TensorSpec) -> bool {
        spec.rank() == 0 && spec.dtype == DType::S32
    }
}

/// Where one reported value of a check is among a program's check results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckSlot {
    /// Element `i` of the first check result (element 0 is the code).
    Packed(usize),
    /// Check result `i` (0 is the first, so `i >= 1`).
    Result(usize),
}

/// How many of a program's results carry its checks (the last ones: the
/// code with the packed scalars, then the other reported values).
pub fn check_outputs(sites: &[CheckSite]) -> usize {
    if sites.is_empty() {
        0
    } else {
        1 + sites
            .iter()
            .flat_map(|s| &s.values)
            .filter(|v| !CheckSite::packs(v))
            .count()
    }
}

/// Where the values check `k` of `sites` reports are, in its message's
/// order (empty when there is no check `k`).
///
/// ```
/// use tessel_ir::ir::{check_slots, CheckSite, CheckSlot};
/// use tessel_ir::{Location, TensorSpec, F32, S32};
/// let location = Location { file: "k.rs".into(), line: 1, column: 1 };
/// let site = |values| CheckSite { message: String::new(), location: location.clone(), values };
/// let sites = [
///     site(vec![TensorSpec::new([], S32), TensorSpec::new([3], F32)]),
///     site(vec![TensorSpec::new([], S32), TensorSpec::new([], F32), TensorSpec::new([], S32)]),
/// ];
/// assert_eq!(check_slots(&sites, 0), [CheckSlot::Packed(1), CheckSlot::Result(1)]);
/// assert_eq!(
///     check_slots(&sites, 1),
///     [CheckSlot::Packed(2), CheckSlot::Result(2), CheckSlot::Packed(3)]
/// );
/// ```
pub fn check_slots(sites: &[CheckSite], k: usize) -> Vec<CheckSlot> {
    let (mut packed, mut result) = (1, 1);
    for (j, site) in sites.iter().enumerate() {
        let mut slots = Vec::with_capacity(site.values.len());
        for v in &site.values {
            if CheckSite::packs(v) {
                slots.push(CheckSlot::Packed(packed));
                packed += 1;
            } else {
                slots.push(CheckSlot::Result(result));
                result += 1;
            }
        }
        if j == k {
            return slots;
        }
    }
    Vec::new()
}
