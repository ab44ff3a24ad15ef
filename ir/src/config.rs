//! Plain configuration data: the platform a kernel is written for, the
//! precision of its dots, and [`KernelConfig`] (the options of the kernel
//! attributes, overridable at run time). Below everything but dtypes.

use std::fmt;

use crate::dtype::DType;

/// The hardware family a kernel is written for; it sets the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Platform {
    /// Cloud TPU: 128-wide blocks, bf16 matmul inputs with f32 accumulation.
    Tpu,
    /// NVIDIA GPU: 64-wide blocks, f16 matmul inputs with f32 accumulation.
    Gpu,
    /// CPU: no default tiling, full precision.
    Cpu,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Platform::Tpu => "tpu",
            Platform::Gpu => "gpu",
            Platform::Cpu => "cpu",
        })
    }
}

/// How a kernel is traced and compiled. The attribute macros generate one as
/// the kernel's `CONFIG`; a value passed at run time overrides it.
///
/// ```
/// use tessel_ir::config::{KernelConfig, Platform};
/// use tessel_ir::config::Precision;
/// use tessel_ir::BF16;
/// const C: KernelConfig = KernelConfig::for_platform(Platform::Tpu).with_precision(Precision::High);
/// assert_eq!(C.block_size, Some(128));
/// assert_eq!(C.dtype, Some(BF16));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelConfig {
    /// The platform whose defaults apply.
    pub platform: Platform,
    /// Default precision of dots.
    pub precision: Precision,
    /// Tile size of `blocks(..)` loops (`None`: no tiling).
    pub block_size: Option<usize>,
    /// Compute dtype for `matmul` inputs at default precision (`None`: the
    /// inputs' own). f32/f64 operands are rounded to it, as the TPU MXU
    /// (bf16) and GPU tensor cores (f16) do; `precision = "high"` or
    /// `"highest"` keeps full precision.
    pub dtype: Option<DType>,
    /// Accumulate low-precision matmuls in f32.
    pub accumulate: bool,
    /// Pad dimensions that are not block multiples (otherwise an error).
    pub auto_pad: bool,
    /// Names of parameters whose device buffers are donated to the outputs.
    pub donate: &'static [&'static str],
    /// The kernel's name in programs and messages (`None`: the function's name).
    pub name: Option<&'static str>,
    /// Run this kernel on the interpreter
    /// (`Device::interpreter`) whatever device it is given, like Pallas'
    /// `interpret=True`: arguments are read back to the host, results are
    /// put on the given device.
    pub interpret: bool,
    /// Choose the tunable static arguments (block sizes) by measurement on
    /// first use: `run`, `call` and `profile` time each candidate the
    /// argument offers (`tessel::kernel::StaticArg::tuning_candidates`)
    /// on the actual arguments, keep the fastest, and remember the choice
    /// per kernel, argument specs, static arguments and device, in memory and
    /// in the persistent cache (see `tessel::kernel::autotune`).
    pub autotune: bool,
    /// The automatic check families (index, NaN and division checks, as
    /// JAX's `checkify` offers): each adds a `tessel::check` to
    /// every op of its kind. All off by default, when the program is
    /// unchanged.
    pub checks: CheckFamilies,
}

/// Which ops get an automatic `tessel::check` (JAX's `checkify`
/// error sets): a failure is [`Error::Check`](crate::Error::Check) after the
/// call, naming the op's line.
///
/// ```
/// use tessel_ir::config::{CheckFamilies, KernelConfig};
/// const CHECKED: KernelConfig = KernelConfig::for_platform(tessel_ir::config::Platform::Cpu)
///     .with_checks(CheckFamilies::ALL);
/// assert!(CHECKED.checks.index && CHECKED.checks.nan && CHECKED.checks.div);
/// assert_eq!(CheckFamilies::parse("index, div"), Ok(CheckFamilies { index: true, nan: false, div: true }));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CheckFamilies {
    /// Every start and index of `dynamic_slice`, `dynamic_update_slice`,
    /// `gather` (and `take`) and `scatter` in range (XLA would clamp the
    /// start, or skip the update, silently).
    pub index: bool,
    /// No float result of an elementwise op, a dot or a reduction is NaN.
    pub nan: bool,
    /// No integer division or remainder by zero.
    pub div: bool,
}

