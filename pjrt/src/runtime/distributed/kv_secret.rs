//! The coordinator's secret: how it is made, and the handshake that opens
//! every connection to the coordinator (see [`super::kv_store`]).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use super::kv_frame::{read_item, write_item};

/// How long a new connection has to present the secret.
pub(in crate::runtime) const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest secret accepted.
pub(in crate::runtime) const MAX_SECRET: usize = 1024;

/// The environment variable through which `examples/multi_process.rs` and
/// launchers hand the coordinator's secret to the other processes.
pub const SECRET_ENV: &str = "TESSEL_COORDINATOR_SECRET";

/// 32 random bytes from the operating system, in hex.
pub(in crate::runtime) fn random_secret() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("no random bytes for the coordinator's secret: {e}"),
            )
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

pub(in crate::runtime) fn check_secret(secret: &str) -> io::Result<()> {
    if secret.is_empty() || secret.len() > MAX_SECRET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a coordinator secret must have 1 to {MAX_SECRET} bytes, got {}",
                secret.len()
            ),
        ));
    }
    Ok(())
}

/// Whether `a == b`, in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a connection's first request, which must be `A` with the secret;
/// answers 0 and returns `true` if it is, 2 otherwise.
pub(in crate::runtime) fn authenticate(
    r: &mut impl Read,
    w: &mut impl Write,
    key: &[u8],
) -> io::Result<bool> {
    let mut op = [0u8; 1];
    r.read_exact(&mut op)?;
    let ok = op[0] == b'A'
        && match read_item(r, MAX_SECRET as u32) {
            Ok(given) => same_secret(&given, key),
            // Longer than any secret: refused, unread.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => false,
            Err(e) => return Err(e),
        };
    w.write_all(&[if ok { 0 } else { 2 }])?;
    w.flush()?;
    Ok(ok)
}

/// The client's side of [`authenticate`]: sends `secret` and reads the
/// answer; `ErrorKind::PermissionDenied` if the coordinator at `address`
/// refuses it.
pub(in crate::runtime) fn present(
    r: &mut impl Read,
    w: &mut impl Write,
    secret: &str,
    address: &SocketAddr,
) -> io::Result<()> {
    check_secret(secret)?;
    w.write_all(b"A")?;
    write_item(w, secret.as_bytes(), MAX_SECRET as u32)?;
    w.flush()?;
    let mut status = [0u8; 1];
    r.read_exact(&mut status)?;
    if status[0] != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the coordinator at {address} refused this process's secret"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_compares_whole_values() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"ab"));
        assert!(!same_secret(b"", b"a"));
    }
}
