//! A graph as data: numbered values, the instructions that define them
//! (with nested blocks for loops and conditionals) and the outputs. One
//! [`Op`] is one call of the public `tessel_dsl` API, so a program can be
//! traced ([`build`](super::build)), printed as Rust ([`rust`](super::rust))
//! and edited ([`shrink`](super::shrink)).

use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{DType, DotDims, HostTensor, TensorSpec};

/// A value's number: an index into [`Program::specs`].
pub type V = usize;

/// One-operand elementwise ops (the `Tensor` methods of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    /// `-x`.
    Neg,
    /// `x.abs()`.
    Abs,
    /// `x.sqrt()`.
    Sqrt,
    /// `x.floor()`.
    Floor,
    /// `x.ceil()`.
    Ceil,
    /// `x.round()`.
    Round,
    /// `x.sign()`.
    Sign,
    /// `x.logical_not()`.
    Not,
    /// `x.popcount()`.
    PopCount,
    /// `x.is_finite()`.
    IsFinite,
    /// `x.exp()`.
    Exp,
    /// `x.log()`.
    Log,
    /// `x.log1p()`.
    Log1p,
    /// `x.expm1()`.
    Expm1,
    /// `x.tanh()`.
    Tanh,
    /// `x.sigmoid()`.
    Sigmoid,
    /// `x.sin()`.
    Sin,
    /// `x.cos()`.
    Cos,
    /// `x.erf()`.
    Erf,
    /// `x.rsqrt()`.
    Rsqrt,
    /// `x.cbrt()`.
    Cbrt,
    /// `x.tan()`.
    Tan,
}

/// Two-operand elementwise ops (operands broadcast, numpy rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// `x + y`.
    Add,
    /// `x - y`.
    Sub,
    /// `x * y`.
    Mul,
    /// `x / y`.
    Div,
    /// `x % y`.
    Rem,
    /// `x.maximum(y)`.
    Max,
    /// `x.minimum(y)`.
    Min,
    /// `x.and(y)`.
    And,
    /// `x.or(y)`.
    Or,
    /// `x.xor(y)`.
    Xor,
    /// `x.shift_left(y)`.
    ShiftLeft,
    /// `x.shift_right_arithmetic(y)`.
    ShiftRightArithmetic,
    /// `x.shift_right_logical(y)`.
    ShiftRightLogical,
    /// `x.pow(y)`.
    Pow,
    /// `x.atan2(y)`.
    Atan2,
}

/// Comparisons (operands broadcast; the result is `pred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `x.eq(y)`.
    Eq,
    /// `x.ne(y)`.
    Ne,
    /// `x.lt(y)`.
    Lt,
    /// `x.le(y)`.
    Le,
    /// `x.gt(y)`.
    Gt,
    /// `x.ge(y)`.
    Ge,
}

/// Reductions over a list of axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// `x.sum(axes)`.
    Sum,
    /// `x.prod(axes)`.
    Prod,
    /// `x.max(axes)`.
    Max,
    /// `x.min(axes)`.
    Min,
    /// `x.all(axes)`.
    All,
    /// `x.any(axes)`.
    Any,
}

/// The upper bound of a counted loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    /// A number known while tracing.
    Static(i32),
    /// An s32 scalar value, capped at [`MAX_TRIPS`] (`v.minimum(MAX_TRIPS)`).
    Traced(V),
}

/// The most iterations a loop with a traced bound runs: the bound is
/// `minimum`ed with it, so every program ends whatever its data.
pub const MAX_TRIPS: i32 = 4;

/// A nested region: its parameters (bound when it runs), its instructions
/// and the values it returns. Instructions may use any value of the
/// enclosing blocks defined before the block's instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Values bound on entry (a loop's counter and carries; none for a
    /// branch).
    pub params: Vec<V>,
    /// The block's instructions, in order.
    pub insts: Vec<Inst>,
    /// What the block returns.
    pub results: Vec<V>,
}

