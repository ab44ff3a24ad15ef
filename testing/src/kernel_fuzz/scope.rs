//! The variables a generated statement may use: nested blocks, shadowing,
//! and which variables may be assigned where (a Rust value declared
//! outside a traced branch or loop may not be assigned inside it).

use super::types::Var;

/// One block.
#[derive(Default)]
struct Frame {
    vars: Vec<Var>,
    /// The body of a traced branch or loop: Rust values declared outside
    /// it are read-only inside.
    barrier: bool,
    /// A closure's body: nothing declared outside it may be assigned.
    closure: bool,
    /// Whether the block assigns a variable declared outside it.
    assigns_outer: bool,
}

/// The blocks open at the current statement, outermost first.
#[derive(Default)]
pub(crate) struct Scope {
    frames: Vec<Frame>,
}

impl Scope {
    /// Opens a block.
    pub(crate) fn push(&mut self, barrier: bool) {
        self.frames.push(Frame {
            barrier,
            ..Frame::default()
        });
    }

    /// Opens a closure's body.
    pub(crate) fn push_closure(&mut self) {
        self.frames.push(Frame {
            barrier: true,
            closure: true,
            ..Frame::default()
        });
    }

    /// Closes the innermost block; returns whether it assigned a variable
    /// declared outside it.
    pub(crate) fn pop(&mut self) -> bool {
        self.frames.pop().is_some_and(|f| f.assigns_outer)
    }

    /// Declares `var` in the innermost block (shadowing any of its name).
    pub(crate) fn declare(&mut self, var: Var) {
        if let Some(f) = self.frames.last_mut() {
            f.vars.push(var);
        }
    }

    /// The innermost variable called `name` and the index of its block.
    fn lookup(&self, name: &str) -> Option<(usize, &Var)> {
        self.frames
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, f)| f.vars.iter().rev().find(|v| v.name == name).map(|v| (i, v)))
    }

    /// Every variable visible here (the innermost of each name).
    pub(crate) fn visible(&self) -> Vec<Var> {
        let mut out: Vec<Var> = Vec::new();
        for f in self.frames.iter().rev() {
            for v in f.vars.iter().rev() {
                if !out.iter().any(|o| o.name == v.name) {
                    out.push(v.clone());
                }
            }
        }
        out
    }

    /// The visible variables that may be assigned here: mutable tensors
    /// (and tuples and arrays of them) anywhere but from a closure, mutable
    /// Rust values only with no traced body or closure between their
    /// declaration and here.
    pub(crate) fn assignable(&self) -> Vec<Var> {
        self.visible()
            .into_iter()
            .filter(|v| v.mutable && !v.locked && self.may_assign(&v.name))
            .collect()
    }

    fn may_assign(&self, name: &str) -> bool {
        let Some((i, v)) = self.lookup(name) else {
            return false;
        };
        let inner = &self.frames[i + 1..];
        !inner.iter().any(|f| f.closure) && (v.ty.carried() || !inner.iter().any(|f| f.barrier))
    }

    /// Records an assignment to `name`: every block inside its
    /// declaration's block now assigns an outer variable.
    pub(crate) fn note_assign(&mut self, name: &str) {
        if let Some((i, _)) = self.lookup(name) {
            for f in &mut self.frames[i + 1..] {
                f.assigns_outer = true;
            }
        }
    }

    /// The number of visible mutable tensors (the most a traced branch or
    /// loop may carry).
    pub(crate) fn mutable_tensors(&self) -> usize {
        self.visible()
            .iter()
            .filter(|v| v.mutable && v.ty.carried())
            .count()
    }

    /// Whether the innermost block assigned a variable declared outside it.
    pub(crate) fn assigns_outer(&self) -> bool {
        self.frames.last().is_some_and(|f| f.assigns_outer)
    }

    /// Whether the current statement is inside a traced body.
    pub(crate) fn in_traced(&self) -> bool {
        self.frames.iter().any(|f| f.barrier)
    }
}
