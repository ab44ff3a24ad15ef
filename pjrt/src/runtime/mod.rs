//! The PJRT runtime: load a PJRT plugin, compile StableHLO, move tensors
//! between host and device, and run.
//!
//! * [`Device`] is a PJRT client. [`Device::cpu`] is the embedded default
//!   (the official XLA CPU plugin, found or fetched by [`cpu_plugin_path`]);
//!   [`Device::gpu`], [`Device::tpu`] and [`Device::from_plugin`] run the same
//!   code on other plugins.
//! * [`Device::compile`] turns a [`Program`] (StableHLO text with
//!   `func.func @main` and its argument/result types) into an [`Executable`].
//! * [`DeviceBuffer`]s hold tensors in device memory between calls;
//!   [`Executable::run`] is the host-in, host-out shortcut.
//! * [`Executable::cost_analysis`] and [`Executable::memory_stats`] report
//!   what XLA knows about the compiled program.
//! * [`Device::interpreter`] is a device without a plugin: programs traced
//!   by tessel run in its [interpreter](crate::interp), with checks.
//!   [`Device::from_env`] picks a device by the `TESSEL_DEVICE` variable.
//!
//! Everything here is `Send + Sync`; PJRT clients, executables and buffers
//! may be used from several threads at once. Plugins are loaded once per
//! process and never unloaded (XLA does not support it).
//!
//! Environment variables: `TESSEL_DEVICE` (see [`Device::from_env`]), `TESSEL_PJRT_PLUGIN` (the CPU plugin),
//! `TESSEL_CACHE_DIR` (where the fetched plugin is kept),
//! `TESSEL_PJRT_GPU_PLUGIN` (the CUDA plugin), `TPU_LIBRARY_PATH` (libtpu),
//! `TESSEL_PYTHON` (the Python used for discovery and fetching; default `python3`).

// Every fallible function here returns the crate-wide `Error`, whose size is
// decided in `crate::error`, not in this module.

mod buffer;
mod cache;
mod checks;
mod client;
mod cost;
mod device;
mod distributed;
mod executable;
mod execute;
pub(crate) mod ffi_calls;
mod interpreter_backend;
mod launch;
mod options;
mod pjrt;
mod plugin;

pub use buffer::DeviceBuffer;
pub use cache::disk::{
    clear_executable_cache, executable_cache_dir, executable_cache_stats, executable_cache_usage,
    DiskCacheStats, DiskCacheUsage,
};
pub use cache::disk::{read_tuning, write_tuning};
pub use cache::mappings::{
    mapping_usage, set_mapping_limit, MappingUsage, EVICT_PERCENT, REFUSE_PERCENT,
};
pub use client::CreateOption;
pub use cost::{CostAnalysis, MemoryStats};
pub use device::Device;
pub use distributed::kv_secret::SECRET_ENV;
pub use distributed::kv_store::{Coordinator, KvStore, MAX_CONNECTIONS};
pub use distributed::DistributedOptions;
pub use executable::{Executable, Program};
pub use interpreter_backend::{InterpreterOptions, OnFinding};
pub use pjrt::api::{AttributeValue, PLUGIN_LOGS_VAR};
pub use plugin::identity::{KnownPlugin, PluginIdentity, Workaround, WORKAROUNDS_VAR};
pub use plugin::nvidia::{nvidia_libraries, preload_nvidia_libraries};
pub use plugin::{
    cache_dir, cached_cpu_plugin, cpu_plugin_path, gpu_plugin_path, install_cpu_plugin_wheel,
    install_plugin, install_plugin_wheel, installed_plugin_path, offline, pinned_plugin,
    tpu_plugin_path, PinnedPlugin, PINNED_PLUGINS,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Device>();
        assert_send_sync::<Executable>();
        assert_send_sync::<DeviceBuffer>();
    }
}
