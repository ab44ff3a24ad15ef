//! The state of one kernel body under construction: the random source, the
//! scope, the lines written so far, and the budgets that keep a body small
//! (nesting depth, loop trips).

use super::scope::Scope;
use super::types::{Ty, Var};
use crate::Rng;

/// The most nested blocks a body opens.
pub(crate) const MAX_DEPTH: usize = 3;
/// The most iterations a statement may run (the product of the trip counts
/// of the loops around it).
pub(crate) const MAX_WORK: usize = 64;
/// The most mutable tensors in scope (a traced branch or loop carries at
/// most this many).
pub(crate) const MAX_MUTABLE: usize = 6;

/// One kernel body under construction.
pub(crate) struct Body {
    pub rng: Rng,
    pub scope: Scope,
    lines: Vec<String>,
    indent: usize,
    next_name: usize,
    /// The shapes this kernel's tensors take (so variables can be combined).
    pub shapes: Vec<Vec<usize>>,
    /// The product of the trip counts of the loops around the current statement.
    pub work: usize,
    /// The blocks open around the current statement.
    pub depth: usize,
    /// Names new variables may not shadow (the variable a loop must assign).
    pub protected: Vec<String>,
    /// While generating a closure's body or argument: no closure calls.
    pub no_calls: bool,
    /// The kernel's results: how many, whether as a `Vec`, and per result
    /// the most inexact terms any `return` gives it.
    pub ret_count: usize,
    pub ret_vec: bool,
    pub ret_terms: Vec<usize>,
    /// Whether `break` (and `continue`) may appear here: inside a Rust loop
    /// with no traced body between (no `continue` in a `while`, which
    /// would skip its counter).
    pub can_break: bool,
    pub can_continue: bool,
    /// The labels of the Rust loops `break 'label` may leave from here, and
    /// whether `continue 'label` may go to each.
    pub labels: Vec<(String, bool)>,
    /// The kernel's block size (none for `cpu_kernel`), and whether it is a
    /// `tpu_kernel` (whose minor axis tiles by 128).
    pub block: Option<usize>,
    pub tpu: bool,
}

impl Body {
    /// An empty body whose tensors take the given shapes.
    pub(crate) fn new(rng: Rng, shapes: Vec<Vec<usize>>) -> Body {
        let mut scope = Scope::default();
        scope.push(false);
        Body {
            rng,
            scope,
            lines: Vec::new(),
            indent: 1,
            next_name: 0,
            shapes,
            work: 1,
            depth: 0,
            protected: Vec::new(),
            no_calls: false,
            ret_count: 1,
            ret_vec: false,
            ret_terms: Vec::new(),
            can_break: false,
            can_continue: false,
            labels: Vec::new(),
            block: None,
            tpu: false,
        }
    }

    /// The lines written, indented for a function body.
    pub(crate) fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }

    /// Writes one line at the current indentation.
    pub(crate) fn line(&mut self, text: impl AsRef<str>) {
        let pad = "    ".repeat(self.indent);
        self.lines.push(format!("{pad}{}", text.as_ref()));
    }

    /// Writes `head {`, then the block `inner` writes (its own scope, a
    /// traced body when `barrier`), then `}`; returns whether the block
    /// assigned a variable declared outside it, and `inner`'s value.
    pub(crate) fn braced<R>(
        &mut self,
        head: &str,
        barrier: bool,
        inner: impl FnOnce(&mut Body) -> R,
    ) -> (bool, R) {
        self.line(format!("{head} {{"));
        self.indent += 1;
        self.depth += 1;
        self.scope.push(barrier);
        let r = inner(self);
        let assigned = self.scope.pop();
        self.depth -= 1;
        self.indent -= 1;
        (assigned, r)
    }

    /// Runs `f` with `break`/`continue` allowed or not, as given.
    pub(crate) fn with_exits<R>(
        &mut self,
        can_break: bool,
        can_continue: bool,
        f: impl FnOnce(&mut Body) -> R,
    ) -> R {
        let saved = (self.can_break, self.can_continue);
        (self.can_break, self.can_continue) = (can_break, can_continue);
        // No loop outside a traced body or closure can be left from inside.
        let labels = if can_break {
            self.labels.clone()
        } else {
            std::mem::take(&mut self.labels)
        };
        let r = f(self);
        (self.can_break, self.can_continue) = saved;
        self.labels = labels;
        r
    }

    /// Changes the indentation by `levels`.
    pub(crate) fn indent_by(&mut self, levels: isize) {
        self.indent = self.indent.saturating_add_signed(levels);
    }

    /// Closes the last `braced` block with `tail` (`}`, `} else`, `};`).
    pub(crate) fn close(&mut self, tail: &str) {
        self.line(tail);
    }

    /// A fresh variable name with `prefix`.
    pub(crate) fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    /// True with probability `p`.
    pub(crate) fn coin(&mut self, p: f64) -> bool {
        self.rng.unit() < p
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.rng.int(0, n as i64 - 1) as usize
    }

    /// One of `items` (not empty).
    pub(crate) fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        let i = self.below(items.len());
        items[i].clone()
    }

    /// One of the kernel's shapes.
    pub(crate) fn shape(&mut self) -> Vec<usize> {
        let shapes = self.shapes.clone();
        self.pick(&shapes)
    }

    /// The visible tensors, with their shapes and element types.
    pub(crate) fn tensors(&self) -> Vec<Var> {
        self.scope
            .visible()
            .into_iter()
            .filter(|v| matches!(v.ty, Ty::Tensor { .. }))
            .collect()
    }

    /// The visible variables of a Rust type.
    pub(crate) fn rust_vars(&self, ty: &Ty) -> Vec<Var> {
        self.scope
            .visible()
            .into_iter()
            .filter(|v| &v.ty == ty)
            .collect()
    }
}
