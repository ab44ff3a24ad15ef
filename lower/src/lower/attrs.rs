//! Per-op names, attributes and regions in StableHLO's generic syntax.

use crate::ir::NodeId;
use crate::ir::{BinaryOp, Comparison, Op, ReduceKind, ScatterCombine, UnaryOp};
use crate::lower::{
    collectives, combiner_region, quote, regions, scalar_type, Printer, RegionText,
};
use tessel_ir::host::{FfiAttr, FFI_NAME_ATTR, FFI_TARGET};

fn i64_array(v: &[impl ToString]) -> String {
    if v.is_empty() {
        "array<i64>".to_string()
    } else {
        let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        format!("array<i64: {}>", items.join(", "))
    }
}

fn list(v: &[usize]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// `name = [..]` entries of a dimension-numbers attribute, skipping empty lists.
fn dims_attr(fields: &[(&str, &[usize])], scalar: Option<(&str, usize)>) -> String {
    let mut parts: Vec<String> = fields
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| format!("{n} = {}", list(v)))
        .collect();
    if let Some((n, v)) = scalar {
        parts.push(format!("{n} = {v}"));
    }
    parts.join(", ")
}

pub(crate) fn unary_name(op: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match op {
        Neg => "stablehlo.negate",
        Abs => "stablehlo.abs",
        Exp => "stablehlo.exponential",
        Expm1 => "stablehlo.exponential_minus_one",
        Log => "stablehlo.log",
        Log1p => "stablehlo.log_plus_one",
        Sqrt => "stablehlo.sqrt",
        Rsqrt => "stablehlo.rsqrt",
        Cbrt => "stablehlo.cbrt",
        Tanh => "stablehlo.tanh",
        Logistic => "stablehlo.logistic",
        Sin => "stablehlo.sine",
        Cos => "stablehlo.cosine",
        Tan => "stablehlo.tan",
        Floor => "stablehlo.floor",
        Ceil => "stablehlo.ceil",
        Round => "stablehlo.round_nearest_even",
        Sign => "stablehlo.sign",
        Erf => "chlo.erf",
        Not => "stablehlo.not",
        IsFinite => "stablehlo.is_finite",
        PopCount => "stablehlo.popcnt",
    }
}

pub(crate) fn binary_name(op: BinaryOp) -> &'static str {
    use BinaryOp::*;
    match op {
        Add => "stablehlo.add",
        Sub => "stablehlo.subtract",
        Mul => "stablehlo.multiply",
        Div => "stablehlo.divide",
        Rem => "stablehlo.remainder",
        Pow => "stablehlo.power",
        Max => "stablehlo.maximum",
        Min => "stablehlo.minimum",
        Atan2 => "stablehlo.atan2",
        And => "stablehlo.and",
        Or => "stablehlo.or",
        Xor => "stablehlo.xor",
        ShiftLeft => "stablehlo.shift_left",
        ShiftRightLogical => "stablehlo.shift_right_logical",
        ShiftRightArithmetic => "stablehlo.shift_right_arithmetic",
    }
}

pub(crate) fn compare_attrs(dir: Comparison, compare_type: &str) -> String {
    let d = match dir {
        Comparison::Eq => "EQ",
        Comparison::Ne => "NE",
        Comparison::Lt => "LT",
        Comparison::Le => "LE",
        Comparison::Gt => "GT",
        Comparison::Ge => "GE",
    };
    format!(
        "comparison_direction = #stablehlo<comparison_direction {d}>, compare_type = #stablehlo<comparison_type {compare_type}>"
    )
}

/// The dense literal of a constant.
fn dense(p: &Printer, node: NodeId, data: &[u8]) -> String {
    let spec = &p.g.values[p.g.nodes[node].results[0]].spec;
    if spec.dtype.is_pred() {
        let vals: Vec<bool> = data.iter().map(|&b| b != 0).collect();
        if vals.len() == 1 {
            return format!("dense<{}>", vals[0]);
        }
        return format!("dense<{}>", nested(&vals, &spec.shape));
    }
    let mut hex = String::with_capacity(data.len() * 2 + 2);
    hex.push_str("0x");
    for b in data {
        hex.push_str(&format!("{b:02X}"));
    }
    format!("dense<\"{hex}\">")
}

