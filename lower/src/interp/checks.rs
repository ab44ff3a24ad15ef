//! What the interpreter watches for while it runs: the first NaN or
//! infinity an op makes from finite operands, and dynamic indices that XLA
//! clamps into range (or, for scatter, drops). Findings are collected in
//! the [`Evaluation`](super::Evaluation), one per op and kind, with the
//! number of times it happened.

use std::collections::HashMap;
use std::fmt;

use crate::error::Location;
use crate::ir::NodeId;

/// Which checks run during [`evaluate`](super::evaluate). The findings are
/// on by default; the loop limit is off.
///
/// ```
/// use tessel_dsl::interp::Checks;
/// assert!(Checks::default().non_finite);
/// assert!(!Checks::NONE.clamped_indices);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Checks {
    /// Report an op that produces a NaN or an infinity from operands that
    /// are all finite (constants and iotas are not checked).
    pub non_finite: bool,
    /// Report start indices of `dynamic_slice`, `dynamic_update_slice` and
    /// `gather` that XLA clamps into range, and `scatter` windows it drops.
    pub clamped_indices: bool,
    /// Stop with an error when one run of a `while` exceeds this many
    /// iterations (`None`: no limit, as on a device, where a loop that
    /// never ends hangs).
    pub max_loop_iterations: Option<u64>,
}

impl Checks {
    /// Every check.
    pub const ALL: Checks = Checks {
        non_finite: true,
        clamped_indices: true,
        max_loop_iterations: None,
    };
    /// No check: evaluation only.
    pub const NONE: Checks = Checks {
        non_finite: false,
        clamped_indices: false,
        max_loop_iterations: None,
    };
}

impl Default for Checks {
    fn default() -> Self {
        Checks::ALL
    }
}

/// What a [`Finding`] is about.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FindingKind {
    /// A NaN or an infinity in a result whose float operands were all finite.
    NonFinite {
        /// Which result of the op.
        result: usize,
        /// The element's multi-index.
        index: Vec<usize>,
        /// The value (NaN or ±infinity).
        value: f64,
    },
    /// A start index that XLA clamps so the window fits the operand.
    ClampedIndex {
        /// The operand axis.
        axis: usize,
        /// The start index as computed.
        start: i64,
        /// The start index XLA uses instead.
        clamped: i64,
    },
    /// A scatter window that does not fit the operand, which XLA skips.
    DroppedScatter {
        /// The operand axis the window leaves.
        axis: usize,
        /// The window's start index on that axis.
        start: i64,
    },
}

/// One thing a check found: what, in which op of which kernel, where in the
/// user's source, and how often.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The kernel (the graph's name).
    pub kernel: String,
    /// The op, by its StableHLO name (`divide`, `dynamic_slice`, ...).
    pub op: &'static str,
    /// The node in the graph.
    pub node: NodeId,
    /// The user's source line that made the op.
    pub location: Location,
    /// What was found (its first occurrence).
    pub kind: FindingKind,
    /// How many times it happened in this evaluation (elements and loop
    /// iterations together).
    pub count: usize,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel `{}`: {} at {}: ",
            self.kernel, self.op, self.location
        )?;
        match &self.kind {
            FindingKind::NonFinite {
                result,
                index,
                value,
            } => write!(
                f,
                "produced {value} at {index:?} of result {result} from finite operands"
            )?,
            FindingKind::ClampedIndex {
                axis,
                start,
                clamped,
            } => write!(
                f,
                "start index {start} on axis {axis} is out of range; XLA clamps it to {clamped}"
            )?,
            FindingKind::DroppedScatter { axis, start } => write!(
                f,
                "window at start {start} on axis {axis} does not fit the operand; XLA skips it"
            )?,
        }
        if self.count > 1 {
            write!(f, " ({} times)", self.count)?;
        }
        Ok(())
    }
}

/// Out-of-range indices one op met: the first, and how many.
#[derive(Default)]
pub(crate) struct IndexNotes {
    /// The first: (axis, start as given, start as used, dropped instead of clamped).
    pub first: Option<(usize, i64, i64, bool)>,
    /// How many.
    pub count: usize,
}

impl IndexNotes {
    /// Notes a start that was clamped (`dropped`: a scatter window skipped).
    pub(crate) fn note(&mut self, axis: usize, start: i64, used: i64, dropped: bool) {
        if self.first.is_none() {
            self.first = Some((axis, start, used, dropped));
        }
        self.count += 1;
    }
}

/// Collects findings, one per (node, kind of check).
#[derive(Default)]
pub(crate) struct Recorder {
    pub findings: Vec<Finding>,
    seen: HashMap<(NodeId, u8), usize>,
}

impl Recorder {
    /// Records `kind` for `node`, or counts it if that node already has a
    /// finding of that kind.
    pub(crate) fn record(
        &mut self,
        kernel: &str,
        op: &'static str,
        node: NodeId,
        location: &Location,
        kind: FindingKind,
        count: usize,
    ) {
        let tag = match kind {
            FindingKind::NonFinite { .. } => 0,
            FindingKind::ClampedIndex { .. } => 1,
            FindingKind::DroppedScatter { .. } => 2,
        };
        if let Some(&i) = self.seen.get(&(node, tag)) {
            self.findings[i].count = self.findings[i].count.saturating_add(count);
            return;
        }
        self.seen.insert((node, tag), self.findings.len());
        self.findings.push(Finding {
            kernel: kernel.to_string(),
            op,
            node,
            location: location.clone(),
            kind,
            count,
        });
    }
}
