//! The op set, grouped by family. Each family adds methods to [`Tensor`]
//! (or free functions); this module holds the [`Op`] records they append to
//! the graph.
//!
//! [`Tensor`]: crate::Tensor

pub mod constant;
pub mod control;
pub mod elementwise;
pub mod indexing;
pub mod linalg;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod sort;

pub use control::{
    cond, fori_loop, optimization_barrier, while_loop, Carry, CondBuilder, WhileBuilder,
};
pub use elementwise::Scalar;
pub use indexing::{GatherDims, ScatterCombine, ScatterDims};
pub use linalg::{DotDims, Precision};
pub use reduce::ReduceKind;

/// Elementwise ops with one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Expm1,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Cbrt,
    Tanh,
    Logistic,
    Sin,
    Cos,
    Tan,
    Floor,
    Ceil,
    Round,
    Sign,
    Erf,
    Not,
    IsFinite,
    PopCount,
}

/// Elementwise ops with two operands of the same type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    Max,
    Min,
    Atan2,
    And,
    Or,
    Xor,
    ShiftLeft,
    ShiftRightLogical,
    ShiftRightArithmetic,
}

/// Comparison directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// One recorded op with its static attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A literal: raw little-endian bytes (one element means a splat).
    Constant {
        /// The bytes.
        data: Vec<u8>,
    },
    /// `0, 1, 2, ...` along `dim`.
    Iota {
        /// The counting axis.
        dim: usize,
    },
    /// An elementwise op with one operand.
    Unary(UnaryOp),
    /// An elementwise op with two operands.
    Binary(BinaryOp),
    /// An elementwise comparison, giving `pred`.
    Compare(Comparison),
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `clamp(min, x, max)`.
    Clamp,
    /// Element type conversion.
    Convert,
    /// Broadcast: operand axis `i` becomes result axis `dims[i]`.
    BroadcastInDim {
        /// Result axis of each operand axis.
        dims: Vec<usize>,
    },
    /// Same elements, new shape.
    Reshape,
    /// Axis permutation.
    Transpose {
        /// Result axis `i` is operand axis `perm[i]`.
        perm: Vec<usize>,
    },
    /// Static strided slice.
    Slice {
        /// First index per axis.
        start: Vec<usize>,
        /// One past the last index per axis.
        limit: Vec<usize>,
        /// Step per axis.
        strides: Vec<usize>,
    },
    /// Slice at traced start indices (one scalar operand per axis).
    DynamicSlice {
        /// Extent per axis.
        sizes: Vec<usize>,
    },
    /// Overwrite a window at traced start indices.
    DynamicUpdateSlice,
    /// Join along an axis.
    Concatenate {
        /// The axis.
        dim: usize,
    },
    /// Pad with a scalar value (negative low/high crops).
    Pad {
        /// Before each axis.
        low: Vec<i64>,
        /// After each axis.
        high: Vec<i64>,
        /// Between elements.
        interior: Vec<i64>,
    },
    /// Reduce `x` with `init` over `dims`.
    Reduce {
        /// The combiner.
        kind: ReduceKind,
        /// Axes removed.
        dims: Vec<usize>,
    },
    /// Variadic reduce giving (extreme value, its first index) over one axis.
    ArgReduce {
        /// `true` for argmax, `false` for argmin.
        max: bool,
        /// The axis removed.
        dim: usize,
    },
    /// XLA dot_general.
    DotGeneral {
        /// Batch and contracting axes.
        dims: DotDims,
        /// Operand precision.
        precision: Precision,
    },
    /// XLA gather.
    Gather {
        /// Dimension numbers.
        dims: GatherDims,
        /// Window extents.
        slice_sizes: Vec<usize>,
    },
    /// XLA scatter.
    Scatter {
        /// Dimension numbers.
        dims: ScatterDims,
        /// How updates combine with the operand.
        combine: ScatterCombine,
    },
    /// Sort along `dim` by the first operand; other operands are permuted alike.
    Sort {
        /// The axis.
        dim: usize,
        /// Largest first.
        descending: bool,
    },
    /// Largest `k` along the last axis: (values, s32 indices).
    TopK {
        /// How many.
        k: usize,
    },
    /// A loop: regions (cond, body); operands are the carried values.
    While,
    /// A branch: operand is the scalar predicate; regions (then, else).
    If,
    /// Values XLA may not move computation across.
    OptimizationBarrier,
}
