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
    /// It ran and failed; holds the gist of its stderr, on one line.
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
            stderr_summary(&output.stderr)
        )))
    }
}

/// The gist of a process's stderr on one line, for error messages: pip's
/// `ERROR:` lines if there are any (the last two, the ones that say why),
/// else the last non-empty line (a Python traceback ends with the
/// exception), cut to 400 characters.
fn stderr_summary(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("ERROR:"))
        .collect();
    let picked = if errors.is_empty() {
        lines
            .last()
            .copied()
            .unwrap_or("(no output on stderr)")
            .to_string()
    } else {
        errors[errors.len().saturating_sub(2)..].join(" ")
    };
    match picked.char_indices().nth(400) {
        Some((cut, _)) => format!("{}...", &picked[..cut]),
        None => picked,
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

#[cfg(test)]
mod tests {
    use super::stderr_summary;

    #[test]
    fn stderr_is_summarized_on_one_line() {
        let pip = b"Looking for a package\n  WARNING: Retrying after a reset connection\n\
            ERROR: Could not find a version that satisfies the requirement pkg==1 (from versions: none)\n\
            ERROR: No matching distribution found for pkg==1\n\n";
        assert_eq!(
            stderr_summary(pip),
            "ERROR: Could not find a version that satisfies the requirement pkg==1 (from versions: \
             none) ERROR: No matching distribution found for pkg==1"
        );
        let traceback = b"Traceback (most recent call last):\n  File \"<string>\", line 2\n\
            zipfile.BadZipFile: File is not a zip file\n";
        assert_eq!(
            stderr_summary(traceback),
            "zipfile.BadZipFile: File is not a zip file"
        );
        assert_eq!(stderr_summary(b"\n \n"), "(no output on stderr)");
        let long = "é".repeat(1000);
        let cut = stderr_summary(long.as_bytes());
        assert!(cut.ends_with("...") && cut.chars().count() == 403, "{cut}");
    }
}