/// One call of the `tessel_dsl` API.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `Tensor::full(spec.shape, value, spec.dtype)`.
    Full {
        /// The result's type.
        spec: TensorSpec,
        /// Every element.
        value: f64,
    },
    /// `Tensor::iota(spec.shape, dim, spec.dtype)`.
    Iota {
        /// The result's type.
        spec: TensorSpec,
        /// The counting axis.
        dim: usize,
    },
    /// An elementwise op of one value.
    Unary(Unary, V),
    /// An elementwise op of two values.
    Binary(Binary, V, V),
    /// A comparison.
    Compare(Cmp, V, V),
    /// `p.select(on_true, on_false)`.
    Select(V, V, V),
    /// `x.clamp(lo, hi)` (operands in that order: `x`, `lo`, `hi`).
    Clamp(V, V, V),
    /// `x.cast(dtype)`.
    Cast(V, DType),
    /// `x.broadcast_in_dim(shape, dims)`.
    BroadcastInDim(V, Vec<usize>, Vec<usize>),
    /// `x.reshape(shape)`.
    Reshape(V, Vec<usize>),
    /// `x.transpose(perm)`.
    Transpose(V, Vec<usize>),
    /// `x.slice(start, limit, stride)`.
    Slice {
        /// The sliced value.
        x: V,
        /// First index per axis.
        start: Vec<usize>,
        /// End (exclusive) per axis.
        limit: Vec<usize>,
        /// Step per axis.
        stride: Vec<usize>,
    },
    /// `x.pad(Tensor::scalar(value, dtype), low, high, interior)`.
    Pad {
        /// The padded value.
        x: V,
        /// The padding value.
        value: f64,
        /// Padding before each axis (negative: cut).
        low: Vec<i64>,
        /// Padding after each axis (negative: cut).
        high: Vec<i64>,
        /// Padding between elements of each axis.
        interior: Vec<i64>,
    },
    /// `concat(&values, axis)`.
    Concat(Vec<V>, usize),
    /// A reduction over `axes`.
    Reduce(Reduce, V, Vec<usize>),
    /// `x.argmax(axis)` (`true`) or `x.argmin(axis)`.
    Arg {
        /// The searched value.
        x: V,
        /// The searched axis.
        axis: usize,
        /// argmax rather than argmin.
        max: bool,
    },
    /// `x.sort(axis, descending)`, or `x.argsort(..)` when `indices`.
    Sort {
        /// The sorted value.
        x: V,
        /// The sorted axis.
        axis: usize,
        /// Largest first.
        descending: bool,
        /// The permutation (`argsort`) rather than the values.
        indices: bool,
    },
    /// `x.dynamic_slice(&starts, &sizes)`.
    DynamicSlice {
        /// The sliced value.
        x: V,
        /// One s32 scalar per axis.
        starts: Vec<V>,
        /// The window.
        sizes: Vec<usize>,
    },
    /// `x.dynamic_update_slice(update, &starts)`.
    DynamicUpdateSlice {
        /// The updated value.
        x: V,
        /// The window written.
        update: V,
        /// One s32 scalar per axis.
        starts: Vec<V>,
    },
    /// `x.take(indices, axis)`.
    Take {
        /// The gathered value.
        x: V,
        /// s32 indices of any shape.
        indices: V,
        /// The indexed axis.
        axis: usize,
    },
    /// `x.index_update(axis, indices, updates, combine)`.
    IndexUpdate {
        /// The scattered-into value.
        x: V,
        /// The indexed axis.
        axis: usize,
        /// s32 indices of any shape.
        indices: V,
        /// One window per index.
        updates: V,
        /// How an update combines with the element it lands on.
        combine: ScatterCombine,
    },
    /// `lhs.dot_general(rhs, dims, Some(Precision::Highest), out)`.
    Dot {
        /// The left operand.
        lhs: V,
        /// The right operand.
        rhs: V,
        /// Batch and contracting axes.
        dims: DotDims,
        /// The result dtype (the operands' when `None`).
        out: Option<DType>,
    },
    /// `fori_loop(lo, hi, carries, body)`: the body's parameters are the
    /// counter and the carries; its results are the new carries.
    Fori {
        /// The first counter value.
        lo: i32,
        /// The end (exclusive).
        hi: Bound,
        /// The initial carries.
        init: Vec<V>,
        /// The loop body.
        body: Block,
    },
    /// `scan_with(init, xs, ScanOptions::new().length(length).reverse(reverse),
    /// body)`: the body's parameters are the carries and a row of each of
    /// `xs` (whose first extent is `length`); its results are the new
    /// carries and then the step's outputs. The op's results are the final
    /// carries and then the outputs stacked along a new first axis.
    Scan {
        /// The initial carries.
        init: Vec<V>,
        /// The tensors scanned over their first axis.
        xs: Vec<V>,
        /// The number of steps.
        length: usize,
        /// Whether the steps run last to first.
        reverse: bool,
        /// The loop body.
        body: Block,
    },
    /// `while_loop` over a counter (from 0) and the carries, running while
    /// `counter < limit.minimum(MAX_TRIPS)` and `cond` holds; `cond`'s and
    /// `body`'s parameters are the counter and the carries, `cond` returns
    /// a pred scalar and `body` the new carries (the counter is
    /// incremented around it). Its results are the counter and the
    /// carries.
    While {
        /// An s32 scalar.
        limit: V,
        /// The initial carries.
        init: Vec<V>,
        /// The extra condition.
        cond: Block,
        /// The loop body.
        body: Block,
    },
    /// `cond(pred, then, otherwise)` over blocks without parameters.
    Cond {
        /// A pred scalar.
        pred: V,
        /// Runs when `pred` holds.
        then: Block,
        /// Runs otherwise.
        otherwise: Block,
    },
}

