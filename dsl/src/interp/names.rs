//! The StableHLO name of each op (without the dialect prefix), as findings
//! and errors name it.

use crate::ir::{BinaryOp, Op, UnaryOp};

/// The name of `op`: `add`, `dynamic_slice`, `while`, ...
pub(crate) fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Constant { .. } => "constant",
        Op::Iota { .. } => "iota",
        Op::Unary(u) => unary(*u),
        Op::Binary(b) => binary(*b),
        Op::Compare(_) => "compare",
        Op::Select => "select",
        Op::Clamp => "clamp",
        Op::Convert => "convert",
        Op::BroadcastInDim { .. } => "broadcast_in_dim",
        Op::Reshape => "reshape",
        Op::Transpose { .. } => "transpose",
        Op::Slice { .. } => "slice",
        Op::DynamicSlice { .. } => "dynamic_slice",
        Op::DynamicUpdateSlice => "dynamic_update_slice",
        Op::Concatenate { .. } => "concatenate",
        Op::Pad { .. } => "pad",
        Op::Reduce { .. } | Op::ArgReduce { .. } => "reduce",
        Op::DotGeneral { .. } => "dot_general",
        Op::Gather { .. } => "gather",
        Op::Scatter { .. } => "scatter",
        Op::Sort { .. } => "sort",
        Op::TopK { .. } => "top_k",
        Op::While { .. } => "while",
        Op::If => "if",
        Op::OptimizationBarrier => "optimization_barrier",
    }
}

fn unary(op: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match op {
        Neg => "negate",
        Abs => "abs",
        Exp => "exponential",
        Expm1 => "exponential_minus_one",
        Log => "log",
        Log1p => "log_plus_one",
        Sqrt => "sqrt",
        Rsqrt => "rsqrt",
        Cbrt => "cbrt",
        Tanh => "tanh",
        Logistic => "logistic",
        Sin => "sine",
        Cos => "cosine",
        Tan => "tan",
        Floor => "floor",
        Ceil => "ceil",
        Round => "round_nearest_even",
        Sign => "sign",
        Erf => "erf",
        Not => "not",
        IsFinite => "is_finite",
        PopCount => "popcnt",
    }
}

fn binary(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Add => "add",
        Sub => "subtract",
        Mul => "multiply",
        Div => "divide",
        Rem => "remainder",
        Pow => "power",
        Max => "maximum",
        Min => "minimum",
        Atan2 => "atan2",
        And => "and",
        Or => "or",
        Xor => "xor",
        ShiftLeft => "shift_left",
        ShiftRightLogical => "shift_right_logical",
        ShiftRightArithmetic => "shift_right_arithmetic",
    }
}
