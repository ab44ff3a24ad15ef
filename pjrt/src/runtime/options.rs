//! A hand-serialized `xla.CompileOptionsProto`.
//!
//! Only what tessel sets is encoded: field 3 `executable_build_options`
//! { 4 `num_replicas`, 5 `num_partitions`, 6 `use_spmd_partitioning` } and
//! field 7 `env_option_overrides` (a map from `DebugOptions` field names to
//! `OptionOverrideProto { 1 string_field | 2 bool_field | 3 int_field }`), which XLA applies
//! by name (a string sets an enum by its value name).
//! The bytes are never empty: XLA aborts the process on empty compile options.

use super::Workaround;
use crate::config::Platform;
use crate::lower::CompileHints;

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
    /// An integer field (non-negative here).
    Int(u32),
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
            OptionValue::Int(n) => field_varint(&mut value_proto, 3, u64::from(*n)),
        }
        let mut entry = Vec::new();
        field_bytes(&mut entry, 1, name.as_bytes());
        field_bytes(&mut entry, 2, &value_proto);
        field_bytes(&mut out, 7, &entry);
    }
    out
}

/// What the host processor has that decides which library runs a dot and
/// how wide XLA's vector code is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostCpu {
    /// AMX tiles with bf16 dot products (Intel Xeon from Sapphire Rapids on).
    pub(crate) amx_bf16: bool,
}

impl HostCpu {
    /// 512-bit vectors at no cost in clock speed: read as AMX being there
    /// (Intel Xeon from Sapphire Rapids on, whose AVX-512 does not slow the
    /// core down as Skylake's did, the reason XLA prefers 256-bit vectors).
    pub(crate) fn wide_vectors(self) -> bool {
        self.amx_bf16
    }

    /// The processor this process runs on (read once, with `cpuid`).
    pub(crate) fn detect() -> HostCpu {
        static HOST: std::sync::OnceLock<HostCpu> = std::sync::OnceLock::new();
        *HOST.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{__cpuid, __cpuid_count};
                // Leaf 7 (structured extended features) exists when the
                // highest basic leaf is at least 7; AMX-BF16 is EDX bit 22.
                if __cpuid(0).eax >= 7 {
                    return HostCpu {
                        amx_bf16: (__cpuid_count(7, 0).edx >> 22) & 1 == 1,
                    };
                }
            }
            HostCpu::default()
        })
    }
}

