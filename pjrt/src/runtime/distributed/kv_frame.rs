//! The coordinator protocol's framing (see [`super::kv_store`]): an item
//! (a key, a value, the secret) is its length as a little-endian `u32` and
//! that many bytes, at most a bound each side checks.

use std::io::{self, Read, Write};

/// `item`'s length if it is at most `max` bytes, else
/// `ErrorKind::InvalidInput`: what the other side would refuse is refused
/// before anything is written.
pub(in crate::runtime) fn check_item(item: &[u8], max: u32) -> io::Result<u32> {
    match u32::try_from(item.len()) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("an item of {} bytes (at most {max})", item.len()),
        )),
    }
}

/// Writes `item` (at most `max` bytes) with its length.
pub(in crate::runtime) fn write_item(w: &mut impl Write, item: &[u8], max: u32) -> io::Result<()> {
    let n = check_item(item, max)?;
    w.write_all(&n.to_le_bytes())?;
    w.write_all(item)
}

/// Reads one item; `ErrorKind::InvalidData` if it announces more than
/// `max` bytes (nothing more is read), `UnexpectedEof` if it ends early.
pub(in crate::runtime) fn read_item(r: &mut impl Read, max: u32) -> io::Result<Vec<u8>> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n);
    if n > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an item of {n} bytes (at most {max})"),
        ));
    }
    // Grown as the bytes arrive: announcing a large item costs nothing
    // until it is sent.
    let mut v = Vec::new();
    r.take(u64::from(n)).read_to_end(&mut v)?;
    if v.len() != n as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("an item of {n} bytes ended after {}", v.len()),
        ));
    }
    Ok(v)
}
