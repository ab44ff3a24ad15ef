//! Loading the PJRT plugin, and finding it in other environments (in child processes).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use tessel_dsl::runtime::{cpu_plugin_path, Device};
use tessel_dsl::{DeviceError, Error, F32};

use super::{add_program, f32_tensor, spec, CHILD_VAR};

#[test]
fn a_missing_plugin_file_is_plugin_not_found() {
    let missing = std::env::temp_dir()
        .join("tessel-no-such-plugin")
        .join("plugin.so");
    let err = Device::from_plugin(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Device(DeviceError::PluginNotFound(m)) if m.contains("plugin.so")),
        "{err:?}"
    );
}

#[test]
fn a_file_that_is_not_a_plugin_is_plugin_load() {
    let dir = scratch_dir("not-a-plugin");
    let text = dir.join("readme.so");
    std::fs::write(&text, "this is a text file, not a shared library\n").unwrap();
    let err = Device::from_plugin(&text).unwrap_err();
    assert!(
        matches!(&err, Error::Device(DeviceError::PluginLoad { .. })),
        "{err:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// Other environments: the test binary re-runs itself (test `child_entry`, in
// the root module) with one scenario below and a changed environment.

fn scratch_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("tessel-rt-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scenario` in a child process with `set` added to and `remove`
/// removed from the environment; panics if it fails, else returns its stderr.
fn child(scenario: &str, set: &[(&str, OsString)], remove: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_VAR, scenario);
    for var in remove {
        cmd.env_remove(var);
    }
    for (var, value) in set {
        cmd.env(var, value);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {scenario} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stderr
}

#[test]
fn plugin_variables_pointing_nowhere_are_reported() {
    let missing = std::env::temp_dir().join("tessel-missing").join("lib.so");
    let set: Vec<(&str, OsString)> = [
        "TESSEL_PJRT_PLUGIN",
        "TESSEL_PJRT_GPU_PLUGIN",
        "TPU_LIBRARY_PATH",
    ]
    .into_iter()
    .map(|var| (var, missing.clone().into()))
    .collect();
    child("missing_paths", &set, &[]);
}

pub(super) fn child_missing_paths() {
    let err = Device::cpu().unwrap_err().to_string();
    assert!(
        err.contains("TESSEL_PJRT_PLUGIN") && err.contains("tessel-missing"),
        "{err}"
    );
    let err = cpu_plugin_path().unwrap_err();
    assert!(matches!(err, Error::Device(DeviceError::PluginNotFound(_))));
    let err = Device::gpu().unwrap_err().to_string();
    assert!(err.contains("TESSEL_PJRT_GPU_PLUGIN"), "{err}");
    // TPU_LIBRARY_PATH points nowhere, so nothing is loaded.
    let err = Device::tpu().unwrap_err().to_string();
    assert!(err.contains("TPU_LIBRARY_PATH"), "{err}");
}

#[test]
fn a_corrupt_cached_plugin_is_discarded_not_loaded() {
    let cache = scratch_dir("corrupt-cache");
    let dir = cache.join("xla-cpu-pjrt-0.0.1");
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("xla_cpu_pjrt.so");
    std::fs::write(&plugin, b"\x7fELF truncated").unwrap();
    // No Python: the refetch fails cleanly instead of downloading.
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("TESSEL_PYTHON", cache.join("no-such-python").into()),
    ];
    child("corrupt_cache", &set, &["TESSEL_PJRT_PLUGIN"]);
    assert!(!plugin.exists(), "the damaged plugin was not removed");
    std::fs::remove_dir_all(&cache).unwrap();
}

pub(super) fn child_corrupt_cache() {
    // Never mapped (a truncated .so would crash the process): verified,
    // discarded, and fetched again, which fails here without Python.
    match Device::cpu().unwrap_err() {
        Error::Device(DeviceError::PluginNotFound(message)) => {
            assert!(message.contains("TESSEL_PJRT_PLUGIN"), "{message}");
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
}

#[test]
fn without_python_the_error_says_what_to_do() {
    let cache = scratch_dir("no-python");
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("TESSEL_PYTHON", cache.join("no-such-python").into()),
    ];
    child("no_python", &set, &["TESSEL_PJRT_PLUGIN"]);
    std::fs::remove_dir_all(&cache).unwrap();
}

pub(super) fn child_no_python() {
    match Device::cpu().unwrap_err() {
        Error::Device(DeviceError::PluginNotFound(message)) => {
            assert!(message.contains("TESSEL_PJRT_PLUGIN"), "{message}");
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
}

#[cfg(unix)]
#[test]
fn an_installed_python_package_is_found() {
    if Command::new("python3")
        .arg("-c")
        .arg("pass")
        .output()
        .is_err()
    {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let real = cpu_plugin_path().unwrap();
    let site = scratch_dir("site");
    let package = site.join("xla_plugins").join("xla_cpu_pjrt");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("__init__.py"), "").unwrap();
    std::os::unix::fs::symlink(&real, package.join("xla_cpu_pjrt.so")).unwrap();
    let cache = scratch_dir("empty-cache");
    let set = [
        ("TESSEL_CACHE_DIR", cache.clone().into()),
        ("PYTHONPATH", site.clone().into()),
        ("TESSEL_TEST_SITE", site.clone().into()),
    ];
    child("python_package", &set, &["TESSEL_PJRT_PLUGIN"]);
    std::fs::remove_dir_all(&site).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
}

pub(super) fn child_python_package() {
    let site = PathBuf::from(std::env::var_os("TESSEL_TEST_SITE").unwrap());
    let path = cpu_plugin_path().unwrap();
    assert!(path.starts_with(&site), "{}", path.display());
    assert_eq!(Device::cpu().unwrap().platform_name(), "cpu");
}

/// Fetches the 63 MB wheel with pip into an empty cache from two processes
/// at once: both must succeed and only one may download.
#[test]
#[ignore = "downloads the 63 MB xla-cpu-pjrt wheel"]
fn fetch_into_an_empty_cache() {
    let cache = scratch_dir("fetch");
    let set = [("TESSEL_CACHE_DIR", OsString::from(cache.as_os_str()))];
    let logs: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| s.spawn(|| child("fetch", &set, &["TESSEL_PJRT_PLUGIN"])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let fetches = logs
        .iter()
        .filter(|l| l.contains("tessel: fetching"))
        .count();
    assert_eq!(fetches, 1, "{logs:?}");
    // Nothing but the plugin directory and the lock file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["xla-cpu-pjrt-0.0.1", "xla-cpu-pjrt-0.0.1.lock"]);
    std::fs::remove_dir_all(&cache).unwrap();
}

pub(super) fn child_fetch() {
    let cache = PathBuf::from(std::env::var_os("TESSEL_CACHE_DIR").unwrap());
    let path = cpu_plugin_path().unwrap();
    assert_eq!(
        path,
        cache.join("xla-cpu-pjrt-0.0.1").join("xla_cpu_pjrt.so")
    );
    assert!(path.is_file());
    let t = spec(&[2], F32);
    let exe = Device::cpu().unwrap().compile(&add_program(&t)).unwrap();
    let out = exe
        .run(&[
            &f32_tensor(&[1.0, 2.0], &[2]),
            &f32_tensor(&[3.0, 4.0], &[2]),
        ])
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
}