impl CheckFamilies {
    /// No automatic checks (the default).
    pub const NONE: CheckFamilies = CheckFamilies {
        index: false,
        nan: false,
        div: false,
    };
    /// Every family.
    pub const ALL: CheckFamilies = CheckFamilies {
        index: true,
        nan: true,
        div: true,
    };
    /// The names [`parse`](Self::parse) takes.
    pub const NAMES: [&'static str; 4] = ["index", "nan", "div", "all"];

    /// The families named in a comma-separated list (`"index, nan"`,
    /// `"all"`, `""` for none), or the first unknown name.
    pub fn parse(list: &str) -> Result<CheckFamilies, String> {
        let mut f = CheckFamilies::NONE;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "index" => f.index = true,
                "nan" => f.nan = true,
                "div" => f.div = true,
                "all" => f = CheckFamilies::ALL,
                other => return Err(other.to_string()),
            }
        }
        Ok(f)
    }
}

impl KernelConfig {
    /// The defaults of `platform`.
    pub const fn for_platform(platform: Platform) -> Self {
        let (block_size, dtype) = match platform {
            Platform::Tpu => (Some(128), Some(DType::BF16)),
            Platform::Gpu => (Some(64), Some(DType::F16)),
            Platform::Cpu => (None, None),
        };
        KernelConfig {
            platform,
            precision: Precision::Default,
            block_size,
            dtype,
            accumulate: true,
            auto_pad: true,
            donate: &[],
            name: None,
            interpret: false,
            autotune: false,
            checks: CheckFamilies::NONE,
        }
    }

    /// With the automatic check families `checks`; see [`CheckFamilies`].
    pub const fn with_checks(mut self, checks: CheckFamilies) -> Self {
        self.checks = checks;
        self
    }

    /// With another dot precision.
    pub const fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// With another block size.
    pub const fn with_block_size(mut self, block_size: Option<usize>) -> Self {
        self.block_size = block_size;
        self
    }

    /// With another matmul compute dtype.
    pub const fn with_dtype(mut self, dtype: Option<DType>) -> Self {
        self.dtype = dtype;
        self
    }

    /// Run on the interpreter (`true`) or on the device given (`false`, the
    /// default); see [`interpret`](KernelConfig#structfield.interpret).
    ///
    /// ```
    /// use tessel_ir::config::KernelConfig;
    /// const DEBUG: KernelConfig = KernelConfig::for_platform(tessel_ir::config::Platform::Cpu).interpret(true);
    /// assert!(DEBUG.interpret);
    /// ```
    pub const fn interpret(mut self, on: bool) -> Self {
        self.interpret = on;
        self
    }

    /// Choose block sizes by measurement on first use (`true`) or take the
    /// arguments as given (`false`, the default); see
    /// [`autotune`](KernelConfig#structfield.autotune).
    ///
    /// ```
    /// use tessel_ir::config::KernelConfig;
    /// const TUNED: KernelConfig = KernelConfig::for_platform(tessel_ir::config::Platform::Cpu).autotune(true);
    /// assert!(TUNED.autotune);
    /// ```
    pub const fn autotune(mut self, on: bool) -> Self {
        self.autotune = on;
        self
    }
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig::for_platform(Platform::Cpu)
    }
}

/// The operand precision XLA uses for a dot (its `PrecisionConfig`).
///
/// On TPU, `Default` runs f32 matmuls in one bf16 pass, `High` in three and
/// `Highest` in six (full f32). CPU always computes in full precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Fastest.
    #[default]
    Default,
    /// bf16_3x on TPU.
    High,
    /// Full f32 on TPU.
    Highest,
}

impl Precision {
    /// The StableHLO spelling (`DEFAULT`, `HIGH`, `HIGHEST`).
    pub fn mlir_name(self) -> &'static str {
        match self {
            Precision::Default => "DEFAULT",
            Precision::High => "HIGH",
            Precision::Highest => "HIGHEST",
        }
    }

    /// Parses `default`, `high` or `highest`.
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "default" => Some(Precision::Default),
            "high" => Some(Precision::High),
            "highest" => Some(Precision::Highest),
            _ => None,
        }
    }
}
