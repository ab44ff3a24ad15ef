//! A hand-serialized `xla.CompileOptionsProto`.
//!
//! Only what tessel sets is encoded: field 3 `executable_build_options`
//! { 4 `num_replicas`, 5 `num_partitions`, 6 `use_spmd_partitioning` }.
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

/// Serialized compile options for `num_replicas` × `num_partitions`
/// (both at least 1); SPMD partitioning is on when `num_partitions > 1`.
pub(crate) fn compile_options(num_replicas: usize, num_partitions: usize) -> Vec<u8> {
    let mut build = Vec::new();
    field_varint(&mut build, 4, num_replicas as u64);
    field_varint(&mut build, 5, num_partitions as u64);
    if num_partitions > 1 {
        field_varint(&mut build, 6, 1);
    }
    let mut out = Vec::new();
    field_bytes(&mut out, 3, &build);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_options_match_the_measured_bytes() {
        assert_eq!(compile_options(1, 1), [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01]);
        assert_eq!(
            compile_options(1, 2),
            [0x1a, 0x06, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01]
        );
    }

    #[test]
    fn large_counts_use_multi_byte_varints() {
        let bytes = compile_options(1, 300);
        assert_eq!(
            bytes,
            [0x1a, 0x07, 0x20, 0x01, 0x28, 0xac, 0x02, 0x30, 0x01]
        );
    }
}
