//! The checks a traced program carries out of itself (`check`, the
//! serving kernels' metadata checks): what each one says and which of the
//! program's results report it.

use crate::error::Location;
use crate::shape::TensorSpec;

/// One `check` in a traced program: its message, where it was written, and
/// the types of the values it reports when it fails.
///
/// A graph with checks has `1 + Σ values` more results than its body
/// returned, after them: an `s32[]` code (0: every check held; `k + 1`:
/// check `k` failed first) and each check's values, in check order. The
/// runtime reads the code after every run and turns a failure into
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

/// How many of a program's results carry its checks (the last ones: a
/// code, then the values each check reports).
pub fn check_outputs(sites: &[CheckSite]) -> usize {
    if sites.is_empty() {
        0
    } else {
        1 + sites.iter().map(|s| s.values.len()).sum::<usize>()
    }
}
