//! The `for` loops of a kernel body: the *type* of the loop's source decides
//! whether it is traced (one XLA `while`) or runs as a Rust loop while
//! tracing.
//!
//! The kernel macros expand every `for` that assigns outer variables into
//! the same code:
//!
//! ```text
//! let mut lp = (&ForSource::new(source)).driver();
//! loop {
//!     let (state, index) = lp.next(state);
//!     let Some(pattern) = index else { break };
//!     body
//!     state = lp.end_body(state);
//! }
//! ```
//!
//! Two traits give `driver`, and method resolution picks the first that
//! applies: [`TracedFor`] when the source is a [`LoopSource`] (ranges over
//! Rust integers or integer tensors, `blocks(..)`, `grid(..)`, or a user's
//! own type), [`RustFor`] when it is any other `IntoIterator`. A traced
//! driver yields its index once (the body is traced once, inside the
//! `while`); a Rust driver yields every item. The range syntax `lo..hi`
//! becomes [`RangeLoop::new`]`(lo, hi)`, so its bounds may mix integers and
//! tensors.

use std::cell::Cell;
use std::ops::{Range, RangeInclusive};

use crate::lang::control::{LoopBound, RangeLoop};
use crate::ops::carry::Carry;
use crate::trace::tensor::Tensor;

/// A traced loop: opened around the state, its index read once, closed.
pub trait TracedLoop {
    /// The loop index the body sees (a traced scalar, or a tuple of them).
    type Index;
    /// Traces the loop condition and opens the body; the state becomes the
    /// body's arguments.
    fn enter<S: Carry>(&mut self, state: S) -> S;
    /// The index inside the body.
    fn index(&self) -> Self::Index;
    /// Closes the body and appends the loop; the state becomes its results.
    fn finish<S: Carry>(self, state: S) -> S;
}

impl TracedLoop for RangeLoop {
    type Index = Tensor;
    fn enter<S: Carry>(&mut self, state: S) -> S {
        RangeLoop::enter(self, state)
    }
    fn index(&self) -> Tensor {
        RangeLoop::index(self)
    }
    fn finish<S: Carry>(self, state: S) -> S {
        RangeLoop::finish(self, state)
    }
}

/// What can drive a traced `for` loop in a kernel body. Implemented for
/// ranges whose bounds are Rust integers or integer scalar tensors, and by
/// the tiling layer for its block and grid types (the index is the block
/// number, or a tuple of block numbers with the last axis fastest). Any
/// type may implement it; a function returning such a type drives a traced
/// loop like the built-in ones.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot drive a traced `for` loop",
    label = "expected a range, `blocks(n)`, `blocks_of(n, size)` or `grid((..))`"
)]
pub trait LoopSource {
    /// The loop driver.
    type Driver: TracedLoop;
    /// Starts the loop.
    #[track_caller]
    fn driver(self) -> Self::Driver;
}

/// A range loop is its own source: the macros write the range syntax
/// `lo..hi` as `RangeLoop::new(lo, hi)`, so its bounds may mix Rust
/// integers and tensors.
impl LoopSource for RangeLoop {
    type Driver = RangeLoop;
    fn driver(self) -> RangeLoop {
        self
    }
}

impl<B: LoopBound> LoopSource for Range<B> {
    type Driver = RangeLoop;
    #[track_caller]
    fn driver(self) -> RangeLoop {
        RangeLoop::new(self.start, self.end)
    }
}

impl<B: LoopBound> LoopSource for RangeInclusive<B> {
    type Driver = RangeLoop;
    #[track_caller]
    fn driver(self) -> RangeLoop {
        RangeLoop::new_inclusive(*self.start(), *self.end())
    }
}

/// The source of a `for` loop in a kernel body, held until a driver is
/// chosen for its type.
pub struct ForSource<T>(Cell<Option<T>>);

impl<T> ForSource<T> {
    /// Wraps the loop's source.
    pub fn new(source: T) -> ForSource<T> {
        ForSource(Cell::new(Some(source)))
    }

    /// The source (the macros take it once; a second take finds nothing,
    /// and its loop runs no iteration).
    fn take(&self) -> Option<T> {
        self.0.take()
    }
}

