//! Plugin trouble seen from the command: a plugin file cut short and a pip
//! that cannot fetch the plugin are one-line errors with exit code 2, not
//! crashes or pages of pip output.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `tessel info` with `set` added to and `remove` removed from the
/// environment: exit code and stderr.
fn info_with(set: &[(&str, &Path)], remove: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessel"));
    cmd.arg("info");
    for var in remove {
        cmd.env_remove(var);
    }
    for (var, value) in set {
        cmd.env(var, value);
    }
    let out = cmd.output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of `stderr` that are tessel's own (the plugin logs its own
/// lines while loading).
fn tessel_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("tessel:"))
        .collect()
}

#[test]
fn a_truncated_plugin_is_an_error_not_a_crash() {
    let real = tessel::runtime::cpu_plugin_path().unwrap();
    let dir = scratch("truncated-plugin");
    for (name, keep) in [("head.so", 4 << 20), ("header-only.so", 64)] {
        let mut head = Vec::new();
        std::fs::File::open(&real)
            .unwrap()
            .take(keep)
            .read_to_end(&mut head)
            .unwrap();
        let cut = dir.join(name);
        std::fs::write(&cut, head).unwrap();
        // Loading this file used to end the process with SIGBUS.
        let (code, err) = info_with(&[("TESSEL_PJRT_PLUGIN", &cut)], &[]);
        assert_eq!(code, 2, "{name}: {err}");
        let lines = tessel_lines(&err);
        assert_eq!(lines.len(), 1, "{name}: {err}");
        assert!(
            lines[0].contains("cannot load PJRT plugin") && lines[0].contains("truncated"),
            "{name}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_failing_pip_is_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("failing-pip");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    // A Python whose pip fails the way pip does without a package index.
    let python = dir.join("python3");
    std::fs::write(
        &python,
        "#!/bin/sh\n\
         echo 'Looking in links: nowhere' >&2\n\
         echo 'ERROR: Could not find a version that satisfies the requirement xla-cpu-pjrt==0.0.1 (from versions: none)' >&2\n\
         echo 'ERROR: No matching distribution found for xla-cpu-pjrt==0.0.1' >&2\n\
         exit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, err) = info_with(
        &[("TESSEL_CACHE_DIR", &cache), ("TESSEL_PYTHON", &python)],
        &["TESSEL_PJRT_PLUGIN"],
    );
    assert_eq!(code, 2, "{err}");
    // The notice that a fetch starts, then the error on one line.
    let lines = tessel_lines(&err);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        lines[0].contains("fetching the XLA CPU PJRT plugin"),
        "{err}"
    );
    assert!(
        lines[1].contains("`pip download xla-cpu-pjrt==0.0.1` failed")
            && lines[1].contains("No matching distribution found")
            && lines[1].contains("TESSEL_PJRT_PLUGIN"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
