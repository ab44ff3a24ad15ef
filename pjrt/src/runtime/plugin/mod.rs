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
pub(super) mod nvidia;
pub(super) mod python;
pub(super) mod stamp;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use self::python::PythonError;
use self::stamp::{sha256_file, Expected};
use crate::error::{DeviceError, Result};

/// The pinned CPU plugin package.
const PACKAGE: &str = "xla-cpu-pjrt";
/// Its pinned version.
const VERSION: &str = "0.0.1";
/// The only wheel published for it (x86-64 Linux).
const WHEEL_FILE: &str = "xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl";
/// SHA-256 of [`WHEEL_FILE`].
const WHEEL_SHA256: &str = "55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc";
/// The plugin inside the wheel.
/// The plugin file inside the pinned wheel.
const PLUGIN: Expected = Expected {
    size: 259_284_552,
    sha256: "88c3f28c5900f48ad4a82cab9e79bba9537809743395e341485f8794268820dc",
};
const WHEEL_MEMBER: &str = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
/// The plugin's file name.
const PLUGIN_FILE: &str = "xla_cpu_pjrt.so";

/// Download directories inside the cache start with this.
const FETCH_PREFIX: &str = ".xla-cpu-pjrt-fetch-";

/// What to do when the CPU plugin cannot be obtained automatically.
const CPU_HINT: &str = "install Python 3 with pip (tessel then fetches the plugin itself), \
     or download the xla-cpu-pjrt 0.0.1 wheel, unzip it and set TESSEL_PJRT_PLUGIN to its \
     xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
