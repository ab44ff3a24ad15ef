//! Verifying the cached CPU plugin before it is loaded: a truncated or
//! corrupted `.so` in the cache would crash every process that maps it
//! (SIGBUS), so its size and SHA-256 are checked against the pinned
//! plugin. Hashing 250 MB on every start would cost half a second, so a
//! successful check writes a stamp (size and modification time) beside the
//! file; while the file's size and time match the stamp it is trusted, and
//! any change re-hashes it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

/// What the pinned plugin file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expected {
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its SHA-256, lowercase hex.
    pub(crate) sha256: &'static str,
}

fn stamp_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    file.with_file_name(name)
}

/// `size mtime-nanoseconds` of `file`, and on Unix its device, inode and
/// status-change time: writing the file changes its ctime even when the
/// writer restores the size and mtime (which zeroing 200 MiB of the
/// plugin and `touch -d` did, and the process then crashed loading it).
pub(crate) fn fingerprint(file: &Path) -> Option<String> {
    let meta = fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    let nanos = meta
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    #[cfg(unix)]
    let identity = {
        use std::os::unix::fs::MetadataExt;
        format!(
            " {} {} {}.{}",
            meta.dev(),
            meta.ino(),
            meta.ctime(),
            meta.ctime_nsec()
        )
    };
    #[cfg(not(unix))]
    let identity = String::new();
    Some(format!("{} {nanos}{identity}", meta.len()))
}

/// The SHA-256 of a file, lowercase hex.
pub(crate) fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Whether `file` is the expected plugin: its size first, then the stamp,
/// else its hash (writing the stamp when it matches).
pub(crate) fn verify(file: &Path, expected: Expected) -> bool {
    let Some(print) = fingerprint(file) else {
        return false;
    };
    if !print.starts_with(&format!("{} ", expected.size)) {
        return false;
    }
    let stamp = stamp_path(file);
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == print) {
        return true;
    }
    match sha256_file(file) {
        Ok(h) if h == expected.sha256 => {
            // Best effort: without a stamp the next start hashes again.
            let _ = fs::write(&stamp, &print);
            true
        }
        _ => false,
    }
}

/// Removes a bad cached plugin and its stamp (so it is fetched again).
pub(crate) fn discard(file: &Path) {
    let _ = fs::remove_file(stamp_path(file));
    let _ = fs::remove_file(file);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC: Expected = Expected {
        size: 3,
        sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    };

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessel-stamp-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_right_file_is_stamped_and_then_trusted() {
        let dir = scratch("ok");
        let f = dir.join("plugin.so");
        fs::write(&f, b"abc").unwrap();
        assert!(verify(&f, ABC));
        assert!(stamp_path(&f).exists());
        assert!(verify(&f, ABC));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncated_or_corrupted_files_are_refused() {
        let dir = scratch("bad");
        let f = dir.join("plugin.so");
        fs::write(&f, b"ab").unwrap();
        assert!(!verify(&f, ABC), "truncated");
        fs::write(&f, b"abd").unwrap();
        assert!(!verify(&f, ABC), "same size, other bytes");
        assert!(!stamp_path(&f).exists());
        // A stamp from an earlier good file does not cover a rewritten one.
        fs::write(&f, b"abc").unwrap();
        assert!(verify(&f, ABC));
        fs::write(&f, b"abx").unwrap();
        // A new time, however coarse the file system's clock.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(!verify(&f, ABC), "rewritten after stamping");
        discard(&f);
        assert!(!f.exists() && !stamp_path(&f).exists());
        assert!(!verify(&dir.join("missing.so"), ABC));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Overwritten in place with its size and mtime restored: the stamp no
    /// longer matches (the ctime moved), so the file is hashed and refused.
    #[cfg(unix)]
    #[test]
    fn a_rewrite_that_restores_size_and_mtime_is_caught() {
        let dir = scratch("ctime");
        let f = dir.join("plugin.so");
        fs::write(&f, b"abc").unwrap();
        assert!(verify(&f, ABC));
        let mtime = fs::metadata(&f).unwrap().modified().unwrap();
        // Let the status-change clock move past the stamp's.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&f, b"\0\0\0").unwrap();
        fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(fs::metadata(&f).unwrap().modified().unwrap(), mtime);
        assert!(!verify(&f, ABC), "zeroed with the mtime restored");
        fs::remove_dir_all(&dir).unwrap();
    }
}
