//! The op set as plain data: each [`Op`] is one XLA operation with its
//! static attributes, as tracing records it and lowering prints it.

use crate::config::Precision;
use crate::dtype::DType;

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
        /// A reduction over the last axis that the kernel asks to have
        /// computed in lanes of 8 first on the backends whose own row
        /// reductions are slow (`lower::split_row_reductions`, applied where
        /// that workaround applies), whatever produces its operand. The
        /// values are those of the plain reduction (for sums, within float
        /// rounding).
        split_rows: bool,
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
    While {
        /// The number of iterations when it is known while tracing (a
        /// `fori_loop` over Rust bounds): reverse-mode autodiff then saves
        /// each iteration's carried values instead of recomputing them.
        trip_count: Option<usize>,
        /// The carried positions that are stacked outputs (a
        /// `tessel::ops::scan::scan`'s `ys`): the body writes one
        /// row of each per iteration with `dynamic_update_slice` (its only
        /// use), every row once, into an initial value of zeros. Their
        /// gradient then needs no carried cotangent: an iteration's row is
        /// read from the result's cotangent. Empty for other loops.
        stacked: std::ops::Range<usize>,
    },
    /// A branch: operand is the scalar predicate; regions (then, else).
    If,
    /// Values XLA may not move computation across.
    OptimizationBarrier,
    /// Combines each device's operand over its group (`psum`, `pmax`,
    /// `pmin`); every device of a group gets the result.
    AllReduce {
        /// The combiner.
        kind: ReduceKind,
        /// The device (replica) groups, each in axis order.
        groups: Vec<Vec<usize>>,
    },
    /// Concatenates the group's operands along `dim`, in group order.
    AllGather {
        /// The axis joined along.
        dim: usize,
        /// The device groups.
        groups: Vec<Vec<usize>>,
    },
    /// Combines the group's operands, then gives the `i`-th device of a
    /// group the `i`-th slice along `dim` (`psum_scatter`).
    ReduceScatter {
        /// The combiner.
        kind: ReduceKind,
        /// The axis split.
        dim: usize,
        /// The device groups.
        groups: Vec<Vec<usize>>,
    },
    /// Splits the operand along `split_dim` into one chunk per group member,
    /// sends chunk `j` to member `j`, and joins what arrives along
    /// `concat_dim`, in group order.
    AllToAll {
        /// The axis split.
        split_dim: usize,
        /// The axis joined along.
        concat_dim: usize,
        /// The device groups.
        groups: Vec<Vec<usize>>,
    },
    /// Sends each device's operand to another: `(source, target)` device
    /// pairs; a device no pair targets gets zeros.
    CollectivePermute {
        /// The pairs.
        pairs: Vec<(usize, usize)>,
    },
    /// This device's index (u32 scalar) among the program's replicas.
    ReplicaId,
    /// A call of the native function registered under `target`
    /// ([`register_ffi`](crate::host::register_ffi)) on the operands, with
    /// static attributes (sorted by name); its results are the node's.
    CustomCall {
        /// The registered function's name.
        target: String,
        /// The call's attributes, sorted by name.
        attrs: Vec<(String, crate::host::FfiAttr)>,
    },
}

/// The combiner of a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// `a + b`, starting at 0.
    Sum,
    /// `a * b`, starting at 1.
    Prod,
    /// `max(a, b)`, starting at the lowest value.
    Max,
    /// `min(a, b)`, starting at the highest value.
    Min,
    /// `a && b` over `pred` (or bitwise and), starting at true (all bits set).
    And,
    /// `a || b` over `pred` (or bitwise or), starting at false.
    Or,
}

impl ReduceKind {
    /// The identity element for `dtype`.
    pub fn init(self, dtype: DType) -> f64 {
        match self {
            ReduceKind::Sum | ReduceKind::Or => 0.0,
            ReduceKind::Prod => 1.0,
            // All bits set: -1 for signed integers, the maximum for unsigned.
            ReduceKind::And if dtype.is_integer() => {
                if dtype.is_unsigned() {
                    highest(dtype)
                } else {
                    -1.0
                }
            }
            ReduceKind::And => 1.0,
            ReduceKind::Max => lowest(dtype),
            ReduceKind::Min => highest(dtype),
        }
    }
}

fn lowest(d: DType) -> f64 {
    match d {
        DType::S8 => i8::MIN as f64,
        DType::S16 => i16::MIN as f64,
        DType::S32 => i32::MIN as f64,
        DType::S64 => i64::MIN as f64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Pred => 0.0,
        DType::F8E4M3FN => -448.0,
        _ => f64::NEG_INFINITY,
    }
}

fn highest(d: DType) -> f64 {
    match d {
        DType::S8 => i8::MAX as f64,
        DType::S16 => i16::MAX as f64,
        DType::S32 => i32::MAX as f64,
        DType::S64 => i64::MAX as f64,
        DType::U8 => u8::MAX as f64,
        DType::U16 => u16::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::U64 => u64::MAX as f64,
        DType::Pred => 1.0,
        DType::F8E4M3FN => 448.0,
        _ => f64::INFINITY,
    }
}

/// Batch and contracting axes of a `dot_general`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotDims {
    /// Batch axes of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch axes of the right operand (paired with `lhs_batch`).
    pub rhs_batch: Vec<usize>,
    /// Contracted axes of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracted axes of the right operand (paired with `lhs_contract`).
    pub rhs_contract: Vec<usize>,
}

/// Dimension numbers of an XLA gather.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherDims {
    /// Result axes that hold the (non-collapsed) slice axes.
    pub offset_dims: Vec<usize>,
    /// Operand axes whose slice extent is 1 and which are dropped.
    pub collapsed_slice_dims: Vec<usize>,
    /// Operand axis that each index-vector component addresses.
    pub start_index_map: Vec<usize>,
    /// The axis of `indices` holding index vectors (`== rank` for an implicit trailing 1).
    pub index_vector_dim: usize,
}

/// Dimension numbers of an XLA scatter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterDims {
    /// Axes of `updates` that are window axes.
    pub update_window_dims: Vec<usize>,
    /// Operand axes of extent-1 windows that `updates` omits.
    pub inserted_window_dims: Vec<usize>,
    /// Operand axis that each index-vector component addresses.
    pub scatter_dims_to_operand_dims: Vec<usize>,
    /// The axis of `indices` holding index vectors (`== rank` for an implicit trailing 1).
    pub index_vector_dim: usize,
}

/// How scattered updates combine with the operand's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterCombine {
    /// Replace (with duplicate indices, one update wins).
    Set,
    /// Add.
    Add,
    /// Multiply.
    Mul,
    /// Keep the larger.
    Max,
    /// Keep the smaller.
    Min,
}