/// The `DebugOptions` tessel sets for a program with `hints` on `platform`,
/// run by a host processor with `cpu`, on a plugin to which the
/// workarounds `applies` accepts apply (see
/// [`PluginIdentity::applies`](super::PluginIdentity::applies): on a plugin
/// build they were not measured on, only the first below is set).
///
/// On CPU:
/// - min/max keep NaN (XLA's CPU default drops NaN in max/min reductions);
/// - ([`Workaround::YnnpackReductions`]) reductions go to YNNPACK (`LIBRARY_FUSION_TYPE_REDUCE`), as JAX's
///   newer XLA does by default. XLA's own emitter splits a long row
///   reduction into a reduce-window and a reduce and cannot fuse what feeds
///   the window; YNNPACK's row reductions made flash attention 1.3–1.5×
///   faster on the 2-core machine (S = 2048 and 8192), with NaN and ±inf
///   kept as before. (YNNPACK's elementwise fusions are left off: with them
///   the plugin crashed.)
/// - ([`Workaround::LibraryDots`]) a program whose bf16 × bf16 dots all keep f32 results
///   ([`CompileHints::bf16_dots_keep_f32`]) also hands its dots to a
///   library, whose bf16 GEMMs use the processor's bf16 instructions (XLA's
///   own emitter converts bf16 to f32 first, so bf16 operands would gain
///   only memory traffic). With YNNPACK's reductions on and its dots off,
///   such a dot fell back to a converted f32 GEMM, twice as slow.
///   - Where the processor has AMX-BF16, to YNNPACK alone: its AMX GEMM ran
///     a 2048³ product in 14.6–16.6 ms where XNNPACK, which takes the dots
///     when both are asked, ran its `AVX512-BF16` kernel in 84–93 ms. There
///     bf16 dots with bf16 results go to YNNPACK too
///     ([`CompileHints::bf16_dots`]): it rounds them to nearest, where
///     XNNPACK rounds toward zero (so elsewhere they keep XLA's emitter).
///   - Elsewhere, to XNNPACK and YNNPACK (XNNPACK takes them): on an AMD
///     processor with `AVX512-BF16` this matched JAX's bf16 `jnp.dot`.
///
///   f32 programs keep XLA's dot emitter, which neither library beats on
///   f32 here.
/// - ([`Workaround::LibraryDots`]) a program with 8-bit integer dots ([`CompileHints::int8_dots`]) hands
///   its dots to YNNPACK: a 2048³ s8 × s8 → s32 product took 558 ms with
///   XLA's emitter and 10 ms there (on the Intel machine, with AMX).
/// - ([`Workaround::WideVectors`]) where 512-bit vectors cost no clock speed ([`HostCpu::wide_vectors`]),
///   XLA's own loops use them (`xla_cpu_prefer_vector_width = 512`; XLA's
///   default is 256). On the Intel machine a 4096 × 1024 `log_softmax`
///   went from 3.3 to 2.2 ms, a `softmax` from 2.6 to 2.4 ms and flash
///   attention at S = 2048 from 46.7 to 43–45 ms; norms, GEMMs and the
///   paged decode step did not change.
pub(crate) fn platform_overrides(
    platform: Option<Platform>,
    hints: &CompileHints,
    cpu: HostCpu,
    applies: impl Fn(Workaround) -> bool,
) -> Vec<(&'static str, OptionValue)> {
    match platform {
        Some(Platform::Cpu) => {
            let mut options = vec![("xla_cpu_enable_fast_min_max", OptionValue::Bool(false))];
            if cpu.wide_vectors() && applies(Workaround::WideVectors) {
                options.push(("xla_cpu_prefer_vector_width", OptionValue::Int(512)));
            }
            let library_dots = applies(Workaround::LibraryDots);
            let amx_bf16 = cpu.amx_bf16 && hints.bf16_dots;
            let dots = library_dots && (hints.bf16_dots_keep_f32 || hints.int8_dots || amx_bf16);
            if dots && hints.bf16_dots_keep_f32 && !cpu.amx_bf16 {
                options.push((
                    "xla_cpu_experimental_xnn_fusion_type",
                    OptionValue::Str("LIBRARY_FUSION_TYPE_DOT"),
                ));
            }
            let ynn = ynn_kinds(
                dots,
                applies(Workaround::YnnpackReductions),
                applies(Workaround::YnnpackElementwise),
            );
            if let Some(kinds) = ynn {
                options.push((
                    "xla_cpu_experimental_ynn_fusion_type",
                    OptionValue::Str(kinds),
                ));
            }
            options
        }
        Some(Platform::Gpu | Platform::Tpu) | None => Vec::new(),
    }
}

