//! The drivers the kernel macros expand `if`, `while` and `for` into.
//!
//! The macros keep the user's code inline (so `return`, `?` and borrows
//! behave as in Rust wherever the construct is static) and call a driver
//! around it. The driver's type, chosen by the type of the condition, decides
//! what happens: a `bool` condition runs the code as plain Rust; a `Tensor`
//! condition traces it into an XLA conditional or loop, with every outer
//! variable the code assigns carried as a traced value.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{BinaryOp, Comparison};
use crate::ops::carry::{flat, Carry};
use crate::ops::constant::full_at;
use crate::ops::control::{CondBuilder, WhileBuilder};
use crate::ops::elementwise::{binary_at, compare_at};
use crate::trace::tensor::Tensor;

/// The condition of an `if` in a kernel body: `bool` (plain Rust) or a
/// scalar `pred` [`Tensor`] (an XLA conditional).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the condition of an `if` in a kernel",
    label = "expected `bool` or a scalar pred `Tensor`"
)]
pub trait Condition {
    /// The branch driver.
    type Branch;
    /// Starts a branch on this condition.
    fn branch(&self) -> Self::Branch;
}

impl Condition for bool {
    type Branch = StaticBranch;
    fn branch(&self) -> StaticBranch {
        StaticBranch { cond: *self }
    }
}

impl Condition for Tensor {
    type Branch = TracedBranch;
    #[track_caller]
    fn branch(&self) -> TracedBranch {
        TracedBranch {
            builder: CondBuilder::begin(*self, Location::caller()),
        }
    }
}

/// An `if` on a `bool`: runs one branch, as Rust does.
pub struct StaticBranch {
    cond: bool,
}

impl StaticBranch {
    /// Nothing to save: only one branch runs.
    pub fn save<S>(&self, _state: S) -> Option<Vec<Tensor>> {
        None
    }
    /// Whether the then-branch runs.
    pub fn enter_then(&mut self) -> bool {
        self.cond
    }
    /// The state after the then-branch, unchanged.
    pub fn leave_then<S, R>(
        &mut self,
        state: S,
        _value: &Option<R>,
        _saved: Option<Vec<Tensor>>,
    ) -> S {
        state
    }
    /// Whether the else-branch runs.
    pub fn enter_else(&mut self) -> bool {
        !self.cond
    }
    /// The state and the value of the branch that ran.
    pub fn finish<S, R>(self, state: S, then_value: Option<R>, else_value: Option<R>) -> (S, R) {
        match then_value.or(else_value) {
            Some(v) => (state, v),
            None => unreachable!("exactly one branch of a static if runs"),
        }
    }
}

/// An `if` on a tensor: both branches are traced into an XLA conditional;
/// the variables they assign and their values are merged.
pub struct TracedBranch {
    builder: Option<CondBuilder>,
}

impl TracedBranch {
    /// Saves the assigned variables' values (given by reference) before the then-branch runs.
    pub fn save<S: SaveRefs>(&self, state: S) -> Option<Vec<Tensor>> {
        let mut out = Vec::new();
        state.save_into(&mut out);
        Some(out)
    }
    /// Both branches are traced.
    pub fn enter_then(&mut self) -> bool {
        true
    }
    /// Records the then-branch's results and restores the saved state for the else-branch.
    pub fn leave_then<S: Carry, R: Carry>(
        &mut self,
        state: S,
        value: &Option<R>,
        saved: Option<Vec<Tensor>>,
    ) -> S {
        let mut outs = flat(&state);
        if let Some(v) = value {
            outs.extend(flat(v));
        }
        if let Some(b) = self.builder.as_mut() {
            b.then_done(&outs);
        }
        match saved {
            Some(s) => state.rebuild(&mut s.into_iter()),
            None => state,
        }
    }
    /// Both branches are traced.
    pub fn enter_else(&mut self) -> bool {
        true
    }
    /// Appends the conditional; returns the merged state and value.
    pub fn finish<S: Carry, R: Carry>(
        self,
        state: S,
        then_value: Option<R>,
        else_value: Option<R>,
    ) -> (S, R) {
        let (Some(t), Some(e)) = (then_value, else_value) else {
            unreachable!("both branches of a traced if are traced")
        };
        let mut outs = flat(&state);
        outs.extend(flat(&e));
        let merged = match self.builder {
            // Assigns nothing outside and gives no value: no conditional.
            Some(b) if outs.is_empty() => {
                b.discard();
                outs
            }
            Some(b) => b.finish(&outs),
            None => outs,
        };
        (state, t).rebuild(&mut merged.into_iter())
    }
}

