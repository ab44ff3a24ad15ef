//! Finding PJRT plugins, and fetching the XLA CPU plugin when none is found.
//!
//! The CPU plugin ([`cpu_plugin_path`]) is looked up in this order:
//!
//! 1. `TESSEL_PJRT_PLUGIN`: a path to a plugin `.so` (an error if it does not exist);
//! 2. the cache: `<cache>/xla-cpu-pjrt-0.0.1/xla_cpu_pjrt.so` (see [`cache_dir`]);
//! 3. an installed `xla-cpu-pjrt` Python package
//!    (`xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so`);
//! 4. fetched into the cache with `python3 -m pip download` (x86-64 Linux only),
//!    after checking the wheel's pinned SHA-256.
//!
//! Fetching takes an exclusive lock on `<cache>/xla-cpu-pjrt-0.0.1.lock`, so
//! concurrent processes download once; the plugin is extracted to a temporary
//! file and renamed into place, so a half-written file is never at the final path.
//! The interpreter is `$TESSEL_PYTHON` if set, else `python3`.

pub(super) mod elf;
pub(super) mod identity;
mod install;
pub(super) mod nvidia;
mod pinned;
pub(super) mod python;
pub(super) mod stamp;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use self::install::fetch;
use self::pinned::OFFICIAL;
use crate::error::{DeviceError, Result};

pub use self::install::{
    install_cpu_plugin_wheel, install_plugin, install_plugin_wheel, installed_plugin_path,
};
pub use self::pinned::{pinned_plugin, PinnedPlugin, PINNED_PLUGINS};

fn not_found(message: impl std::fmt::Display) -> crate::Error {
    DeviceError::PluginNotFound(message.to_string()).into()
}

fn env_value(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The plugin path named by environment variable `var`, if set; an error
/// naming the variable if it points nowhere.
fn env_plugin(var: &str) -> Result<Option<PathBuf>> {
    match env_value(var) {
        None => Ok(None),
        Some(v) => {
            let path = PathBuf::from(v);
            if path.is_file() {
                Ok(Some(path))
            } else {
                Err(not_found(format!(
                    "{var} is set to {}, which does not exist or is not a file",
                    path.display()
                )))
            }
        }
    }
}

/// tessel's cache directory: `$TESSEL_CACHE_DIR` if set, else
/// `$XDG_CACHE_HOME/tessel`, else `$HOME/.cache/tessel` (on Windows,
/// `%LOCALAPPDATA%\tessel`). It is not created here.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = env_value("TESSEL_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(xdg) = env_value("XDG_CACHE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Ok(xdg.join("tessel"));
        }
    }
    if let Some(home) = env_value("HOME") {
        return Ok(PathBuf::from(home).join(".cache").join("tessel"));
    }
    if let Some(local) = env_value("LOCALAPPDATA") {
        return Ok(PathBuf::from(local).join("tessel"));
    }
    Err(not_found(
        "cannot tell where tessel's cache is: set TESSEL_CACHE_DIR (or HOME)",
    ))
}

/// Where the fetched CPU plugin lives inside `cache`.
fn cached_plugin(cache: &Path) -> PathBuf {
    install::cached_path(cache, &OFFICIAL)
}

/// Whether `path` is the CPU plugin in tessel's cache.
pub(crate) fn is_cached(path: &Path) -> bool {
    let Ok(cache) = cache_dir() else {
        return false;
    };
    let cached = cached_plugin(&cache);
    path == cached || fs::canonicalize(&cached).is_ok_and(|c| c == path)
}

