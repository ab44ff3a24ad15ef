//! What a loaded plugin is, as a value: its file and SHA-256, the PJRT API
//! version it implements, its platform and version string, its attributes
//! and extensions, and — when its hash is one tessel pins — which build it
//! is. Compile options and program rewrites that were measured on one build
//! name it ([`Workaround::measured_on`]) and apply only to it
//! ([`PluginIdentity::applies`]): what speeds one XLA up can slow another
//! down (the split row reductions made a newer CPU build's norms 1.4–7.6×
//! slower), and the plugin's identity decides, not a guess.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::pinned::{PinnedPlugin, LAMMPS_0_11_2, OFFICIAL, ZML_2026_06_23};
use super::stamp::{self, sha256_file};
use crate::runtime::pjrt::ffi;

/// A plugin build tessel pins by SHA-256 and has measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KnownPlugin {
    /// `xla-cpu-pjrt` 0.0.1 from PyPI, the official XLA CPU plugin and
    /// tessel's default (`xla_cpu_pjrt.so` of its only wheel).
    XlaCpuPjrt001,
    /// `lammps-jax-pjrt-cpu` 0.11.2 from PyPI: XLA's CPU plugin built from
    /// the XLA of jaxlib 0.11.2.
    LammpsJaxPjrtCpu0112,
    /// `fastatomstruct-xla-cpu` 2026.6.23 from PyPI: the ZML project's
    /// `pjrt-cpu_linux-amd64` build of 2026-06-23, unmodified.
    ZmlPjrtCpu20260623,
}

impl KnownPlugin {
    /// Every build tessel knows.
    pub const ALL: [KnownPlugin; 3] = [
        KnownPlugin::XlaCpuPjrt001,
        KnownPlugin::LammpsJaxPjrtCpu0112,
        KnownPlugin::ZmlPjrtCpu20260623,
    ];

    /// How it is installed (`tessel plugin install NAME`) and pinned.
    pub fn pinned(self) -> PinnedPlugin {
        match self {
            KnownPlugin::XlaCpuPjrt001 => OFFICIAL,
            KnownPlugin::LammpsJaxPjrtCpu0112 => LAMMPS_0_11_2,
            KnownPlugin::ZmlPjrtCpu20260623 => ZML_2026_06_23,
        }
    }

    /// The plugin file's SHA-256, lowercase hex.
    pub fn sha256(self) -> &'static str {
        self.pinned().sha256()
    }

    /// The build with this file hash, if tessel knows it.
    pub fn from_sha256(sha256: &str) -> Option<KnownPlugin> {
        KnownPlugin::ALL.into_iter().find(|k| k.sha256() == sha256)
    }
}

impl fmt::Display for KnownPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.pinned();
        write!(f, "{} {}", p.name, p.version)
    }
}

/// A program rewrite or compile option tessel uses on the builds it was
/// measured to help, and nowhere else (PERFORMANCE.md has the figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Workaround {
    /// Long row reductions split in two, with an optimization barrier
    /// between the halves (the build's own emitter split them worse).
    SplitRowReductions,
    /// Row reductions handed to YNNPACK
    /// (`xla_cpu_experimental_ynn_fusion_type`): flash attention 1.3–1.5×
    /// faster.
    YnnpackReductions,
    /// bf16 dots with f32 results and 8-bit integer dots handed to
    /// XNNPACK/YNNPACK (to YNNPACK's AMX kernels where the processor has
    /// AMX-BF16), which the build's XLA does not do by itself.
    LibraryDots,
    /// 512-bit vectors for XLA's own loops on processors with AMX
    /// (`xla_cpu_prefer_vector_width`).
    WideVectors,
    /// Elementwise fusions handed to YNNPACK. Measured on no build: it
    /// crashed 0.0.1; force it with `TESSEL_WORKAROUNDS=ynnpack-eltwise` to
    /// try it on another.
    YnnpackElementwise,
}

impl Workaround {
    /// Every workaround.
    pub const ALL: [Workaround; 5] = [
        Workaround::SplitRowReductions,
        Workaround::YnnpackReductions,
        Workaround::LibraryDots,
        Workaround::WideVectors,
        Workaround::YnnpackElementwise,
    ];