/// One instruction: the values it defines (one, or a loop's or branch's
/// several) and its op.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// The values defined, in order.
    pub outs: Vec<V>,
    /// What computes them.
    pub op: Op,
}

/// A value the program returns, and how it is compared: `terms` is 0 for
/// a bit-exact value and otherwise the number of roundings it may differ
/// by (see [`compare`](super::compare)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    /// The returned value.
    pub value: V,
    /// 0: exact; otherwise the tolerance's multiplier.
    pub terms: usize,
}

/// A whole graph: parameters, instructions, outputs, and the type of every
/// value (indexed by value number).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The kernel's parameters, in order.
    pub params: Vec<V>,
    /// The top-level instructions.
    pub insts: Vec<Inst>,
    /// The kernel's results.
    pub outputs: Vec<Output>,
    /// The type of each value (values no longer defined keep theirs).
    pub specs: Vec<TensorSpec>,
}

/// A program with arguments: one fuzzing case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The seed it was generated from.
    pub seed: u64,
    /// The graph.
    pub program: Program,
    /// One tensor per parameter.
    pub args: Vec<HostTensor>,
}

impl Op {
    /// The values this op reads directly (not those its blocks read).
    pub fn operands(&self) -> Vec<V> {
        let mut out = Vec::new();
        self.for_each_operand(&mut |v| out.push(*v));
        out
    }

    /// Applies `f` to every value this op reads directly.
    pub fn for_each_operand(&self, f: &mut dyn FnMut(&V)) {
        let mut copy = self.clone();
        copy.map_operands(&mut |v| f(v));
    }

    /// Applies `f` to every value this op reads directly, in place.
    pub fn map_operands(&mut self, f: &mut dyn FnMut(&mut V)) {
        match self {
            Op::Full { .. } | Op::Iota { .. } => {}
            Op::Unary(_, x)
            | Op::Cast(x, _)
            | Op::BroadcastInDim(x, ..)
            | Op::Reshape(x, _)
            | Op::Transpose(x, _)
            | Op::Slice { x, .. }
            | Op::Pad { x, .. }
            | Op::Reduce(_, x, _)
            | Op::Arg { x, .. }
            | Op::Sort { x, .. } => f(x),
            Op::Binary(_, x, y) | Op::Compare(_, x, y) => {
                f(x);
                f(y);
            }
            Op::Select(x, y, z) | Op::Clamp(x, y, z) => {
                f(x);
                f(y);
                f(z);
            }
            Op::Concat(xs, _) => xs.iter_mut().for_each(f),
            Op::DynamicSlice { x, starts, .. } => {
                f(x);
                starts.iter_mut().for_each(f);
            }
            Op::DynamicUpdateSlice { x, update, starts } => {
                f(x);
                f(update);
                starts.iter_mut().for_each(f);
            }
            Op::Take { x, indices, .. } => {
                f(x);
                f(indices);
            }
            Op::IndexUpdate {
                x,
                indices,
                updates,
                ..
            } => {
                f(x);
                f(indices);
                f(updates);
            }
            Op::Dot { lhs, rhs, .. } => {
                f(lhs);
                f(rhs);
            }
            Op::Fori { hi, init, .. } => {
                if let Bound::Traced(v) = hi {
                    f(v);
                }
                init.iter_mut().for_each(f);
            }
            Op::Scan { init, xs, .. } => {
                init.iter_mut().for_each(&mut *f);
                xs.iter_mut().for_each(f);
            }
            Op::While { limit, init, .. } => {
                f(limit);
                init.iter_mut().for_each(f);
            }
            Op::Cond { pred, .. } => f(pred),
        }
    }