/// The `xla_cpu_experimental_ynn_fusion_type` value asking YNNPACK for
/// individual dots, reductions and elementwise fusions as flagged (`None`
/// when none is).
fn ynn_kinds(dots: bool, reduce: bool, eltwise: bool) -> Option<&'static str> {
    const DOT: &str = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT";
    match (dots, reduce, eltwise) {
        (false, false, false) => None,
        (true, false, false) => Some(DOT),
        (false, true, false) => Some("LIBRARY_FUSION_TYPE_REDUCE"),
        (false, false, true) => Some("LIBRARY_FUSION_TYPE_ELTWISE"),
        (true, true, false) => Some("LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"),
        (true, false, true) => Some("LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_ELTWISE"),
        (false, true, true) => Some("LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_ELTWISE"),
        (true, true, true) => Some(
            "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_ELTWISE",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::KnownPlugin;

    /// What applies on the official build.
    fn official(w: Workaround) -> bool {
        w.measured_on().contains(&KnownPlugin::XlaCpuPjrt001)
    }

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

    const XNN: &str = "xla_cpu_experimental_xnn_fusion_type";
    const WIDE: (&str, OptionValue) = ("xla_cpu_prefer_vector_width", OptionValue::Int(512));
    /// An Intel Xeon from Sapphire Rapids on, as `HostCpu::detect` reads it.
    const SAPPHIRE: HostCpu = HostCpu { amx_bf16: true };
    const YNN_DOTS: (&str, OptionValue) = (
        "xla_cpu_experimental_ynn_fusion_type",
        OptionValue::Str("LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"),
    );

    /// Whether `options` set the field `name`.
    fn sets(options: &[(&str, OptionValue)], name: &str) -> bool {
        options.iter().any(|(n, _)| *n == name)
    }

    #[test]
    fn xnn_dots_only_on_cpu_and_only_when_hinted() {
        let bf16 = CompileHints {
            bf16_dots_keep_f32: true,
            ..CompileHints::default()
        };
        let avx512 = HostCpu::default();
        let cpu = platform_overrides(Some(Platform::Cpu), &bf16, avx512, official);
        assert!(sets(&cpu, XNN));
        assert!(cpu.contains(&YNN_DOTS));
        let plain = platform_overrides(
            Some(Platform::Cpu),
            &CompileHints::default(),
            avx512,
            official,
        );
        assert!(!sets(&plain, XNN));
        assert!(plain.contains(&(
            "xla_cpu_experimental_ynn_fusion_type",
            OptionValue::Str("LIBRARY_FUSION_TYPE_REDUCE")
        )));
        assert!(platform_overrides(Some(Platform::Gpu), &bf16, avx512, official).is_empty());
        assert!(platform_overrides(None, &bf16, avx512, official).is_empty());
    }

    #[test]
    fn amx_hosts_give_bf16_dots_to_ynnpack_alone() {
        let bf16 = CompileHints {
            bf16_dots_keep_f32: true,
            ..CompileHints::default()
        };
        let amx = platform_overrides(Some(Platform::Cpu), &bf16, SAPPHIRE, official);
        assert!(!sets(&amx, XNN));
        assert!(amx.contains(&YNN_DOTS));
        let int8 = CompileHints {
            int8_dots: true,
            ..CompileHints::default()
        };
        for cpu in [HostCpu::default(), SAPPHIRE] {
            let int8 = platform_overrides(Some(Platform::Cpu), &int8, cpu, official);
            assert!(int8.contains(&YNN_DOTS));
            assert!(!sets(&int8, XNN));
        }
        // bf16 dots with bf16 results: YNNPACK on AMX only.
        let narrowed = CompileHints {
            bf16_dots: true,
            ..CompileHints::default()
        };
        let on = |cpu| platform_overrides(Some(Platform::Cpu), &narrowed, cpu, official);
        assert!(on(SAPPHIRE).contains(&YNN_DOTS));
        assert!(!on(HostCpu::default()).contains(&YNN_DOTS));
        // A plain program differs only by the vector width.
        let plain = CompileHints::default();
        let mut wide = platform_overrides(Some(Platform::Cpu), &plain, SAPPHIRE, official);
        assert!(wide.contains(&WIDE));
        wide.retain(|o| *o != WIDE);
        assert_eq!(
            wide,
            platform_overrides(Some(Platform::Cpu), &plain, HostCpu::default(), official)
        );
    }

    /// On a plugin build the workarounds were not measured on, only the
    /// semantic option (NaN-keeping min/max) is set; each workaround
    /// alone sets only its own options.
    #[test]
    fn workarounds_off_leave_only_the_semantics() {
        let hints = CompileHints {
            bf16_dots: true,
            bf16_dots_keep_f32: true,
            int8_dots: true,
        };
        let amx = HostCpu { amx_bf16: true };
        let none = platform_overrides(Some(Platform::Cpu), &hints, amx, |_| false);
        assert_eq!(
            none,
            vec![("xla_cpu_enable_fast_min_max", OptionValue::Bool(false))]
        );
        let only =
            |w: Workaround| platform_overrides(Some(Platform::Cpu), &hints, amx, move |x| x == w);
        assert!(sets(
            &only(Workaround::WideVectors),
            "xla_cpu_prefer_vector_width"
        ));
        assert!(!sets(
            &only(Workaround::WideVectors),
            "xla_cpu_experimental_ynn_fusion_type"
        ));
        let reduce = only(Workaround::YnnpackReductions);
        assert!(reduce.contains(&(
            "xla_cpu_experimental_ynn_fusion_type",
            OptionValue::Str("LIBRARY_FUSION_TYPE_REDUCE")
        )));
        let dots = only(Workaround::LibraryDots);
        assert!(dots.contains(&(
            "xla_cpu_experimental_ynn_fusion_type",
            OptionValue::Str("LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT")
        )));
        assert!(!sets(
            &only(Workaround::SplitRowReductions),
            "xla_cpu_experimental_ynn_fusion_type"
        ));
    }

    #[test]
    fn integer_overrides_use_the_int_field() {
        let bytes = compile_options(1, 1, &[("ab", OptionValue::Int(512))]);
        // Entry: key "ab", value { 3: 512 } (varint 0x80 0x04).
        assert_eq!(
            &bytes[6..],
            [0x3a, 0x09, 0x0a, 0x02, b'a', b'b', 0x12, 0x03, 0x18, 0x80, 0x04]
        );
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