    /// The builds it was measured to help.
    pub fn measured_on(self) -> &'static [KnownPlugin] {
        match self {
            Workaround::SplitRowReductions
            | Workaround::YnnpackReductions
            | Workaround::LibraryDots
            | Workaround::WideVectors => &[KnownPlugin::XlaCpuPjrt001],
            Workaround::YnnpackElementwise => &[],
        }
    }

    /// Its key in `TESSEL_WORKAROUNDS`.
    pub fn key(self) -> &'static str {
        match self {
            Workaround::SplitRowReductions => "split-row-reductions",
            Workaround::YnnpackReductions => "ynnpack-reductions",
            Workaround::LibraryDots => "library-dots",
            Workaround::WideVectors => "wide-vectors",
            Workaround::YnnpackElementwise => "ynnpack-eltwise",
        }
    }

    /// What `TESSEL_WORKAROUNDS` forces: a comma-separated list of keys,
    /// each forcing a workaround on (`ynnpack-reductions`) or off
    /// (`-split-row-reductions`) whatever the plugin, for trying them on a
    /// build tessel has not measured. Unknown keys are ignored (`tessel
    /// plugin info` shows what is in force).
    pub fn forced() -> Vec<(Workaround, bool)> {
        let Some(text) = std::env::var_os(WORKAROUNDS_VAR) else {
            return Vec::new();
        };
        let text = text.to_string_lossy().into_owned();
        text.split(',')
            .map(str::trim)
            .filter_map(|item| {
                let (on, key) = match item.strip_prefix('-') {
                    Some(k) => (false, k),
                    None => (true, item.strip_prefix('+').unwrap_or(item)),
                };
                Workaround::ALL
                    .into_iter()
                    .find(|w| w.key() == key)
                    .map(|w| (w, on))
            })
            .collect()
    }

    /// A short name, for `tessel plugin info`.
    pub fn name(self) -> &'static str {
        match self {
            Workaround::SplitRowReductions => "split row reductions",
            Workaround::YnnpackReductions => "YNNPACK row reductions",
            Workaround::LibraryDots => "bf16 and int8 dots to XNNPACK/YNNPACK",
            Workaround::WideVectors => "512-bit vectors on AMX processors",
            Workaround::YnnpackElementwise => "YNNPACK elementwise fusions",
        }
    }
}

/// The environment variable that forces workarounds on or off (see
/// [`Workaround::forced`]).
pub const WORKAROUNDS_VAR: &str = "TESSEL_WORKAROUNDS";

/// What a loaded plugin is (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct PluginIdentity {
    /// The plugin file (canonical path).
    pub path: PathBuf,
    /// Its SHA-256, lowercase hex (`None` when the file could not be read).
    pub sha256: Option<String>,
    /// The build, when the hash is one tessel pins.
    pub known: Option<KnownPlugin>,
    /// The PJRT C API (major, minor) it implements.
    pub api_version: (i32, i32),
    /// Its platform (`cpu`, `cuda`, `tpu`).
    pub platform_name: String,
    /// Its platform version string (`PJRT_Client_PlatformVersion`).
    pub platform_version: String,
    /// `PJRT_Plugin_Attributes`, shown (`xla_version`,
    /// `stablehlo_current_version`, ...).
    pub attributes: Vec<(String, String)>,
    /// The extensions in its chain, by name (`FFI`, `Layouts`, ...).
    pub extensions: Vec<String>,
}

impl PluginIdentity {
    /// Whether `workaround` applies: `TESSEL_WORKAROUNDS` forces it, or
    /// else the plugin is a build it was measured on.
    pub fn applies(&self, workaround: Workaround) -> bool {
        let forced = Workaround::forced();
        match forced.iter().rev().find(|(w, _)| *w == workaround) {
            Some((_, on)) => *on,
            None => self.measured(workaround),
        }
    }

    /// Whether the plugin is a build `workaround` was measured on.
    pub fn measured(&self, workaround: Workaround) -> bool {
        self.known
            .is_some_and(|k| workaround.measured_on().contains(&k))
    }

    /// The workarounds that apply.
    pub fn workarounds(&self) -> Vec<Workaround> {
        Workaround::ALL
            .into_iter()
            .filter(|w| self.applies(*w))
            .collect()
    }
}

