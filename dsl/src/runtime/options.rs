//! A hand-serialized `xla.CompileOptionsProto`.
//!
//! Only what tessel sets is encoded: field 3 `executable_build_options`
//! { 4 `num_replicas`, 5 `num_partitions`, 6 `use_spmd_partitioning` } and
//! field 7 `env_option_overrides` (a map from `DebugOptions` field names to
//! `OptionOverrideProto { 1 string_field | 2 bool_field }`), which XLA applies
//! by name (a string sets an enum by its value name).
//! The bytes are never empty: XLA aborts the process on empty compile options.

/// Appends `value` as a protobuf base-128 varint.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a varint field (wire type 0).
fn field_varint(out: &mut Vec<u8>, field: u32, value: u64) {
    varint(out, u64::from(field) << 3);
    varint(out, value);
}

/// Appends a length-delimited field (wire type 2).
fn field_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    varint(out, (u64::from(field) << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The value of one `DebugOptions` override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OptionValue {
    /// A boolean field.
    Bool(bool),
    /// A string field, or an enum field by its value name.
    Str(&'static str),
}

/// Serialized compile options for `num_replicas` × `num_partitions`
/// (both at least 1); SPMD partitioning is on when `num_partitions > 1`;
/// each `(name, value)` of `overrides` sets a `DebugOptions` field.
pub(crate) fn compile_options(
    num_replicas: usize,
    num_partitions: usize,
    overrides: &[(&str, OptionValue)],
) -> Vec<u8> {
    let mut build = Vec::new();
    field_varint(&mut build, 4, num_replicas as u64);
    field_varint(&mut build, 5, num_partitions as u64);
    if num_partitions > 1 {
        field_varint(&mut build, 6, 1);
    }
    let mut out = Vec::new();
    field_bytes(&mut out, 3, &build);
    for (name, value) in overrides {
        let mut value_proto = Vec::new();
        match value {
            OptionValue::Str(text) => field_bytes(&mut value_proto, 1, text.as_bytes()),
            OptionValue::Bool(flag) => field_varint(&mut value_proto, 2, u64::from(*flag)),
        }
        let mut entry = Vec::new();
        field_bytes(&mut entry, 1, name.as_bytes());
        field_bytes(&mut entry, 2, &value_proto);
        field_bytes(&mut out, 7, &entry);
    }
    out
}

/// The `DebugOptions` tessel sets for `program_text` on a platform.
///
/// On CPU, min/max keep NaN (XLA's CPU default drops NaN in max/min
/// reductions). A CPU program with a bf16 × bf16 dot also hands its dots to
/// XNNPACK, whose bf16 GEMM uses the `AVX512-BF16` dot-product instructions
/// where the processor has them (XLA's own emitter converts bf16 to f32
/// first, so bf16 operands would gain only memory traffic); f32 programs keep
/// XLA's emitter, which XNNPACK does not beat on f32 here.
pub(crate) fn platform_overrides(
    platform: &str,
    program_text: &str,
) -> Vec<(&'static str, OptionValue)> {
    match platform {
        "cpu" => {
            let mut options = vec![("xla_cpu_enable_fast_min_max", OptionValue::Bool(false))];
            if wants_xnn_dots(program_text) {
                options.push((
                    "xla_cpu_experimental_xnn_fusion_type",
                    OptionValue::Str("LIBRARY_FUSION_TYPE_DOT"),
                ));
            }
            options
        }
        _ => Vec::new(),
    }
}

/// Whether `program_text` (StableHLO, generic or pretty form) has a
/// bf16 × bf16 `dot_general` and every such dot keeps an f32 result.
///
/// XNNPACK rounds a bf16 dot output toward zero (up to one bf16 ulp off the
/// correctly rounded f32 sum), and XLA folds `convert(dot) -> bf16` into a
/// bf16-output dot; so a program that narrows a bf16 dot's result to bf16
/// keeps XLA's own emitter, which rounds once, to nearest.
fn wants_xnn_dots(program_text: &str) -> bool {
    let mut dots = Vec::new();
    let mut narrowed = std::collections::HashSet::new();
    for line in program_text.lines() {
        if line.contains("stablehlo.dot_general") {
            dots.extend(bf16_dot(line));
        } else if let Some(name) = narrowed_value(line) {
            narrowed.insert(name);
        }
    }
    !dots.is_empty()
        && dots
            .iter()
            .all(|&(result, f32_out)| f32_out && !narrowed.contains(result))
}

/// For a bf16 × bf16 dot line: its result name and whether the result is f32.
fn bf16_dot(line: &str) -> Option<(&str, bool)> {
    let result = line.trim_start().split(" = ").next()?.trim();
    let (_, types) = line.rsplit_once(" : (")?;
    let (operands, out) = types.split_once(") ->")?;
    let mut tensors = operands.split("tensor<").skip(1);
    let both_bf16 = matches!(
        (tensors.next(), tensors.next()),
        (Some(a), Some(b)) if element_type(a) == "bf16" && element_type(b) == "bf16"
    );
    let out = out.split("tensor<").nth(1)?;
    both_bf16.then_some((result, element_type(out) == "f32"))
}

/// For a line converting a value to a bf16 or f16 tensor: that value's name.
fn narrowed_value(line: &str) -> Option<&str> {
    let name = if let Some((_, rest)) = line.split_once("\"stablehlo.convert\"(") {
        rest.split(')').next()?
    } else {
        let (_, rest) = line.split_once("stablehlo.convert ")?;
        rest.split_whitespace().next()?
    };
    let out = line.rsplit("tensor<").next()?;
    matches!(element_type(out), "bf16" | "f16").then_some(name)
}

/// The element type of a `tensor<..>` body (the text after `tensor<`).
fn element_type(tensor_type: &str) -> &str {
    let body = tensor_type.split('>').next().unwrap_or("");
    body.rsplit('x').next().unwrap_or(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_options_match_the_measured_bytes() {
        assert_eq!(
            compile_options(1, 1, &[]),
            [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01]
        );
        assert_eq!(
            compile_options(1, 2, &[]),
            [0x1a, 0x06, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01]
        );
    }

    #[test]
    fn overrides_are_map_entries() {
        let bytes = compile_options(1, 1, &[("ab", OptionValue::Bool(false))]);
        assert_eq!(&bytes[..6], [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01]);
        assert_eq!(
            &bytes[6..],
            [0x3a, 0x08, 0x0a, 0x02, b'a', b'b', 0x12, 0x02, 0x10, 0x00]
        );
    }

    #[test]
    fn string_overrides_use_the_string_field() {
        let bytes = compile_options(1, 1, &[("ab", OptionValue::Str("c"))]);
        assert_eq!(
            &bytes[6..],
            [0x3a, 0x09, 0x0a, 0x02, b'a', b'b', 0x12, 0x03, 0x0a, 0x01, b'c']
        );
    }

    #[test]
    fn xnn_dots_only_for_bf16_dots_with_f32_results() {
        let generic = r#"%v2 = "stablehlo.dot_general"(%v0, %v1) {x} : (tensor<64x32xbf16>, tensor<32x16xbf16>) -> tensor<64x16xf32> loc("a":1:2)"#;
        assert!(wants_xnn_dots(generic));
        let pretty = "%2 = stablehlo.dot_general %0, %1, contracting_dims = [1] x [0] : (tensor<4x8xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>";
        assert!(wants_xnn_dots(pretty));
        let mixed = generic.replace("32x16xbf16", "32x16xf32");
        assert!(!wants_xnn_dots(&mixed));
        assert!(!wants_xnn_dots(&generic.replace("bf16", "f32")));
        let bf16_out = generic.replace("64x16xf32", "64x16xbf16");
        assert!(!wants_xnn_dots(&bf16_out));
        let narrowed = format!(
            "{generic}\n%v3 = \"stablehlo.convert\"(%v2) : (tensor<64x16xf32>) -> tensor<64x16xbf16>"
        );
        assert!(!wants_xnn_dots(&narrowed));
        let other = narrowed.replace("convert\"(%v2)", "convert\"(%v9)");
        assert!(wants_xnn_dots(&other));
        assert!(!wants_xnn_dots("%v1 = \"stablehlo.add\"(%v0, %v0) : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>"));
        let cpu = platform_overrides("cpu", generic);
        assert!(cpu
            .iter()
            .any(|(name, _)| *name == "xla_cpu_experimental_xnn_fusion_type"));
        assert_eq!(platform_overrides("cpu", &narrowed).len(), 1);
        assert!(platform_overrides("cuda", generic).is_empty());
    }

    #[test]
    fn large_counts_use_multi_byte_varints() {
        let bytes = compile_options(1, 300, &[]);
        assert_eq!(
            bytes,
            [0x1a, 0x07, 0x20, 0x01, 0x28, 0xac, 0x02, 0x30, 0x01]
        );
    }
}
