//! The persistent compilation cache: executables serialized to disk, so a
//! second process compiles nothing the first one compiled.
//!
//! After a PJRT compile, the executable is serialized
//! (`PJRT_Executable_Serialize`) into one file per program under
//! [`executable_cache_dir`]. Before a compile, the file of the same key is
//! read and handed to `PJRT_Executable_DeserializeAndLoad`. The key is the
//! SHA-256 of everything that decides what the compiler produces: the
//! program text, the serialized compile options, the plugin (its path, size,
//! modification time, PJRT API version and attributes), the client's
//! platform and device count, `XLA_FLAGS`, and tessel's version. An entry is trusted
//! only when its header names the same key and the SHA-256 of its payload
//! matches the one recorded when it was written; anything else (a truncated
//! or edited file, a file of another key, one the plugin refuses) is
//! removed and the program compiled again. Plugins are never handed bytes
//! tessel did not write for that very plugin: a foreign executable could
//! abort the process inside the plugin.
//!
//! Control: `TESSEL_EXECUTABLE_CACHE=0` (or `off`) turns it off,
//! `TESSEL_EXECUTABLE_CACHE_DIR` moves it (default `<cache>/executables`,
//! see [`cache_dir`](super::super::cache_dir)), and `TESSEL_EXECUTABLE_CACHE_BYTES`
//! bounds its size (default 2 GiB; the least recently used entries are
//! removed past it). Failures to read or write the cache never fail a
//! compile.

use std::ffi::c_char;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::super::client::Client;
use super::super::pjrt::args::Args;
use super::super::pjrt::call::pjrt_call;
use super::super::pjrt::ffi;
use crate::error::Result;

/// The first bytes of every entry (the last one is the format's version).
const MAGIC: &[u8; 8] = b"TESSELX\x01";
/// Magic, key, payload length, payload SHA-256.
const HEADER_LEN: usize = 8 + 32 + 8 + 32;
/// The file name extension of an entry.
const EXTENSION: &str = "xlaexe";
/// The file name extension of an autotuning choice.
const TUNED_EXTENSION: &str = "tuned";
/// The default bound on the cache's size.
const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// What the persistent cache did in this process (see [`executable_cache_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Compiles answered from disk.
    pub hits: u64,
    /// Compiles that found no entry.
    pub misses: u64,
    /// Entries written.
    pub writes: u64,
    /// Entries found damaged or foreign, removed and compiled again.
    pub rejected: u64,
}

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);
static REJECTED: AtomicU64 = AtomicU64::new(0);

/// What the persistent compilation cache did in this process so far.
///
/// ```
/// let s = tessel_dsl::runtime::executable_cache_stats();
/// assert!(s.hits + s.misses >= s.rejected);
/// ```
pub fn executable_cache_stats() -> DiskCacheStats {
    DiskCacheStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        writes: WRITES.load(Ordering::Relaxed),
        rejected: REJECTED.load(Ordering::Relaxed),
    }
}

/// Where the persistent compilation cache keeps executables:
/// `$TESSEL_EXECUTABLE_CACHE_DIR`, else `executables` in
/// [`cache_dir`](super::super::cache_dir). `None` when it is turned off
/// (`TESSEL_EXECUTABLE_CACHE=0` or `off`) or no cache directory is known.
///
/// ```
/// if let Some(dir) = tessel_dsl::runtime::executable_cache_dir() {
///     println!("executables are cached in {}", dir.display());
/// }
/// ```
pub fn executable_cache_dir() -> Option<PathBuf> {
    let switch = std::env::var("TESSEL_EXECUTABLE_CACHE").unwrap_or_default();
    if matches!(switch.trim(), "0" | "off" | "false" | "no") {
        return None;
    }
    if let Some(dir) = std::env::var_os("TESSEL_EXECUTABLE_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    super::super::cache_dir()
        .ok()
        .map(|d| d.join("executables"))
}

/// The entries of the persistent compilation cache: how many and their size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskCacheUsage {
    /// The directory (`None` when the cache is off).
    pub dir: Option<PathBuf>,
    /// Entries in it.
    pub entries: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Autotuning choices stored beside them (see
    /// `tessel::kernel::autotune`).
    pub tunings: usize,
}

/// The entries in `dir` with their sizes and last use, oldest first.
fn entries(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    files(dir, EXTENSION)
}

/// The files of extension `ext` in `dir` with their sizes and last use,
/// oldest first.
fn files(dir: &Path, ext: &str) -> Vec<(PathBuf, u64, SystemTime)> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<_> = read
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .filter_map(|p| {
            let meta = fs::metadata(&p).ok()?;
            let used = meta.modified().unwrap_or(UNIX_EPOCH);
            Some((p, meta.len(), used))
        })
        .collect();
    found.sort_by_key(|e| e.2);
    found
}

