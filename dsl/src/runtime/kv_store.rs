//! The key-value store through which the processes of one multi-process
//! client meet, as `jax.distributed.initialize` does it: process 0 runs a
//! small coordinator on a TCP address ([`Coordinator`]), every process
//! (process 0 too) connects to it ([`KvStore`]), and the PJRT plugin
//! publishes and reads its topology through `put` and a blocking `get`.
//!
//! The protocol is a request and a reply per exchange on one connection:
//! a request is an op byte (`P`ut or `G`et), the key (u32 length + bytes),
//! then for a put the value (u32 length + bytes), for a get the timeout in
//! milliseconds (u32). A reply is a status byte (0 ok, 1 not found before
//! the timeout) and, for a successful get, the value.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The largest key or value accepted (a topology is a few kilobytes).
const MAX_ITEM: u32 = 64 << 20;

#[derive(Default)]
struct Table {
    items: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    changed: Condvar,
}

impl Table {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.insert(key, value);
        self.changed.notify_all();
    }

    fn get(&self, key: &[u8], timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(v) = items.get(key) {
                return Some(v.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            items = self
                .changed
                .wait_timeout(items, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The coordinator: the key-value store's server, run by process 0. It
/// serves until the process ends.
///
/// ```
/// use tessel_dsl::runtime::{Coordinator, KvStore};
/// let coordinator = Coordinator::start("127.0.0.1:0")?;
/// let store = KvStore::connect(coordinator.address())?;
/// store.put("topology/0", b"two devices")?;
/// assert_eq!(store.get("topology/0", std::time::Duration::from_secs(1))?, b"two devices");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Coordinator {
    address: SocketAddr,
}

impl Coordinator {
    /// Listens on `address` (`127.0.0.1:0` picks a free port) and serves
    /// every connection on its own thread.
    pub fn start(address: impl ToSocketAddrs) -> io::Result<Coordinator> {
        let listener = TcpListener::bind(address)?;
        let address = listener.local_addr()?;
        let table = Arc::new(Table::default());
        std::thread::Builder::new()
            .name("tessel-coordinator".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let table = Arc::clone(&table);
                    // A connection that misbehaves ends its own thread only.
                    let _ = std::thread::Builder::new()
                        .name("tessel-coordinator-conn".into())
                        .spawn(move || serve(stream, &table));
                }
            })?;
        Ok(Coordinator { address })
    }

    /// The address it listens on (the one to give the other processes).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

fn read_item(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n);
    if n > MAX_ITEM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a key or value of {n} bytes (at most {MAX_ITEM})"),
        ));
    }
    let mut v = vec![0u8; n as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn write_item(w: &mut impl Write, item: &[u8]) -> io::Result<()> {
    let n = u32::try_from(item.len())
        .ok()
        .filter(|&n| n <= MAX_ITEM)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a key or value of {} bytes (at most {MAX_ITEM})",
                    item.len()
                ),
            )
        })?;
    w.write_all(&n.to_le_bytes())?;
    w.write_all(item)
}

fn serve(stream: TcpStream, table: &Table) -> io::Result<()> {
    let mut r = BufReader::new(stream.try_clone()?);
    let mut w = BufWriter::new(stream);
    loop {
        let mut op = [0u8; 1];
        if r.read(&mut op)? == 0 {
            return Ok(());
        }
        let key = read_item(&mut r)?;
        match op[0] {
            b'P' => {
                table.put(key, read_item(&mut r)?);
                w.write_all(&[0])?;
            }
            b'G' => {
                let mut ms = [0u8; 4];
                r.read_exact(&mut ms)?;
                let timeout = Duration::from_millis(u64::from(u32::from_le_bytes(ms)));
                match table.get(&key, timeout) {
                    Some(v) => {
                        w.write_all(&[0])?;
                        write_item(&mut w, &v)?;
                    }
                    None => w.write_all(&[1])?,
                }
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown request {other}"),
                ))
            }
        }
        w.flush()?;
    }
}

/// A connection to the [`Coordinator`]: what a process's PJRT client
/// publishes and reads its peers' data through. Requests on one store are
/// serialized.
pub struct KvStore {
    conn: Mutex<(BufReader<TcpStream>, BufWriter<TcpStream>)>,
    address: SocketAddr,
}

impl KvStore {
    /// Connects to the coordinator at `address`, retrying for up to 30 s
    /// while it is not listening yet (processes start in any order).
    pub fn connect(address: impl ToSocketAddrs) -> io::Result<KvStore> {
        let address = address
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no coordinator address"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match TcpStream::connect_timeout(&address, Duration::from_secs(5)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot reach the coordinator at {address}: {e}"),
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        stream.set_nodelay(true)?;
        Ok(KvStore {
            conn: Mutex::new((BufReader::new(stream.try_clone()?), BufWriter::new(stream))),
            address,
        })
    }

    /// The coordinator's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stores `value` under `key` (replacing an earlier value).
    pub fn put(&self, key: impl AsRef<[u8]>, value: &[u8]) -> io::Result<()> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let (r, w) = &mut *conn;
        w.write_all(b"P")?;
        write_item(w, key.as_ref())?;
        write_item(w, value)?;
        w.flush()?;
        let mut status = [0u8; 1];
        r.read_exact(&mut status)?;
        Ok(())
    }

    /// The value under `key`, waiting up to `timeout` for some process to
    /// put it; `ErrorKind::TimedOut` if none did.
    pub fn get(&self, key: impl AsRef<[u8]>, timeout: Duration) -> io::Result<Vec<u8>> {
        let key = key.as_ref();
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let (r, w) = &mut *conn;
        w.write_all(b"G")?;
        write_item(w, key)?;
        w.write_all(&ms.to_le_bytes())?;
        w.flush()?;
        let mut status = [0u8; 1];
        r.read_exact(&mut status)?;
        if status[0] != 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no process put `{}` within {} ms",
                    String::from_utf8_lossy(key),
                    ms
                ),
            ));
        }
        read_item(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_waits_for_the_put_of_another_connection_and_times_out_cleanly() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        let (a, b) = (
            KvStore::connect(c.address()).unwrap(),
            Arc::new(KvStore::connect(c.address()).unwrap()),
        );
        let b2 = Arc::clone(&b);
        let waiter = std::thread::spawn(move || b2.get("late", Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(50));
        a.put("late", b"value").unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), b"value");
        let e = b.get("never", Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("never"), "{e}");
        // Replaced values and empty values.
        a.put("k", b"1").unwrap();
        a.put("k", b"").unwrap();
        assert_eq!(b.get("k", Duration::ZERO).unwrap(), b"");
    }
}