/// The path of the XLA CPU PJRT plugin, fetching it into the cache if needed.
///
/// The search order:
///
/// 1. `TESSEL_PJRT_PLUGIN`: a path to a plugin `.so` (an error if it does not exist);
/// 2. the cache: `<cache>/xla-cpu-pjrt-0.0.1/xla_cpu_pjrt.so` (see [`cache_dir`]);
/// 3. an installed `xla-cpu-pjrt` Python package
///    (`xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so`);
/// 4. fetched into the cache with `python3 -m pip download` (x86-64 Linux
///    only), after checking the wheel's pinned SHA-256. One line on stderr
///    says so. Concurrent processes wait on a lock file in the cache and
///    download once. With `TESSEL_OFFLINE=1` ([`offline`]) nothing is
///    downloaded: the error names `tessel plugin install WHEEL`.
///
/// Every failure is [`DeviceError::PluginNotFound`] saying what to do. A
/// successful result is remembered for the rest of the process.
pub fn cpu_plugin_path() -> Result<PathBuf> {
    static RESOLVED: Mutex<Option<PathBuf>> = Mutex::new(None);
    // Held while searching, so one process fetches at most once.
    let mut resolved = RESOLVED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = resolved.as_ref() {
        return Ok(path.clone());
    }
    let path = locate_cpu_plugin()?;
    *resolved = Some(path.clone());
    Ok(path)
}

fn locate_cpu_plugin() -> Result<PathBuf> {
    if let Some(path) = env_plugin("TESSEL_PJRT_PLUGIN")? {
        return Ok(path);
    }
    let cache = cache_dir();
    if let Ok(cache) = &cache {
        let cached = cached_plugin(cache);
        if cached.is_file() {
            if stamp::verify(&cached, OFFICIAL.plugin) {
                return Ok(cached);
            }
            // Truncated or corrupted: loading it would crash the process.
            eprintln!(
                "tessel: the cached plugin {} is damaged (size or SHA-256 differ); fetching it again",
                cached.display()
            );
            stamp::discard(&cached);
        }
    }
    if let Some(path) =
        python::find_package_file(&[("xla_plugins.xla_cpu_pjrt", OFFICIAL.file_name())])
    {
        return Ok(path);
    }
    fetch(&cache?, &OFFICIAL)
}

/// Whether `TESSEL_OFFLINE` forbids downloading the plugin (set and not
/// `0`, `false`, `no` or `off`).
pub fn offline() -> bool {
    env_value("TESSEL_OFFLINE").is_some_and(|v| {
        !matches!(
            v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

/// Where the fetched CPU plugin is kept in tessel's cache (whether or not
/// it is there yet).
///
/// ```
/// if let Ok(path) = tessel_dsl::runtime::cached_cpu_plugin() {
///     println!("{} ({})", path.display(), if path.is_file() { "installed" } else { "not installed" });
/// }
/// ```
pub fn cached_cpu_plugin() -> Result<PathBuf> {
    Ok(cached_plugin(&cache_dir()?))
}

/// The path of a CUDA PJRT plugin: `$TESSEL_PJRT_GPU_PLUGIN`, else the one in
/// an installed `jax-cuda13-pjrt` or `jax-cuda12-pjrt` Python package. Never
/// fetched.
pub fn gpu_plugin_path() -> Result<PathBuf> {
    if let Some(path) = env_plugin("TESSEL_PJRT_GPU_PLUGIN")? {
        return Ok(path);
    }
    python::find_package_file(&[
        ("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
        ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
    ])
    .ok_or_else(|| {
        not_found(
            "no CUDA PJRT plugin found: install one with `python3 -m pip install \
             jax-cuda13-pjrt` (or jax-cuda12-pjrt for CUDA 12), or set \
             TESSEL_PJRT_GPU_PLUGIN to a PJRT CUDA plugin .so",
        )
    })
}

/// The path of libtpu: `$TPU_LIBRARY_PATH`, else the one in an installed
/// `libtpu` Python package. Only finds the file; nothing is loaded.
pub fn tpu_plugin_path() -> Result<PathBuf> {
    if let Some(path) = env_plugin("TPU_LIBRARY_PATH")? {
        return Ok(path);
    }
    python::find_package_file(&[("libtpu", "libtpu.so")]).ok_or_else(|| {
        not_found(
            "libtpu not found: on a Cloud TPU VM install it with `python3 -m pip install \
             libtpu`, or set TPU_LIBRARY_PATH to libtpu.so",
        )
    })
}