impl fmt::Display for PluginIdentity {
    /// One `name: value` line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "file:             {}", self.path.display())?;
        writeln!(
            f,
            "sha256:           {}",
            self.sha256.as_deref().unwrap_or("(unreadable)")
        )?;
        let build = self
            .known
            .map_or_else(|| "not one tessel pins".to_string(), |k| k.to_string());
        writeln!(f, "build:            {build}")?;
        writeln!(
            f,
            "PJRT API:         {}.{}",
            self.api_version.0, self.api_version.1
        )?;
        writeln!(
            f,
            "platform:         {} {}",
            self.platform_name, self.platform_version
        )?;
        for (name, value) in &self.attributes {
            writeln!(f, "attribute:        {name} = {value}")?;
        }
        let extensions = if self.extensions.is_empty() {
            "none".to_string()
        } else {
            self.extensions.join(", ")
        };
        writeln!(f, "extensions:       {extensions}")?;
        for w in Workaround::ALL {
            let applies = self.applies(w);
            let on = if applies { "on " } else { "off" };
            let forced = if applies != self.measured(w) {
                format!(", forced by {WORKAROUNDS_VAR}")
            } else {
                String::new()
            };
            let mut builds: Vec<String> = w.measured_on().iter().map(|k| k.to_string()).collect();
            if builds.is_empty() {
                builds.push("no build".into());
            }
            writeln!(
                f,
                "workaround:       {on} {} [{}] (measured on {}{forced})",
                w.name(),
                w.key(),
                builds.join(", ")
            )?;
        }
        Ok(())
    }
}

/// The name of a `PJRT_Extension_Type` whose struct declares `size` bytes.
/// The FFI extension's size tells which of its functions the plugin has:
/// after the 24-byte base, type-id registration and user data (extension
/// version 1 and 2), then handler registration in newer XLA.
pub(crate) fn extension_name(t: ffi::PJRT_Extension_Type, size: usize) -> String {
    if t == ffi::PJRT_Extension_Type_FFI {
        let functions = size.saturating_sub(std::mem::size_of::<ffi::PJRT_Extension_Base>()) / 8;
        return match functions {
            0..=2 => format!(
                "FFI ({functions} functions: type ids and user data, no handler registration)"
            ),
            n => format!("FFI ({n} functions: with handler registration)"),
        };
    }
    let name = match t {
        ffi::PJRT_Extension_Type_Gpu_Custom_Call => "GPU custom call",
        ffi::PJRT_Extension_Type_Profiler => "Profiler",
        ffi::PJRT_Extension_Type_Custom_Partitioner => "Custom partitioner",
        ffi::PJRT_Extension_Type_Stream => "Stream",
        ffi::PJRT_Extension_Type_Layouts => "Layouts",
        ffi::PJRT_Extension_Type_FFI => "FFI",
        ffi::PJRT_Extension_Type_MemoryDescriptions => "Memory descriptions",
        ffi::PJRT_Extension_Type_Triton => "Triton",
        ffi::PJRT_Extension_Type_RawBuffer => "Raw buffer",
        ffi::PJRT_Extension_Type_PhaseCompile => "Phase compile",
        ffi::PJRT_Extension_Type_Example => "Example",
        ffi::PJRT_Extension_Type_CrossHostTransfers => "Cross-host transfers",
        ffi::PJRT_Extension_Type_ExecutableMetadata => "Executable metadata",
        ffi::PJRT_Extension_Type_Callback => "Callback",
        ffi::PJRT_Extension_Type_HostAllocator => "Host allocator",
        other => return format!("type {other}"),
    };
    name.to_string()
}

/// The SHA-256 of the plugin file `path` (canonical): a pinned build's when
/// the file is one tessel installed (its stamp spares the hash), else from
/// the records in tessel's cache (`plugin-sha256/`, keyed by the file's
/// path, size, times and inode), else hashed now and recorded there.
pub(crate) fn plugin_sha256(path: &Path) -> Option<String> {
    // A build tessel installed is stamped beside it (in tessel's cache);
    // its stamp spares the hash. Files elsewhere (a Python package's) get
    // no file written beside them: their hash is recorded in the cache.
    let cache = super::cache_dir().ok();
    let canonical = cache.as_ref().and_then(|c| fs::canonicalize(c).ok());
    if canonical.is_some_and(|c| path.starts_with(c)) {
        for k in KnownPlugin::ALL {
            // The size decides first: only the build's own file is hashed.
            if stamp::verify(path, k.pinned().plugin) {
                return Some(k.sha256().to_string());
            }
        }
    }
    let records = cache.map(|dir| dir.join("plugin-sha256"));
    recorded_sha256(path, records.as_deref())
}

