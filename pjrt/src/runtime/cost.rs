//! What XLA knows about a compiled program: cost analysis, compiled memory
//! statistics and the executable fingerprint.

use super::pjrt::api::{bytes_to_string, named_values};
use super::pjrt::args::Args;
use super::pjrt::call::pjrt_call;
use super::pjrt::ffi;
use super::Executable;
use crate::error::{DeviceError, Result};

/// XLA's cost analysis of a compiled program (`PJRT_Executable_GetCostAnalysis`).
///
/// Under SPMD the numbers are per partition. Each named field is `None` when
/// the plugin does not report it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostAnalysis {
    /// Floating-point operations (a multiply-add counts as 2).
    pub flops: Option<f64>,
    /// Bytes read and written ("bytes accessed").
    pub bytes_accessed: Option<f64>,
    /// Transcendental operations (exp, log, tanh, ...).
    pub transcendentals: Option<f64>,
    /// XLA's estimate of the optimal run time, in seconds.
    pub optimal_seconds: Option<f64>,
    /// Every numeric property the plugin reported, by its XLA name
    /// (including the ones above, and per-operand entries such as
    /// `bytes accessed0{}` or `utilization1{}`).
    pub properties: Vec<(String, f64)>,
}

impl CostAnalysis {
    /// The property named `name`, if reported.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// Memory a compiled program needs (`PJRT_Executable_GetCompiledMemoryStats`), in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemoryStats {
    /// Generated code.
    pub generated_code_bytes: i64,
    /// Arguments.
    pub argument_bytes: i64,
    /// Results.
    pub output_bytes: i64,
    /// Arguments whose memory is reused for results (donation).
    pub alias_bytes: i64,
    /// Temporaries.
    pub temp_bytes: i64,
    /// Peak device memory, when the plugin reports it (0 otherwise).
    pub peak_bytes: i64,
    /// Generated code in host memory.
    pub host_generated_code_bytes: i64,
    /// Arguments in host memory.
    pub host_argument_bytes: i64,
    /// Results in host memory.
    pub host_output_bytes: i64,
    /// Aliased arguments in host memory.
    pub host_alias_bytes: i64,
    /// Temporaries in host memory.
    pub host_temp_bytes: i64,
}

/// The device-side sizes in MiB: what the arguments, results and
/// temporaries take, and how much of the results reuses donated arguments.
///
/// ```
/// use tessel_dsl::runtime::MemoryStats;
/// let m = MemoryStats { argument_bytes: 3 << 20, output_bytes: 3 << 20, alias_bytes: 2 << 20, ..Default::default() };
/// assert_eq!(m.to_string(), "3.00 MiB in, 3.00 MiB out (2.00 MiB of them donated), 0.00 MiB temporaries");
/// ```
impl std::fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: i64| b as f64 / (1 << 20) as f64;
        write!(
            f,
            "{:.2} MiB in, {:.2} MiB out ({:.2} MiB of them donated), {:.2} MiB temporaries",
            mib(self.argument_bytes),
            mib(self.output_bytes),
            mib(self.alias_bytes),
            mib(self.temp_bytes)
        )
    }
}

impl Executable {
    /// The PJRT handles, or [`DeviceError::NotCompiled`] for `call`.
    fn pjrt_or(
        &self,
        call: &'static str,
    ) -> Result<(
        &std::sync::Arc<super::client::Client>,
        *mut ffi::PJRT_Executable,
        *mut ffi::PJRT_LoadedExecutable,
    )> {
        self.pjrt().ok_or_else(|| {
            DeviceError::NotCompiled {
                kernel: self.name().to_string(),
                what: call,
            }
            .into()
        })
    }

    /// XLA's cost analysis: flops, bytes accessed, transcendentals, optimal seconds.
    ///
    /// On the interpreter, which compiles nothing, this is
    /// [`DeviceError::NotCompiled`].
    pub fn cost_analysis(&self) -> Result<CostAnalysis> {
        let (client, executable, _) = self.pjrt_or("cost_analysis")?;
        let api = client.api();
        let mut args = ffi::PJRT_Executable_GetCostAnalysis_Args::new();
        args.executable = executable;
        // SAFETY: the executable is live for as long as `self`.
        unsafe { pjrt_call!(api, PJRT_Executable_GetCostAnalysis, &mut args) }?;
        // SAFETY: the properties are owned by the executable, which `self`
        // keeps alive; they are copied here.
        let values = unsafe { named_values(args.properties, args.num_properties) };
        let properties: Vec<(String, f64)> = values
            .into_iter()
            .filter_map(|(name, v)| v.as_f64().map(|x| (name, x)))
            .collect();
        let get = |name: &str| properties.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        Ok(CostAnalysis {
            flops: get("flops"),
            bytes_accessed: get("bytes accessed"),
            transcendentals: get("transcendentals"),
            optimal_seconds: get("optimal_seconds"),
            properties,
        })
    }

    /// The compiled program's memory needs.
    ///
    /// On the interpreter, [`DeviceError::NotCompiled`].
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        let (client, executable, _) = self.pjrt_or("memory_stats")?;
        let api = client.api();
        let mut a = ffi::PJRT_Executable_GetCompiledMemoryStats_Args::new();
        a.executable = executable;
        // SAFETY: the executable is live for as long as `self`.
        unsafe { pjrt_call!(api, PJRT_Executable_GetCompiledMemoryStats, &mut a) }?;
        Ok(MemoryStats {
            generated_code_bytes: a.generated_code_size_in_bytes,
            argument_bytes: a.argument_size_in_bytes,
            output_bytes: a.output_size_in_bytes,
            alias_bytes: a.alias_size_in_bytes,
            temp_bytes: a.temp_size_in_bytes,
            peak_bytes: a.peak_memory_in_bytes,
            host_generated_code_bytes: a.host_generated_code_size_in_bytes,
            host_argument_bytes: a.host_argument_size_in_bytes,
            host_output_bytes: a.host_output_size_in_bytes,
            host_alias_bytes: a.host_alias_size_in_bytes,
            host_temp_bytes: a.host_temp_size_in_bytes,
        })
    }

    /// A fingerprint of the compiled program (same inputs and compiler give
    /// the same fingerprint), if the plugin provides one (`None` on the
    /// interpreter).
    pub fn fingerprint(&self) -> Option<String> {
        let (client, executable, _) = self.pjrt()?;
        let api = client.api();
        let mut args = ffi::PJRT_Executable_Fingerprint_Args::new();
        args.executable = executable;
        // SAFETY: the executable is live for as long as `self`. A plugin
        // without the function, or a failed call, means no fingerprint.
        unsafe { pjrt_call!(api, PJRT_Executable_Fingerprint, &mut args) }.ok()?;
        // SAFETY: the fingerprint has the executable's lifetime; copied here.
        let s = unsafe {
            bytes_to_string(
                args.executable_fingerprint.cast(),
                args.executable_fingerprint_size,
            )
        };
        (!s.is_empty()).then_some(s)
    }
}