/// References to the variables a traced branch assigns, saved before the
/// then-branch so that the else-branch starts from the same values.
#[diagnostic::on_unimplemented(
    message = "a variable assigned in a branch on a tensor must be a `Tensor` (or tuple/array/Vec of them)",
    label = "not made of `Tensor`s"
)]
pub trait SaveRefs {
    /// Appends the tensors.
    fn save_into(&self, out: &mut Vec<Tensor>);
}

impl SaveRefs for () {
    fn save_into(&self, _out: &mut Vec<Tensor>) {}
}

macro_rules! save_refs {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Carry),+> SaveRefs for ($(&$t,)+) {
            fn save_into(&self, out: &mut Vec<Tensor>) {
                $(self.$i.flatten(out);)+
            }
        }
    };
}
save_refs!(A 0);
save_refs!(A 0, B 1);
save_refs!(A 0, B 1, C 2);
save_refs!(A 0, B 1, C 2, D 3);
save_refs!(A 0, B 1, C 2, D 3, E 4);
save_refs!(A 0, B 1, C 2, D 3, E 4, F 5);
save_refs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
save_refs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// A condition that must be a Rust `bool`: an `if` or `while` whose body
/// leaves it early (`return`, `break`, `continue`, `?`) cannot be traced.
#[diagnostic::on_unimplemented(
    message = "this condition must be a `bool`, not `{Self}`",
    label = "a branch or loop on a tensor cannot contain `return`, `break`, `continue` or `?`",
    note = "a traced branch or loop runs both paths into the graph; assign the result to a variable instead of leaving early"
)]
pub trait StaticCondition {
    /// The value.
    fn truth(self) -> bool;
}

impl StaticCondition for bool {
    fn truth(self) -> bool {
        self
    }
}

/// `cond`, which must be a `bool`.
pub fn static_condition<C: StaticCondition>(cond: C) -> bool {
    cond.truth()
}

/// The condition of a `while` in a kernel body: `bool` (a plain Rust loop) or
/// a scalar `pred` [`Tensor`] (one XLA `while`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the condition of a `while` in a kernel",
    label = "expected `bool` or a scalar pred `Tensor`"
)]
pub trait LoopCondition {
    /// The loop driver.
    type Driver;
    /// Starts a loop whose first condition value is `self`.
    fn driver(&self) -> Self::Driver;
}

impl LoopCondition for bool {
    type Driver = StaticWhile;
    fn driver(&self) -> StaticWhile {
        StaticWhile
    }
}

impl LoopCondition for Tensor {
    type Driver = TracedWhile;
    #[track_caller]
    fn driver(&self) -> TracedWhile {
        TracedWhile {
            builder: None,
            body_args: Vec::new(),
            loc: Location::caller(),
            done: false,
        }
    }
}

/// A `while` on a `bool`: a plain Rust loop.
pub struct StaticWhile;

impl StaticWhile {
    /// The state, unchanged.
    pub fn enter_cond<S>(&mut self, state: S) -> S {
        state
    }
    /// The first condition value is reused (it was computed to pick the driver).
    pub fn reuse_probe(&self) -> bool {
        true
    }
    /// Whether to run the body.
    pub fn test(&mut self, cond: bool) -> bool {
        cond
    }
    /// The state, unchanged.
    pub fn enter_body<S>(&mut self, state: S) -> S {
        state
    }
    /// The state, unchanged.
    pub fn leave_body<S>(&mut self, state: S) -> S {
        state
    }
    /// A Rust loop ends when its condition is false.
    pub fn done(&self) -> bool {
        false
    }
}

/// A `while` on a tensor: the condition and body are traced once into an
/// XLA `while` that carries every outer variable the body assigns.
pub struct TracedWhile {
    builder: Option<WhileBuilder>,
    body_args: Vec<Tensor>,
    loc: Location,
    done: bool,
}

