//! The interpreter backend: a [`Device`](super::Device) that runs traced
//! graphs with [`interp::evaluate`](crate::interp::evaluate) on the host
//! instead of compiling them with a PJRT plugin. No plugin is loaded,
//! fetched or needed; "device" buffers are host tensors; the
//! [`Checks`] run on every evaluation and what they find is warned about,
//! returned as an error, or only collected, as [`OnFinding`] says.

use std::collections::HashMap;
use std::mem::{discriminant, Discriminant};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::cache::attachments::Attachments;
use crate::error::{InterpError, Result};
use crate::host::HostTensor;
use crate::interp::{evaluate, Checks, Finding, FindingKind};
use crate::ir::{Graph, NodeId};

/// What the interpreter does with what its [`Checks`] find.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnFinding {
    /// Print each finding to stderr the first time an executable meets it
    /// (`warning: kernel `k`: divide at src/lib.rs:12:5: produced inf ...`)
    /// and go on; every finding is also collected (see
    /// [`Executable::findings`](super::Executable::findings)).
    #[default]
    Warn,
    /// Fail the run with [`InterpError::Findings`], listing what was found.
    Error,
    /// Only collect them, silently.
    Collect,
}

/// How an interpreter device checks the kernels it runs.
///
/// ```
/// use tessel_dsl::interp::Checks;
/// use tessel_dsl::runtime::{Device, InterpreterOptions, OnFinding};
/// let strict = Device::interpreter_with(InterpreterOptions {
///     checks: Checks::ALL,
///     on_finding: OnFinding::Error,
/// });
/// assert!(strict.is_interpreter());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InterpreterOptions {
    /// Which checks run (all by default; [`Checks::NONE`] turns them off).
    pub checks: Checks,
    /// What happens to a finding (a warning on stderr by default).
    pub on_finding: OnFinding,
}

/// The state of one interpreter "client": its options, and the attachments
/// (compile caches) every [`Device`](super::Device) over it shares.
pub(crate) struct Interpreter {
    pub(crate) options: InterpreterOptions,
    /// Weak for the reason the PJRT client's is: attachments hold
    /// executables, which hold their interpreter.
    pub(crate) attachments: Mutex<Weak<Attachments>>,
}

impl Interpreter {
    pub(crate) fn new(options: InterpreterOptions) -> Interpreter {
        Interpreter {
            options,
            attachments: Mutex::new(Weak::new()),
        }
    }
}

/// A program "compiled" for the interpreter: its traced graph, and what the
/// checks found over every run so far.
pub(crate) struct InterpProgram {
    pub(crate) graph: Arc<Graph>,
    pub(crate) interpreter: Arc<Interpreter>,
    log: Mutex<FindingLog>,
}

/// Findings of an executable's runs, one per (node, kind), with counts summed.
#[derive(Default)]
struct FindingLog {
    findings: Vec<Finding>,
    seen: HashMap<(NodeId, Discriminant<FindingKind>), usize>,
}

impl FindingLog {
    /// Adds `found`; returns those not seen before.
    fn add(&mut self, found: Vec<Finding>) -> Vec<Finding> {
        let mut new = Vec::new();
        for f in found {
            let key = (f.node, discriminant(&f.kind));
            if let Some(&i) = self.seen.get(&key) {
                self.findings[i].count = self.findings[i].count.saturating_add(f.count);
            } else {
                self.seen.insert(key, self.findings.len());
                self.findings.push(f.clone());
                new.push(f);
            }
        }
        new
    }
}

impl InterpProgram {
    pub(crate) fn new(graph: Arc<Graph>, interpreter: Arc<Interpreter>) -> InterpProgram {
        InterpProgram {
            graph,
            interpreter,
            log: Mutex::new(FindingLog::default()),
        }
    }

    /// Evaluates the graph on `args` (already checked against its inputs)
    /// and deals with the findings as the interpreter's options say.
    pub(crate) fn run<A>(&self, args: &[A]) -> Result<Vec<HostTensor>>
    where
        A: std::borrow::Borrow<HostTensor> + Sync,
    {
        let options = self.interpreter.options;
        let evaluation = evaluate(&self.graph, args, options.checks)?;
        if !evaluation.findings.is_empty() {
            let new = self
                .log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add(evaluation.findings.clone());
            match options.on_finding {
                OnFinding::Warn => {
                    for f in &new {
                        eprintln!("warning: {f}");
                    }
                }
                OnFinding::Error => {
                    return Err(InterpError::Findings {
                        kernel: self.graph.name.clone(),
                        findings: evaluation
                            .findings
                            .iter()
                            .map(ToString::to_string)
                            .collect(),
                    }
                    .into())
                }
                OnFinding::Collect => {}
            }
        }
        Ok(evaluation.outputs)
    }

    /// Every finding of the runs so far.
    pub(crate) fn findings(&self) -> Vec<Finding> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .findings
            .clone()
    }
}