/// How many executables the persistent cache holds and their size.
///
/// ```
/// let usage = tessel_dsl::runtime::executable_cache_usage();
/// println!("{} executables, {} bytes", usage.entries, usage.bytes);
/// ```
pub fn executable_cache_usage() -> DiskCacheUsage {
    let dir = executable_cache_dir();
    let found = dir.as_deref().map(entries).unwrap_or_default();
    let tunings = dir
        .as_deref()
        .map_or(0, |d| files(d, TUNED_EXTENSION).len());
    DiskCacheUsage {
        entries: found.len(),
        bytes: found.iter().map(|e| e.1).sum(),
        tunings,
        dir,
    }
}

/// Removes every executable and autotuning choice from the persistent
/// cache and returns what was removed (files being written by other
/// processes are left alone).
///
/// # Errors
///
/// [`Error::Io`](crate::Error::Io) if an entry cannot be removed.
///
/// ```no_run
/// let removed = tessel_dsl::runtime::clear_executable_cache()?;
/// println!("removed {} executables", removed.entries);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn clear_executable_cache() -> Result<DiskCacheUsage> {
    let Some(dir) = executable_cache_dir() else {
        return Ok(DiskCacheUsage::default());
    };
    let (entries, bytes) = remove_files(&dir, EXTENSION)?;
    let (tunings, _) = remove_files(&dir, TUNED_EXTENSION)?;
    Ok(DiskCacheUsage {
        dir: Some(dir),
        entries,
        bytes,
        tunings,
    })
}

/// Removes the files of extension `ext` in `dir`: how many went and their
/// bytes (a file another process removed first does not count).
fn remove_files(dir: &Path, ext: &str) -> Result<(usize, u64)> {
    let (mut count, mut bytes) = (0, 0);
    for (path, len, _) in files(dir, ext) {
        match fs::remove_file(&path) {
            Ok(()) => {
                count += 1;
                bytes += len;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(crate::Error::Io { path, source }),
        }
    }
    Ok((count, bytes))
}

/// Where the autotuning choice of `key` (lowercase hex) is kept, when the
/// persistent cache is on.
fn tuning_file(key: &str) -> Option<PathBuf> {
    Some(executable_cache_dir()?.join(format!("{key}.{TUNED_EXTENSION}")))
}

/// The stored autotuning record of `key` (see
/// `tessel::kernel::autotune`), if there is one.
pub fn read_tuning(key: &str) -> Option<String> {
    String::from_utf8(read_regular(&tuning_file(key)?).ok()?).ok()
}

/// The largest cache entry read: an executable of the CPU plugin is a few
/// MiB; this bounds what a file put in the cache's place can make us read.
const MAX_ENTRY_BYTES: u64 = 1 << 32;

/// The bytes of `path` if it is a regular file (following symlinks) of at
/// most [`MAX_ENTRY_BYTES`]: a FIFO would block the compile forever and a
/// link to `/dev/zero` would read without end.
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    let meta = fs::metadata(path)?;
    if !meta.is_file() || meta.len() > MAX_ENTRY_BYTES {
        return Err(std::io::Error::other("not a regular cache entry"));
    }
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(MAX_ENTRY_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Stores the autotuning record of `key` (best effort, like executables).
pub fn write_tuning(key: &str, text: &str) {
    if let Some(path) = tuning_file(key) {
        let _ = write_atomically(&path, |f| f.write_all(text.as_bytes()));
    }
}

/// The cache key of a program compiled on `client` with `options`.
pub(crate) fn key(client: &Client, mlir: &str, options: &[u8]) -> [u8; 32] {
    let api = client.api();
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(MAGIC);
    field(env!("CARGO_PKG_VERSION").as_bytes());
    field(api.path().as_os_str().as_encoded_bytes());
    let (size, mtime) = fs::metadata(api.path())
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
            (m.len(), t.map_or(0, |t| t.as_nanos()))
        })
        .unwrap_or((0, 0));
    field(&size.to_le_bytes());
    field(&mtime.to_le_bytes());
    let (major, minor) = api.version();
    field(&major.to_le_bytes());
    field(&minor.to_le_bytes());
    field(format!("{:?}", api.attributes()).as_bytes());
    field(client.platform_name().as_bytes());
    field(&(client.devices().len() as u64).to_le_bytes());
    // XLA reads its debug options from the environment when it compiles.
    field(
        std::env::var_os("XLA_FLAGS")
            .unwrap_or_default()
            .as_encoded_bytes(),
    );
    field(options);
    field(mlir.as_bytes());
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn entry_path(dir: &Path, key: &[u8; 32]) -> PathBuf {
    dir.join(format!("{}.{EXTENSION}", hex(key)))
}

/// The payload of an entry if the file is whole and was written for `key`.
fn verified_payload<'a>(bytes: &'a [u8], key: &[u8; 32]) -> Option<&'a [u8]> {
    let header = bytes.get(..HEADER_LEN)?;
    let (magic, rest) = header.split_at(8);
    let (stored_key, rest) = rest.split_at(32);
    let (len, sha) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().ok()?);
    let payload = &bytes[HEADER_LEN..];
    let whole = magic == MAGIC
        && stored_key == key
        && u64::try_from(payload.len()).ok() == Some(len)
        && Sha256::digest(payload).as_slice() == sha;
    whole.then_some(payload)
}