impl TracedWhile {
    /// Opens the condition region; the state becomes its arguments.
    pub fn enter_cond<S: Carry>(&mut self, state: S) -> S {
        match WhileBuilder::begin(flat(&state), self.loc.clone()) {
            Some((b, args)) => {
                self.builder = Some(b);
                state.rebuild(&mut args.into_iter())
            }
            None => state,
        }
    }
    /// The condition is traced again on the loop's own state.
    pub fn reuse_probe(&self) -> bool {
        false
    }
    /// Closes the condition region; the body is traced once.
    pub fn test(&mut self, cond: Tensor) -> bool {
        if let Some(b) = self.builder.as_mut() {
            self.body_args = b.cond_done(cond);
        }
        true
    }
    /// Opens the body; the state becomes its arguments.
    pub fn enter_body<S: Carry>(&mut self, state: S) -> S {
        let args = std::mem::take(&mut self.body_args);
        if args.is_empty() && !flat(&state).is_empty() {
            return state;
        }
        state.rebuild(&mut args.into_iter())
    }
    /// Closes the body and appends the loop; the state becomes its results.
    pub fn leave_body<S: Carry>(&mut self, state: S) -> S {
        self.done = true;
        match self.builder.take() {
            Some(b) => {
                let outs = b.finish(flat(&state));
                state.rebuild(&mut outs.into_iter())
            }
            None => state,
        }
    }
    /// A traced loop body is traced once.
    pub fn done(&self) -> bool {
        self.done
    }
}

/// A bound of a traced `for` range: a Rust integer or an integer scalar tensor.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot bound a traced `for` loop",
    label = "expected an integer or an integer scalar `Tensor`"
)]
pub trait LoopBound: Copy {
    /// The bound as an s32 scalar tensor.
    fn to_s32(self, loc: &Location) -> Tensor;
    /// The bound, when it is a Rust integer (known while tracing).
    fn static_bound(self) -> Option<i64> {
        None
    }
}

macro_rules! int_bound {
    ($($t:ty),*) => {$(
        impl LoopBound for $t {
            fn to_s32(self, loc: &Location) -> Tensor {
                full_at(Vec::new(), self as f64, DType::S32, loc.clone())
            }
            fn static_bound(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}
int_bound!(usize, isize, i32, i64, u32);

impl LoopBound for Tensor {
    fn to_s32(self, _loc: &Location) -> Tensor {
        self.cast(DType::S32)
    }
}

/// A `for i in lo..hi` over a range in a kernel body: one XLA `while` whose
/// index `i` is a traced s32 scalar and which carries every outer variable
/// the body assigns.
pub struct RangeLoop {
    lo: Tensor,
    hi: Tensor,
    builder: Option<WhileBuilder>,
    index: Tensor,
    /// `hi - lo` when both bounds are Rust integers.
    span: Option<i64>,
    pub(crate) loc: Location,
}

impl RangeLoop {
    /// `lo..hi`.
    #[track_caller]
    pub fn new(lo: impl LoopBound, hi: impl LoopBound) -> RangeLoop {
        let loc = Location::caller();
        let span = match (lo.static_bound(), hi.static_bound()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let (lo, hi) = (lo.to_s32(&loc), hi.to_s32(&loc));
        RangeLoop {
            lo,
            hi,
            builder: None,
            index: lo,
            span,
            loc,
        }
    }

    /// `lo..=hi`.
    #[track_caller]
    pub fn new_inclusive(lo: impl LoopBound, hi: impl LoopBound) -> RangeLoop {
        let mut r = RangeLoop::new(lo, hi);
        let one = full_at(Vec::new(), 1.0, DType::S32, r.loc.clone());
        r.hi = binary_at(r.hi, one, BinaryOp::Add, r.loc.clone());
        r.span = r.span.map(|n| n.saturating_add(1));
        r
    }

    /// Traces the loop condition and opens the body; the state becomes the
    /// body's arguments.
    pub fn enter<S: Carry>(&mut self, state: S) -> S {
        let mut inits = vec![self.lo];
        inits.extend(flat(&state));
        let Some((mut b, cargs)) = WhileBuilder::begin(inits, self.loc.clone()) else {
            return state;
        };
        if let Some(n) = self.span {
            // The exact trip count (reverse-mode autodiff saves that many carries).
            b.set_trip_count(n.max(0) as usize);
        }
        let pred = compare_at(cargs[0], self.hi, Comparison::Lt, self.loc.clone());
        let bargs = b.cond_done(pred);
        self.builder = Some(b);
        self.index = bargs.first().copied().unwrap_or(self.lo);
        state.rebuild(&mut bargs.into_iter().skip(1))
    }

    /// The loop index inside the body (an s32 scalar tensor).
    pub fn index(&self) -> Tensor {
        self.index
    }

    /// Closes the body and appends the loop; the state becomes its results.
    pub fn finish<S: Carry>(self, state: S) -> S {
        let Some(b) = self.builder else {
            return state;
        };
        let one = full_at(Vec::new(), 1.0, DType::S32, self.loc.clone());
        let mut outs = vec![binary_at(self.index, one, BinaryOp::Add, self.loc.clone())];
        outs.extend(flat(&state));
        let results = b.finish(outs);
        state.rebuild(&mut results.into_iter().skip(1))
    }
}