/// The SHA-256 of `path` from its record in the directory `records`, else
/// hashed now and recorded there (nothing recorded without a directory).
fn recorded_sha256(path: &Path, records: Option<&Path>) -> Option<String> {
    let print = stamp::fingerprint(path)?;
    let record = records.map(|dir| dir.join(format!("{:016x}", path_key(path))));
    if let Some(record) = &record {
        if let Ok(text) = fs::read_to_string(record) {
            if let Some((seen, hash)) = text.trim().rsplit_once('\n') {
                if seen == format!("{}\n{print}", path.display()).as_str() {
                    return Some(hash.to_string());
                }
            }
        }
    }
    let hash = sha256_file(path).ok()?;
    if let Some(record) = record {
        // Best effort: without the record the next process hashes again.
        let _ = record.parent().map(fs::create_dir_all);
        let _ = fs::write(&record, format!("{}\n{print}\n{hash}\n", path.display()));
    }
    Some(hash)
}

/// FNV-1a of the path's bytes: the record's file name.
fn path_key(path: &Path) -> u64 {
    path.to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(known: Option<KnownPlugin>) -> PluginIdentity {
        PluginIdentity {
            path: PathBuf::from("/plugins/pjrt.so"),
            sha256: known.map(|k| k.sha256().to_string()),
            known,
            api_version: (0, 81),
            platform_name: "cpu".into(),
            platform_version: "cpu".into(),
            attributes: vec![("xla_version".into(), "2".into())],
            extensions: vec!["FFI".into()],
        }
    }

    /// Every workaround applies to the build it was measured on and to
    /// nothing else.
    #[test]
    fn workarounds_follow_the_build() {
        let official = identity(Some(KnownPlugin::XlaCpuPjrt001));
        let measured: Vec<Workaround> = Workaround::ALL
            .into_iter()
            .filter(|w| *w != Workaround::YnnpackElementwise)
            .collect();
        assert_eq!(official.workarounds(), measured);
        assert!(official
            .to_string()
            .contains("YNNPACK elementwise fusions [ynnpack-eltwise] (measured on no build)"));
        let other = identity(None);
        assert!(other.workarounds().is_empty());
        let shown = other.to_string();
        assert!(
            shown.contains("build:            not one tessel pins"),
            "{shown}"
        );
        assert!(
            shown.contains("workaround:       off split row reductions"),
            "{shown}"
        );
        assert!(official
            .to_string()
            .contains("workaround:       on  YNNPACK row reductions"));
        assert_eq!(
            KnownPlugin::from_sha256(OFFICIAL.sha256()),
            Some(KnownPlugin::XlaCpuPjrt001)
        );
        assert_eq!(
            KnownPlugin::LammpsJaxPjrtCpu0112.pinned().name,
            "lammps-jax-pjrt-cpu"
        );
        assert!(official
            .to_string()
            .contains("build:            xla-cpu-pjrt 0.0.1"));
        // Forced on and off, whatever the build.
        std::env::set_var(
            WORKAROUNDS_VAR,
            "ynnpack-reductions, -split-row-reductions, bogus",
        );
        assert!(other.applies(Workaround::YnnpackReductions));
        assert!(!official.applies(Workaround::SplitRowReductions));
        assert!(official.applies(Workaround::WideVectors));
        assert!(other.to_string().contains("forced by TESSEL_WORKAROUNDS"));
        std::env::remove_var(WORKAROUNDS_VAR);
        assert_eq!(KnownPlugin::from_sha256("00"), None);
    }

    /// A file's hash is recorded once and read back while the file is
    /// unchanged; a changed file is hashed again.
    #[test]
    fn hashes_are_recorded_and_renewed() {
        let dir = std::env::temp_dir().join(format!("tessel-identity-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plugin.so");
        fs::write(&file, b"abc").unwrap();
        let records = dir.join("records");
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let hash = || recorded_sha256(&file, Some(&records));
        assert_eq!(hash().as_deref(), Some(abc));
        assert_eq!(fs::read_dir(&records).unwrap().count(), 1);
        // Read back from the record: a record naming another hash is
        // believed while the file is unchanged...
        let record = fs::read_dir(&records)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = fs::read_to_string(&record)
            .unwrap()
            .replace(abc, "recorded");
        fs::write(&record, text).unwrap();
        assert_eq!(hash().as_deref(), Some("recorded"));
        // ...and a changed file is hashed again.
        fs::write(&file, b"abd").unwrap();
        let abd = hash().unwrap();
        assert!(abd != abc && abd != "recorded", "{abd}");
        assert_eq!(recorded_sha256(&file, None), Some(abd));
        fs::remove_dir_all(&dir).unwrap();
    }
}