/// The executable of `key`, deserialized from the cache, or `None` (no
/// cache, no entry, a damaged one, or a plugin without deserialization).
pub(crate) fn load(client: &Client, key: &[u8; 32]) -> Option<*mut ffi::PJRT_LoadedExecutable> {
    let path = entry_path(&executable_cache_dir()?, key);
    let Ok(bytes) = read_regular(&path) else {
        MISSES.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let reject = || {
        REJECTED.fetch_add(1, Ordering::Relaxed);
        let _ = fs::remove_file(&path);
        None
    };
    let Some(payload) = verified_payload(&bytes, key) else {
        return reject();
    };
    let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
    args.client = client.raw();
    args.serialized_executable = payload.as_ptr().cast::<c_char>();
    args.serialized_executable_size = payload.len();
    // SAFETY: the client is live; the payload is bytes this plugin's own
    // `PJRT_Executable_Serialize` produced for this key (the key covers the
    // plugin file and version, the header and checksum were verified), and
    // it outlives the call. The returned executable is owned by the caller.
    let loaded = unsafe { pjrt_call!(client.api(), PJRT_Executable_DeserializeAndLoad, &mut args) };
    match loaded {
        Ok(()) if !args.loaded_executable.is_null() => {
            HITS.fetch_add(1, Ordering::Relaxed);
            // Mark the entry as recently used (for eviction).
            let _ = fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(SystemTime::now()));
            Some(args.loaded_executable)
        }
        _ => reject(),
    }
}

/// Serializes `executable` and writes it under `key` (best effort: a
/// plugin without serialization or an unwritable directory only means the
/// next process compiles again).
pub(crate) fn store(client: &Client, key: &[u8; 32], executable: *mut ffi::PJRT_Executable) {
    let Some(dir) = executable_cache_dir() else {
        return;
    };
    let api = client.api();
    let mut args = ffi::PJRT_Executable_Serialize_Args::new();
    args.executable = executable;
    // SAFETY: the executable is live (owned by the caller for the whole
    // call); the serialized bytes belong to `serialized_executable`, copied
    // out below before its deleter is called once.
    if unsafe { pjrt_call!(api, PJRT_Executable_Serialize, &mut args) }.is_err() {
        return;
    }
    let payload = if args.serialized_bytes.is_null() {
        Vec::new()
    } else {
        // SAFETY: PJRT returned `serialized_bytes_size` bytes at
        // `serialized_bytes`, valid until the deleter runs below.
        unsafe {
            std::slice::from_raw_parts(
                args.serialized_bytes.cast::<u8>(),
                args.serialized_bytes_size,
            )
        }
        .to_vec()
    };
    if let (Some(deleter), false) = (
        args.serialized_executable_deleter,
        args.serialized_executable.is_null(),
    ) {
        // SAFETY: the handle came from this Serialize call and is deleted
        // exactly once, after its bytes were copied.
        unsafe { deleter(args.serialized_executable) };
    }
    if payload.is_empty() || write_entry(&dir, key, &payload).is_err() {
        return;
    }
    WRITES.fetch_add(1, Ordering::Relaxed);
    evict(&dir, max_bytes());
}

/// Writes an entry atomically: to a temporary file, then renamed.
fn write_entry(dir: &Path, key: &[u8; 32], payload: &[u8]) -> std::io::Result<()> {
    write_atomically(&entry_path(dir, key), |f| {
        f.write_all(MAGIC)?;
        f.write_all(key)?;
        f.write_all(&(payload.len() as u64).to_le_bytes())?;
        f.write_all(&Sha256::digest(payload))?;
        f.write_all(payload)
    })
}

/// Writes `path` as `write` fills it, atomically: into a hidden temporary
/// file beside it (creating the directory), then renamed over it, so a
/// reader sees the old file or the whole new one.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let written = fs::File::create(&tmp)
        .and_then(|mut f| write(&mut f))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The size bound: `TESSEL_EXECUTABLE_CACHE_BYTES`, else 2 GiB.
fn max_bytes() -> u64 {
    std::env::var("TESSEL_EXECUTABLE_CACHE_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_BYTES)
}

/// Removes the least recently used entries until the cache fits `max`.
fn evict(dir: &Path, max: u64) {
    let found = entries(dir);
    let mut total: u64 = found.iter().map(|e| e.1).sum();
    for (path, len, _) in found {
        if total <= max {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &[u8; 32], payload: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(key);
        b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        b.extend_from_slice(&Sha256::digest(payload));
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn only_whole_entries_of_the_same_key_are_trusted() {
        let (key, other) = ([7u8; 32], [8u8; 32]);
        let good = entry(&key, b"executable bytes");
        assert_eq!(
            verified_payload(&good, &key),
            Some(&b"executable bytes"[..])
        );
        assert_eq!(verified_payload(&good, &other), None);
        assert_eq!(verified_payload(&good[..good.len() - 1], &key), None);
        assert_eq!(verified_payload(&good[..20], &key), None);
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(verified_payload(&flipped, &key), None);
        let mut magic = good;
        magic[7] = 2;
        assert_eq!(verified_payload(&magic, &key), None);
    }
}