/// The driver of a loop whose source is a [`LoopSource`] (chosen first).
pub trait TracedFor {
    /// The driver.
    type Driver;
    /// Starts the traced loop.
    #[track_caller]
    fn driver(&self) -> Self::Driver;
}

impl<T: LoopSource> TracedFor for ForSource<T> {
    type Driver = TracedForLoop<T::Driver>;
    #[track_caller]
    fn driver(&self) -> TracedForLoop<T::Driver> {
        TracedForLoop {
            // Not `Option::map`: a closure would not pass the caller's
            // location on to `driver`.
            #[allow(clippy::manual_map)]
            inner: match self.take() {
                Some(source) => Some(source.driver()),
                None => None,
            },
            opened: false,
        }
    }
}

/// The driver of a loop over any other `IntoIterator` (a Rust loop).
pub trait RustFor {
    /// The driver.
    type Driver;
    /// Starts the Rust loop.
    fn driver(&self) -> Self::Driver;
}

impl<T: IntoIterator> RustFor for &ForSource<T> {
    type Driver = RustForLoop<T::IntoIter>;
    fn driver(&self) -> RustForLoop<T::IntoIter> {
        RustForLoop(self.take().map(IntoIterator::into_iter))
    }
}

/// A traced `for`: the body runs once, inside one XLA `while`.
pub struct TracedForLoop<D> {
    inner: Option<D>,
    opened: bool,
}

impl<D: TracedLoop> TracedForLoop<D> {
    /// Opens the loop on the first call (the state becomes the body's
    /// arguments, and the index is returned); ends it on the second.
    pub fn next<S: Carry>(&mut self, state: S) -> (S, Option<D::Index>) {
        if self.opened {
            return (state, None);
        }
        self.opened = true;
        match self.inner.as_mut() {
            Some(d) => {
                let state = d.enter(state);
                let index = d.index();
                (state, Some(index))
            }
            None => (state, None),
        }
    }

    /// Closes the body; the state becomes the loop's results.
    pub fn end_body<S: Carry>(&mut self, state: S) -> S {
        match self.inner.take() {
            Some(d) => d.finish(state),
            None => state,
        }
    }
}

/// A Rust `for` run while tracing: the body runs once per item.
pub struct RustForLoop<I>(Option<I>);

impl<I: Iterator> RustForLoop<I> {
    /// The next item, if any; the state passes through.
    pub fn next<S>(&mut self, state: S) -> (S, Option<I::Item>) {
        (state, self.0.as_mut().and_then(Iterator::next))
    }

    /// Ends one iteration; the state passes through.
    pub fn end_body<S>(&mut self, state: S) -> S {
        state
    }
}

/// Why a loop that leaves early cannot be traced.
#[diagnostic::on_unimplemented(
    message = "a traced `for` loop cannot be left by `break`, `continue`, `return` or `?`",
    label = "this loop's source drives a traced loop (one XLA while)",
    note = "write `#[unroll] for ...` to run the loop while tracing, or carry a flag and test it"
)]
pub trait LeavesEarly {}

/// A `for` that leaves early (or has a label) over a [`LoopSource`]: a
/// compile error, since one XLA while has no early exit.
pub trait TracedForEarly {
    /// Never produced.
    type Iter;
    /// Rejected at compile time by the `LeavesEarly` bound.
    fn rust_iter(&self) -> Self::Iter
    where
        Self: LeavesEarly;
}

impl<T: LoopSource> TracedForEarly for ForSource<T> {
    type Iter = std::iter::Empty<<T::Driver as TracedLoop>::Index>;
    fn rust_iter(&self) -> Self::Iter
    where
        Self: LeavesEarly,
    {
        std::iter::empty()
    }
}

/// A `for` that leaves early over any other `IntoIterator`: a Rust loop.
pub trait RustForEarly {
    /// The iterator.
    type Iter;
    /// The source's iterator.
    fn rust_iter(&self) -> Self::Iter;
}

impl<T: IntoIterator> RustForEarly for &ForSource<T> {
    type Iter = std::iter::Flatten<std::option::IntoIter<T>>;
    fn rust_iter(&self) -> Self::Iter {
        self.take().into_iter().flatten()
    }
}
