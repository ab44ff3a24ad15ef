//! NVIDIA's libraries for the CUDA plugin, found the way JAX finds them.
//!
//! `pip install "jax[cuda13]"` puts the CUDA plugin in
//! `site-packages/jax_plugins/xla_cuda13/` and NVIDIA's libraries (cuDNN,
//! cuBLAS, the runtime, NCCL, ...) in `site-packages/nvidia/*/lib/`. The
//! plugin opens them at run time; JAX loads them first, from the `nvidia`
//! packages, so that every later lookup finds these copies whatever the
//! loader path says. [`preload_nvidia_libraries`] does the same for a
//! program that loads the plugin directly: each library present next to the
//! plugin is loaded (and kept) before the plugin itself.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Result;

/// The libraries for CUDA 13 (`nvidia/<package>/lib/<file>`), in load order:
/// each after the ones it needs.
const CUDA13: &[(&str, &str)] = &[
    ("cu13", "libcudart.so.13"),
    ("cu13", "libnvrtc.so.13"),
    ("cu13", "libnvJitLink.so.13"),
    ("cu13", "libcublasLt.so.13"),
    ("cu13", "libcublas.so.13"),
    ("nccl", "libnccl.so.2"),
    ("cu13", "libcupti.so.13"),
    ("cu13", "libcusparse.so.12"),
    ("cu13", "libcusolver.so.12"),
    ("cu13", "libcufft.so.12"),
    ("nvshmem", "libnvshmem_host.so.3"),
    ("cudnn", "libcudnn.so.9"),
];

/// The libraries for CUDA 12, in load order.
const CUDA12: &[(&str, &str)] = &[
    ("cuda_runtime", "libcudart.so.12"),
    ("cuda_nvrtc", "libnvrtc.so.12"),
    ("nvjitlink", "libnvJitLink.so.12"),
    ("cublas", "libcublasLt.so.12"),
    ("cublas", "libcublas.so.12"),
    ("nccl", "libnccl.so.2"),
    ("cuda_cupti", "libcupti.so.12"),
    ("cusparse", "libcusparse.so.12"),
    ("cusolver", "libcusolver.so.11"),
    ("cufft", "libcufft.so.11"),
    ("nvshmem", "libnvshmem_host.so.3"),
    ("cudnn", "libcudnn.so.9"),
];

/// The `nvidia` package directory next to a CUDA plugin: the plugin's
/// `site-packages/nvidia` (two levels up, where pip puts both) or, for a
/// plugin copied out of its package, `nvidia` beside the plugin's
/// directory. These are the places the plugin's own RPATH names.
fn nvidia_dir(plugin: &Path) -> Option<PathBuf> {
    let dir = plugin.parent()?;
    [dir.parent().and_then(Path::parent), dir.parent()]
        .into_iter()
        .flatten()
        .map(|base| base.join("nvidia"))
        .find(|d| d.is_dir())
}

/// NVIDIA's pip-installed libraries that belong with the CUDA plugin at
/// `plugin`, in the order they are loaded: the CUDA 13 set when
/// `nvidia/cu13` holds the runtime, else the CUDA 12 set. Only files that
/// exist are listed; an empty list means there is nothing to preload (the
/// system's libraries, found through the loader path, are used).
///
/// ```
/// let libs = tessel_dsl::runtime::nvidia_libraries("no/such/xla_cuda_plugin.so");
/// assert!(libs.is_empty());
/// ```
pub fn nvidia_libraries(plugin: impl AsRef<Path>) -> Vec<PathBuf> {
    let Some(nvidia) = nvidia_dir(plugin.as_ref()) else {
        return Vec::new();
    };
    let lib = |(package, file): &(&str, &str)| nvidia.join(package).join("lib").join(file);
    let set = if lib(&CUDA13[0]).is_file() {
        CUDA13
    } else {
        CUDA12
    };
    set.iter().map(lib).filter(|p| p.is_file()).collect()
}

/// Whether preloading is on: `TESSEL_NVIDIA_PRELOAD=0` turns it off (use
/// the libraries the loader path finds).
fn preload_enabled() -> bool {
    std::env::var("TESSEL_NVIDIA_PRELOAD").map_or(true, |v| v.trim() != "0")
}

/// Libraries loaded so far; kept for the life of the process, as the plugin
/// that uses them is.
static LOADED: Mutex<Vec<(PathBuf, libloading::os::unix::Library)>> = Mutex::new(Vec::new());

