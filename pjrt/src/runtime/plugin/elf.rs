//! A structural check of a shared library's file before it is mapped.
//!
//! `dlopen` maps an ELF file's load segments as its program headers
//! describe them, without comparing them with the file's length. A plugin
//! cut short (an interrupted copy, a full disk) therefore loads, and the
//! process dies of SIGBUS when the loader touches a page past the end of
//! the file. This module reads the ELF header and program headers and
//! refuses a file whose headers, load segments or section header table
//! end past its last byte. It does not detect damage that keeps the
//! file's length (only a checksum can: the cached CPU plugin's is checked,
//! see `plugin_stamp`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// `PT_LOAD`: a segment mapped from the file.
const PT_LOAD: u32 = 1;
/// Refuse program header tables larger than this (no real library has
/// more than a few dozen headers).
const MAX_PROGRAM_HEADERS_BYTES: u64 = 1 << 20;

/// The fields of an ELF header this check needs.
struct Header {
    /// 64-bit (`ELFCLASS64`) rather than 32-bit.
    wide: bool,
    /// Little-endian (`ELFDATA2LSB`).
    little: bool,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
}

/// Reads little- or big-endian integers out of a byte slice, bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    little: bool,
}

impl Reader<'_> {
    fn uint(&self, at: usize, width: usize) -> Option<u64> {
        let b = self.bytes.get(at..at.checked_add(width)?)?;
        let mut v = 0u64;
        for i in 0..width {
            let byte = if self.little { b[width - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    }
    /// A word: 8 bytes in a 64-bit file, 4 in a 32-bit one.
    fn word(&self, at64: usize, at32: usize, wide: bool) -> Option<u64> {
        if wide {
            self.uint(at64, 8)
        } else {
            self.uint(at32, 4)
        }
    }
    fn half(&self, at64: usize, at32: usize, wide: bool) -> Option<u64> {
        self.uint(if wide { at64 } else { at32 }, 2)
    }
}

/// Reads the ELF header from the first bytes of the file.
fn header(bytes: &[u8]) -> Result<Header, String> {
    let short = || format!("the ELF header is cut short ({} bytes)", bytes.len());
    let wide = match bytes.get(4) {
        Some(1) => false,
        Some(2) => true,
        Some(c) => return Err(format!("unknown ELF class {c}")),
        None => return Err(short()),
    };
    let little = match bytes.get(5) {
        Some(1) => true,
        Some(2) => false,
        Some(d) => return Err(format!("unknown ELF data encoding {d}")),
        None => return Err(short()),
    };
    let r = Reader { bytes, little };
    let field = |v: Option<u64>| v.ok_or_else(short);
    Ok(Header {
        wide,
        little,
        phoff: field(r.word(0x20, 0x1c, wide))?,
        shoff: field(r.word(0x28, 0x20, wide))?,
        phentsize: field(r.half(0x36, 0x2a, wide))?,
        phnum: field(r.half(0x38, 0x2c, wide))?,
        shentsize: field(r.half(0x3a, 0x2e, wide))?,
        shnum: field(r.half(0x3c, 0x30, wide))?,
    })
}

/// `start + count · size`, or `None` on overflow.
fn table_end(start: u64, count: u64, size: u64) -> Option<u64> {
    count.checked_mul(size)?.checked_add(start)
}

/// Checks that the ELF file `path` is whole: its program header table,
/// every load segment and its section header table end inside the file.
/// A file that does not start with the ELF magic is left to the loader
/// (which refuses it cleanly). The error says what is cut off.
pub(crate) fn check_whole(path: &Path) -> Result<(), String> {
    let mut file = File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut ident = Vec::with_capacity(64);
    file.by_ref()
        .take(64)
        .read_to_end(&mut ident)
        .map_err(|e| e.to_string())?;
    if !ident.starts_with(b"\x7fELF") {
        return Ok(());
    }
    let h = header(&ident)?;
    let cut = |what: String, end: u64| {
        format!(
            "the file is truncated or damaged: {what} ends at byte {end}, the file has {len} bytes \
             (loading it would crash the process)"
        )
    };
    let ph_end = table_end(h.phoff, h.phnum, h.phentsize)
        .filter(|_| h.phnum * h.phentsize <= MAX_PROGRAM_HEADERS_BYTES);
    let Some(ph_end) = ph_end.filter(|&e| e <= len) else {
        return Err(cut(
            "the program header table".into(),
            ph_end.unwrap_or(u64::MAX),
        ));
    };
    if h.shoff != 0 {
        let end = table_end(h.shoff, h.shnum, h.shentsize).unwrap_or(u64::MAX);
        if end > len {
            return Err(cut("the section header table".into(), end));
        }
    }
    let mut table = vec![0u8; (ph_end - h.phoff) as usize];
    file.seek(SeekFrom::Start(h.phoff))
        .and_then(|_| file.read_exact(&mut table))
        .map_err(|e| e.to_string())?;
    let r = Reader {
        bytes: &table,
        little: h.little,
    };
    for i in 0..h.phnum {
        let at = (i * h.phentsize) as usize;
        let field = |v: Option<u64>| v.ok_or_else(|| format!("program header {i} is malformed"));
        if field(r.uint(at, 4))? != PT_LOAD as u64 {
            continue;
        }
        let offset = field(r.word(at + 8, at + 4, h.wide))?;
        let size = field(r.word(at + 32, at + 16, h.wide))?;
        let end = offset.saturating_add(size);
        if end > len {
            return Err(cut(format!("load segment {i}"), end));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal little-endian ELF64 file: header, one program header
    /// (a load segment of `seg_size` bytes at offset 0), `len` bytes long.
    fn elf(seg_size: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(120)];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&PT_LOAD.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&seg_size.to_le_bytes());
        b.truncate(len.max(120));
        b
    }

    fn check(bytes: &[u8]) -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("tessel-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.so", bytes.len()));
        std::fs::write(&path, bytes).unwrap();
        let r = check_whole(&path);
        std::fs::remove_file(&path).unwrap();
        r
    }

    #[test]
    fn whole_files_pass_and_cut_ones_are_refused() {
        assert_eq!(check(&elf(200, 200)), Ok(()));
        let e = check(&elf(4096, 200)).unwrap_err();
        assert!(e.contains("load segment 0 ends at byte 4096"), "{e}");
        let e = check(&elf(200, 200)[..40]).unwrap_err();
        assert!(e.contains("ELF header is cut short"), "{e}");
        let e = check(&elf(200, 200)[..100]).unwrap_err();
        assert!(e.contains("program header table ends at byte 120"), "{e}");
        // Not ELF at all: left to the loader.
        assert_eq!(check(b"plain text"), Ok(()));
    }
}