fn nested(vals: &[bool], shape: &[usize]) -> String {
    match shape.split_first() {
        None => vals.first().copied().unwrap_or(false).to_string(),
        Some((&n, rest)) => {
            let inner: usize = rest.iter().product();
            let parts: Vec<String> = (0..n)
                .map(|i| nested(&vals[i * inner..(i + 1) * inner], rest))
                .collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// (op name, attribute dictionary body, region texts) of one node.
pub(crate) fn op_parts(
    p: &mut Printer,
    id: NodeId,
    indent: usize,
) -> (String, String, Vec<RegionText>) {
    let g = p.g;
    let node = &g.nodes[id];
    let operand_spec = |i: usize| &g.values[node.operands[i]].spec;
    let result_spec = |i: usize| &g.values[node.results[i]].spec;
    let s = |x: &str| x.to_string();
    match &node.op {
        Op::Constant { data } => {
            let ty = result_spec(0).mlir_type();
            (
                s("stablehlo.constant"),
                format!("value = {} : {ty}", dense(p, id, data)),
                vec![],
            )
        }
        Op::Iota { dim } => (
            s("stablehlo.iota"),
            format!("iota_dimension = {dim} : i64"),
            vec![],
        ),
        Op::Unary(u) => (s(unary_name(*u)), String::new(), vec![]),
        Op::Binary(b) => (s(binary_name(*b)), String::new(), vec![]),
        Op::Compare(dir) => {
            let ct = operand_spec(0).dtype.comparison_type();
            (s("stablehlo.compare"), compare_attrs(*dir, ct), vec![])
        }
        Op::Select => (s("stablehlo.select"), String::new(), vec![]),
        // Printed as a maximum and a minimum (`Printer::clamp`), never as this op.
        Op::Clamp => (s("stablehlo.clamp"), String::new(), vec![]),
        Op::Convert => (s("stablehlo.convert"), String::new(), vec![]),
        Op::BroadcastInDim { dims } => (
            s("stablehlo.broadcast_in_dim"),
            format!("broadcast_dimensions = {}", i64_array(dims)),
            vec![],
        ),
        Op::Reshape => (s("stablehlo.reshape"), String::new(), vec![]),
        Op::Transpose { perm } => (
            s("stablehlo.transpose"),
            format!("permutation = {}", i64_array(perm)),
            vec![],
        ),
        Op::Slice {
            start,
            limit,
            strides,
        } => (
            s("stablehlo.slice"),
            format!(
                "start_indices = {}, limit_indices = {}, strides = {}",
                i64_array(start),
                i64_array(limit),
                i64_array(strides)
            ),
            vec![],
        ),
        Op::DynamicSlice { sizes } => (
            s("stablehlo.dynamic_slice"),
            format!("slice_sizes = {}", i64_array(sizes)),
            vec![],
        ),
        Op::DynamicUpdateSlice => (s("stablehlo.dynamic_update_slice"), String::new(), vec![]),
        Op::Concatenate { dim } => (
            s("stablehlo.concatenate"),
            format!("dimension = {dim} : i64"),
            vec![],
        ),
        Op::Pad {
            low,
            high,
            interior,
        } => (
            s("stablehlo.pad"),
            format!(
                "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
                i64_array(low),
                i64_array(high),
                i64_array(interior)
            ),
            vec![],
        ),
        Op::Reduce { kind, dims, .. } => {
            let st = scalar_type(operand_spec(0));
            let r = combiner_region(p, reduce_combiner(*kind), &st, indent);
            (
                s("stablehlo.reduce"),
                format!("dimensions = {}", i64_array(dims)),
                vec![RegionText::Text(r)],
            )
        }
        Op::ArgReduce { max, dim } => {
            let spec = operand_spec(0).clone();
            let r = regions::arg_reduce_region(p, *max, &spec, indent);
            (
                s("stablehlo.reduce"),
                format!("dimensions = {}", i64_array(&[*dim])),
                vec![RegionText::Text(r)],
            )
        }
        Op::DotGeneral { dims, precision } => {
            let dn = dims_attr(
                &[
                    ("lhs_batching_dimensions", &dims.lhs_batch),
                    ("rhs_batching_dimensions", &dims.rhs_batch),
                    ("lhs_contracting_dimensions", &dims.lhs_contract),
                    ("rhs_contracting_dimensions", &dims.rhs_contract),
                ],
                None,
            );
            let pr = precision.mlir_name();
            (
                s("stablehlo.dot_general"),
                format!(
                    "dot_dimension_numbers = #stablehlo.dot<{dn}>, precision_config = [#stablehlo<precision {pr}>, #stablehlo<precision {pr}>]"
                ),
                vec![],
            )
        }
        Op::Gather { dims, slice_sizes } => {
            let dn = dims_attr(
                &[
                    ("offset_dims", &dims.offset_dims),
                    ("collapsed_slice_dims", &dims.collapsed_slice_dims),
                    ("start_index_map", &dims.start_index_map),
                ],
                Some(("index_vector_dim", dims.index_vector_dim)),
            );
            (
                s("stablehlo.gather"),
                format!(
                    "dimension_numbers = #stablehlo.gather<{dn}>, slice_sizes = {}, indices_are_sorted = false",
                    i64_array(slice_sizes)
                ),
                vec![],
            )
        }
        Op::Scatter { dims, combine } => {
            let dn = dims_attr(
                &[
                    ("update_window_dims", &dims.update_window_dims),
                    ("inserted_window_dims", &dims.inserted_window_dims),
                    (
                        "scatter_dims_to_operand_dims",
                        &dims.scatter_dims_to_operand_dims,
                    ),
                ],
                Some(("index_vector_dim", dims.index_vector_dim)),
            );
            let st = scalar_type(operand_spec(0));
            let comb = match combine {
                ScatterCombine::Set => None,
                ScatterCombine::Add => Some("stablehlo.add"),
                ScatterCombine::Mul => Some("stablehlo.multiply"),
                ScatterCombine::Max => Some("stablehlo.maximum"),
                ScatterCombine::Min => Some("stablehlo.minimum"),
            };
            let r = regions::scatter_region(p, comb, &st, indent);
            (
                s("stablehlo.scatter"),
                format!("scatter_dimension_numbers = #stablehlo.scatter<{dn}>, indices_are_sorted = false, unique_indices = false"),
                vec![RegionText::Text(r)],
            )
        }
        Op::Sort { dim, descending } => {
            let specs: Vec<_> = node
                .operands
                .iter()
                .map(|&v| g.values[v].spec.clone())
                .collect();
            let r = regions::sort_region(p, &specs, *descending, indent);
            (
                s("stablehlo.sort"),
                format!("dimension = {dim} : i64, is_stable = true"),
                vec![RegionText::Text(r)],
            )
        }
        Op::TopK { k } => (s("chlo.top_k"), format!("k = {k} : i64"), vec![]),
        Op::While { .. } => {
            let texts = node.regions.iter().map(|&r| RegionText::Graph(r)).collect();
            (s("stablehlo.while"), String::new(), texts)
        }
        Op::If => {
            let texts = node.regions.iter().map(|&r| RegionText::Graph(r)).collect();
            (s("stablehlo.if"), String::new(), texts)
        }
        Op::OptimizationBarrier => (s("stablehlo.optimization_barrier"), String::new(), vec![]),
        Op::CustomCall { target, attrs } => (
            s("stablehlo.custom_call"),
            custom_call_attrs(target, attrs),
            vec![],
        ),
        Op::AllReduce { .. }
        | Op::AllGather { .. }
        | Op::ReduceScatter { .. }
        | Op::AllToAll { .. }
        | Op::CollectivePermute { .. }
        | Op::ReplicaId => {
            let operand = node.operands.first().map(|&v| &g.values[v].spec);
            collectives::collective_parts(p, &node.op, operand, indent).unwrap_or_default()
        }
    }
}

/// A native call's attributes: XLA's typed FFI (`api_version = 4`) at the
/// one handler tessel registers, the function's name and the call's
/// attributes in `backend_config` (floats by their bits, so none is
/// rounded).
fn custom_call_attrs(target: &str, attrs: &[(String, FfiAttr)]) -> String {
    let mut config = vec![format!("{FFI_NAME_ATTR} = {}", quote(target))];
    for (name, a) in attrs {
        let value = match a {
            FfiAttr::F64(v) => format!("0x{:016X} : f64", v.to_bits()),
            FfiAttr::I64(v) => format!("{v} : i64"),
            FfiAttr::Str(v) => quote(v),
        };
        config.push(format!("{name} = {value}"));
    }
    format!(
        "call_target_name = {}, api_version = 4 : i32, backend_config = {{{}}}",
        quote(FFI_TARGET),
        config.join(", ")
    )
}

pub(crate) fn reduce_combiner(kind: ReduceKind) -> &'static str {
    match kind {
        ReduceKind::Sum => "stablehlo.add",
        ReduceKind::Prod => "stablehlo.multiply",
        ReduceKind::Max => "stablehlo.maximum",
        ReduceKind::Min => "stablehlo.minimum",
        ReduceKind::And => "stablehlo.and",
        ReduceKind::Or => "stablehlo.or",
    }
}