/// Loads [`nvidia_libraries`] of `plugin`, each once per process, with
/// global symbol visibility, before the plugin is loaded; returns the
/// libraries loaded. `TESSEL_NVIDIA_PRELOAD=0` skips it. A library that is
/// present but does not load (a damaged file, a wrong architecture, a
/// dependency missing) is an error naming it.
pub fn preload_nvidia_libraries(plugin: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    if !preload_enabled() {
        return Ok(Vec::new());
    }
    let libraries = nvidia_libraries(plugin);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    for path in &libraries {
        if loaded.iter().any(|(p, _)| p == path) {
            continue;
        }
        // A file cut short would be mapped and crash the process on first
        // touch of a page past its end.
        super::elf::check_whole(path).map_err(|m| load_error(path, m))?;
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
        // SAFETY: loading a shared library runs its initializers. These are
        // NVIDIA's CUDA libraries from their pip packages, which the CUDA
        // plugin loads anyway; their initializers only set up the libraries.
        let library = unsafe { libloading::os::unix::Library::open(Some(path), flags) }
            .map_err(|e| load_error(path, e.to_string()))?;
        loaded.push((path.clone(), library));
    }
    Ok(libraries)
}

fn load_error(path: &Path, message: impl Into<String>) -> crate::Error {
    let message = format!(
        "NVIDIA library for the CUDA plugin: {} (TESSEL_NVIDIA_PRELOAD=0 skips the preload)",
        message.into()
    );
    super::super::pjrt::api::load_error(path, message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tessel-nvidia-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("jax_plugins/xla_cuda13")).unwrap();
        dir
    }

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn finds_the_cuda13_set_in_load_order_and_only_files_that_exist() {
        let dir = site("13");
        let plugin = dir.join("jax_plugins/xla_cuda13/xla_cuda_plugin.so");
        touch(&plugin);
        assert!(nvidia_libraries(&plugin).is_empty());
        for f in ["libcudnn.so.9", "libcublas.so.13"] {
            let pkg = if f.starts_with("libcudnn") {
                "cudnn"
            } else {
                "cu13"
            };
            touch(&dir.join("nvidia").join(pkg).join("lib").join(f));
        }
        // Without the CUDA 13 runtime, the CUDA 12 set is looked for.
        let found = nvidia_libraries(&plugin);
        assert_eq!(found, vec![dir.join("nvidia/cudnn/lib/libcudnn.so.9")]);
        touch(&dir.join("nvidia/cu13/lib/libcudart.so.13"));
        let names: Vec<String> = nvidia_libraries(&plugin)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["libcudart.so.13", "libcublas.so.13", "libcudnn.so.9"]
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn finds_the_cuda12_set_beside_a_copied_plugin() {
        let dir = site("12");
        let plugin = dir.join("plugins/xla_cuda_plugin.so");
        touch(&plugin);
        touch(&dir.join("nvidia/cuda_runtime/lib/libcudart.so.12"));
        touch(&dir.join("nvidia/cublas/lib/libcublasLt.so.12"));
        assert_eq!(
            nvidia_libraries(&plugin),
            vec![
                dir.join("nvidia/cuda_runtime/lib/libcudart.so.12"),
                dir.join("nvidia/cublas/lib/libcublasLt.so.12")
            ]
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A library already in this process (the C library), under an NVIDIA
    /// name: loading it again maps nothing new.
    fn libc_path() -> PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .map(PathBuf::from)
            .expect("the C library is mapped")
    }

    #[test]
    fn preloads_present_libraries_once_and_names_one_that_fails() {
        let dir = site("load");
        let plugin = dir.join("jax_plugins/xla_cuda13/xla_cuda_plugin.so");
        touch(&plugin);
        let runtime = dir.join("nvidia/cu13/lib/libcudart.so.13");
        std::fs::create_dir_all(runtime.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(libc_path(), &runtime).unwrap();
        assert_eq!(
            preload_nvidia_libraries(&plugin).unwrap(),
            vec![runtime.clone()]
        );
        assert_eq!(preload_nvidia_libraries(&plugin).unwrap(), vec![runtime]);

        // An empty file is not a library: the error names it.
        let cudnn = dir.join("nvidia/cudnn/lib/libcudnn.so.9");
        touch(&cudnn);
        let e = preload_nvidia_libraries(&plugin).unwrap_err().to_string();
        assert!(
            e.contains("libcudnn.so.9") && e.contains("NVIDIA library"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