/// What to do when pip ran and could not download the plugin.
const PIP_HINT: &str = "check the network and pip's configuration, or download the \
     xla-cpu-pjrt 0.0.1 wheel, unzip it and set TESSEL_PJRT_PLUGIN to its \
     xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";

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
    cache.join(format!("{PACKAGE}-{VERSION}")).join(PLUGIN_FILE)
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
            if stamp::verify(&cached, PLUGIN) {
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
    if let Some(path) = python::find_package_file(&[("xla_plugins.xla_cpu_pjrt", PLUGIN_FILE)]) {
        return Ok(path);
    }
    fetch_cpu_plugin(&cache?)
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

/// Whether a prebuilt CPU plugin wheel exists for this platform.
const FETCH_SUPPORTED: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

fn fetch_cpu_plugin(cache: &Path) -> Result<PathBuf> {
    if !FETCH_SUPPORTED {
        return Err(not_found(format!(
            "no prebuilt XLA CPU PJRT plugin exists for {}-{} ({PACKAGE} ships x86-64 Linux \
             only): build or obtain a PJRT CPU plugin and set TESSEL_PJRT_PLUGIN to its path",
            std::env::consts::OS,
            std::env::consts::ARCH
        )));
    }
    if offline() {
        return Err(not_found(format!(
            "the XLA CPU PJRT plugin is not installed and TESSEL_OFFLINE is set, so it is not \
             downloaded: install it from a downloaded {WHEEL_FILE} with `tessel plugin install \
             WHEEL` (or `install_cpu_plugin_wheel`), or set TESSEL_PJRT_PLUGIN to a plugin file"
        )));
    }
    let _lock = CacheLock::acquire(cache)?;
    let target = cached_plugin(cache);
    // Another process may have installed it while we waited for the lock.
    if target.is_file() && stamp::verify(&target, PLUGIN) {
        return Ok(target);
    }
    remove_stale_files(cache);
    eprintln!(
        "tessel: fetching the XLA CPU PJRT plugin ({PACKAGE} {VERSION}, 63 MB) into {}...",
        cache.display()
    );
    let download = TempDir::create(cache)?;
    python::pip_download(&format!("{PACKAGE}=={VERSION}"), download.path()).map_err(|e| {
        not_found(match e {
            PythonError::NotFound(m) => format!("{m}; {CPU_HINT}"),
            PythonError::Failed(m) => {
                format!("`pip download {PACKAGE}=={VERSION}` failed: {m}; {PIP_HINT}")
            }
        })
    })?;
    let wheel = download.path().join(WHEEL_FILE);
    if !wheel.is_file() {
        return Err(not_found(format!(
            "`pip download {PACKAGE}=={VERSION}` did not produce {WHEEL_FILE}; {CPU_HINT}"
        )));
    }
    install_locked(&wheel, cache)
}

/// Installs the CPU plugin from an already downloaded
/// `xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl` into the cache
/// (for machines without network access), after checking its SHA-256.
/// Returns the installed plugin's path.
pub fn install_cpu_plugin_wheel(wheel: impl AsRef<Path>) -> Result<PathBuf> {
    let wheel = wheel.as_ref();
    verify_wheel(wheel)?;
    let cache = cache_dir()?;
    let _lock = CacheLock::acquire(&cache)?;
    let target = cached_plugin(&cache);
    if target.is_file() && stamp::verify(&target, PLUGIN) {
        return Ok(target);
    }
    remove_stale_files(&cache);
    install_locked(wheel, &cache)
}

/// Checks the wheel's SHA-256 against the pinned value.
fn verify_wheel(wheel: &Path) -> Result<()> {
    // A FIFO or a device (`/dev/zero`) would block or read forever.
    if !fs::metadata(wheel).is_ok_and(|m| m.is_file()) {
        return Err(not_found(format!(
            "{} is not a regular file (the downloaded wheel); {CPU_HINT}",
            wheel.display()
        )));
    }
    let digest = sha256_file(wheel)
        .map_err(|e| not_found(format!("cannot read {}: {e}; {CPU_HINT}", wheel.display())))?;
    if digest != WHEEL_SHA256 {
        return Err(not_found(format!(
            "{} has SHA-256 {digest}, expected {WHEEL_SHA256} for {PACKAGE} {VERSION}: \
             the download is corrupt or not the pinned wheel; delete it and retry, or {CPU_HINT}",
            wheel.display()
        )));
    }
    Ok(())
}

/// With the cache lock held: verify, extract to a temporary file, rename into place.
fn install_locked(wheel: &Path, cache: &Path) -> Result<PathBuf> {
    verify_wheel(wheel)?;
    let target = cached_plugin(cache);
    let dir = target.parent().unwrap_or(cache);
    fs::create_dir_all(dir)
        .map_err(|e| not_found(format!("cannot create {}: {e}; {CPU_HINT}", dir.display())))?;
    let partial = dir.join(format!(".{PLUGIN_FILE}.{}.partial", unique_suffix()));
    let extracted = python::unzip_member(wheel, WHEEL_MEMBER, &partial)
        .map_err(|e| {
            not_found(format!(
                "cannot extract {WHEEL_MEMBER} from {}: {e}; {CPU_HINT}",
                wheel.display()
            ))
        })
        .and_then(|()| {
            File::open(&partial)
                .and_then(|f| f.sync_all())
                .map_err(|e| not_found(format!("cannot write {}: {e}", partial.display())))
        })
        .and_then(|()| {
            fs::rename(&partial, &target).map_err(|e| {
                not_found(format!(
                    "cannot move the plugin into {}: {e}",
                    target.display()
                ))
            })
        });
    if extracted.is_err() {
        let _ = fs::remove_file(&partial);
    }
    extracted?;
    // Hashes the extracted file once and stamps it.
    if !stamp::verify(&target, PLUGIN) {
        stamp::discard(&target);
        return Err(not_found(format!(
            "the plugin extracted from {} is not the pinned one (size or SHA-256 differ); {CPU_HINT}",
            wheel.display()
        )));
    }
    Ok(target)
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// Removes leftovers of fetches that were interrupted (only called with the
/// lock held, so no live fetch owns them).
fn remove_stale_files(cache: &Path) {
    let dir = cached_plugin(cache);
    let dirs = [Some(cache), dir.parent()];
    for d in dirs.into_iter().flatten() {
        let Ok(entries) = fs::read_dir(d) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(FETCH_PREFIX) {
                let _ = fs::remove_dir_all(entry.path());
            } else if name.starts_with(&format!(".{PLUGIN_FILE}.")) && name.ends_with(".partial") {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// An exclusive lock on `<cache>/xla-cpu-pjrt-0.0.1.lock`, released on drop.
struct CacheLock {
    _file: File,
}

impl CacheLock {
    fn acquire(cache: &Path) -> Result<CacheLock> {
        fs::create_dir_all(cache).map_err(|e| {
            not_found(format!(
                "cannot create the cache directory {}: {e}; set TESSEL_CACHE_DIR to a \
                 writable directory, or {CPU_HINT}",
                cache.display()
            ))
        })?;
        let path = cache.join(format!("{PACKAGE}-{VERSION}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| not_found(format!("cannot open {}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| not_found(format!("cannot lock {}: {e}", path.display())))?;
        Ok(CacheLock { _file: file })
    }
}

/// A download directory inside the cache, removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn create(cache: &Path) -> Result<TempDir> {
        let path = cache.join(format!("{FETCH_PREFIX}{}", unique_suffix()));
        fs::create_dir_all(&path)
            .map_err(|e| not_found(format!("cannot create {}: {e}", path.display())))?;
        Ok(TempDir { path })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessel-plugin-{name}-{}", unique_suffix()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_wheel_with_the_wrong_hash_is_refused() {
        let dir = scratch("hash");
        let wheel = dir.join(WHEEL_FILE);
        fs::write(&wheel, b"not a wheel").unwrap();
        let err = install_locked(&wheel, &dir).unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");
        assert!(err.contains("TESSEL_PJRT_PLUGIN"), "{err}");
        assert!(!cached_plugin(&dir).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_wheel_is_an_error() {
        let dir = scratch("missing");
        let err = verify_wheel(&dir.join("nothing.whl")).unwrap_err();
        assert!(matches!(
            err,
            crate::Error::Device(DeviceError::PluginNotFound(_))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_partial_files_are_removed() {
        let dir = scratch("stale");
        let plugin_dir = cached_plugin(&dir).parent().unwrap().to_path_buf();
        fs::create_dir_all(&plugin_dir).unwrap();
        let partial = plugin_dir.join(format!(".{PLUGIN_FILE}.1-2.partial"));
        fs::write(&partial, b"half").unwrap();
        fs::create_dir_all(dir.join(format!("{FETCH_PREFIX}1-2"))).unwrap();
        remove_stale_files(&dir);
        assert!(!partial.exists());
        assert!(!dir.join(format!("{FETCH_PREFIX}1-2")).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