    /// The op's blocks.
    pub fn blocks(&self) -> Vec<&Block> {
        match self {
            Op::Fori { body, .. } | Op::Scan { body, .. } => vec![body],
            Op::While { cond, body, .. } => vec![cond, body],
            Op::Cond {
                then, otherwise, ..
            } => vec![then, otherwise],
            _ => Vec::new(),
        }
    }

    /// The op's blocks, mutably.
    pub fn blocks_mut(&mut self) -> Vec<&mut Block> {
        match self {
            Op::Fori { body, .. } | Op::Scan { body, .. } => vec![body],
            Op::While { cond, body, .. } => vec![cond, body],
            Op::Cond {
                then, otherwise, ..
            } => vec![then, otherwise],
            _ => Vec::new(),
        }
    }
}

impl Inst {
    /// Every value of an enclosing scope this instruction reads: its
    /// operands and what its blocks read from outside themselves.
    pub fn free_uses(&self) -> Vec<V> {
        let mut out = self.op.operands();
        for b in self.op.blocks() {
            out.extend(b.free_uses());
        }
        out
    }

    /// Replaces every read of a value (also inside its blocks) by `f`'s.
    pub fn map_uses(&mut self, f: &mut dyn FnMut(&mut V)) {
        self.op.map_operands(f);
        for b in self.op.blocks_mut() {
            b.map_uses(f);
        }
    }
}

impl Block {
    /// The values defined outside this block that it reads.
    pub fn free_uses(&self) -> Vec<V> {
        let mut defined: Vec<V> = self.params.clone();
        let mut out = Vec::new();
        for inst in &self.insts {
            out.extend(
                inst.free_uses()
                    .into_iter()
                    .filter(|v| !defined.contains(v)),
            );
            defined.extend(&inst.outs);
        }
        out.extend(self.results.iter().filter(|v| !defined.contains(v)));
        out
    }

    /// Replaces every read of a value by `f`'s.
    pub fn map_uses(&mut self, f: &mut dyn FnMut(&mut V)) {
        for inst in &mut self.insts {
            inst.map_uses(f);
        }
        self.results.iter_mut().for_each(f);
    }
}

impl Program {
    /// A new value of type `spec`.
    pub fn fresh(&mut self, spec: TensorSpec) -> V {
        self.specs.push(spec);
        self.specs.len() - 1
    }

    /// The type of `v`.
    pub fn spec(&self, v: V) -> &TensorSpec {
        &self.specs[v]
    }

    /// The number of instructions, counting those in blocks.
    pub fn size(&self) -> usize {
        fn count(insts: &[Inst]) -> usize {
            insts
                .iter()
                .map(|i| 1 + i.op.blocks().iter().map(|b| count(&b.insts)).sum::<usize>())
                .sum()
        }
        count(&self.insts)
    }

    /// Removes the top-level instructions no output needs (and those in
    /// blocks no block result needs), then the parameters nothing reads;
    /// `args`, when given, loses the removed parameters' tensors.
    pub fn prune(&mut self, args: Option<&mut Vec<HostTensor>>) {
        let mut live: Vec<V> = self.outputs.iter().map(|o| o.value).collect();
        prune_insts(&mut self.insts, &mut live);
        let keep: Vec<bool> = self.params.iter().map(|p| live.contains(p)).collect();
        let mut i = 0;
        self.params.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        if let Some(args) = args {
            let mut i = 0;
            args.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
    }
}

/// Drops the instructions of `insts` none of whose results is in `live`,
/// adding what the kept ones read to `live`.
fn prune_insts(insts: &mut Vec<Inst>, live: &mut Vec<V>) {
    let mut kept = Vec::new();
    for mut inst in insts.drain(..).rev() {
        if !inst.outs.iter().any(|v| live.contains(v)) {
            continue;
        }
        for b in inst.op.blocks_mut() {
            let mut inner: Vec<V> = b.results.clone();
            prune_insts(&mut b.insts, &mut inner);
        }
        live.extend(inst.free_uses());
        kept.push(inst);
    }
    kept.reverse();
    *insts = kept;
}
