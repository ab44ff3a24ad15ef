//! The key-value store through which the processes of one multi-process
//! client meet, as `jax.distributed.initialize` does it: process 0 runs a
//! small coordinator on a TCP address ([`Coordinator`]), every process
//! (process 0 too) connects to it ([`KvStore`]), and the PJRT plugin
//! publishes and reads its topology through `put` and a blocking `get`.
//!
//! Only processes that know the coordinator's **secret** are served: the
//! coordinator generates one when it starts (32 random bytes, in hex) or
//! takes one given ([`Coordinator::start_with_secret`]); process 0 passes
//! it to the others as it passes the address (an environment variable,
//! not the command line: other local users can read command lines). A
//! connection's first request must be `A` with the secret (compared in
//! constant time); anything else is answered with status 2 and closed, so
//! a client without it can neither read nor forge a key. The secret is not
//! encrypted on the wire: across hosts, run the coordinator on a trusted
//! network.
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

use super::kv_frame;
#[cfg(test)]
use super::kv_secret::MAX_SECRET;
use super::kv_secret::{authenticate, check_secret, present, random_secret, AUTH_TIMEOUT};

/// The largest key or value accepted (a topology is a few kilobytes).
const MAX_ITEM: u32 = 64 << 20;

/// The most connections the coordinator serves at once (one thread each);
/// one more is closed at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long the coordinator waits for the rest of a request once it has
/// begun, and for a reply to be taken.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may sit between requests before the coordinator
/// closes it (a client reconnects by itself on its next request).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

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
/// let store = KvStore::connect(coordinator.address(), coordinator.secret())?;
/// store.put("topology/0", b"two devices")?;
/// assert_eq!(store.get("topology/0", std::time::Duration::from_secs(1))?, b"two devices");
/// // Without the secret nothing is served.
/// assert!(KvStore::connect(coordinator.address(), "guess").is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Coordinator {
    address: SocketAddr,
    secret: String,
}

impl Coordinator {
    /// Listens on `address` (`127.0.0.1:0` picks a free port) with a new
    /// random secret ([`secret`](Self::secret)), and serves every
    /// connection that presents it on its own thread.
    ///
    /// # Errors
    ///
    /// The address cannot be bound, or no random bytes could be read for
    /// the secret.
    pub fn start(address: impl ToSocketAddrs) -> io::Result<Coordinator> {
        Self::start_with_secret(address, &random_secret()?)
    }

    /// [`start`](Self::start) with a secret of the caller's (from the
    /// environment of a job launcher, say): non-empty, at most 1024 bytes.
    pub fn start_with_secret(address: impl ToSocketAddrs, secret: &str) -> io::Result<Coordinator> {
        Self::start_bounded(address, secret, MAX_CONNECTIONS)
    }

    /// [`start_with_secret`](Self::start_with_secret) serving at most
    /// `max_connections` at once.
    fn start_bounded(
        address: impl ToSocketAddrs,
        secret: &str,
        max_connections: usize,
    ) -> io::Result<Coordinator> {
        check_secret(secret)?;
        let listener = TcpListener::bind(address)?;
        let address = listener.local_addr()?;
        let table = Arc::new(Table::default());
        let key: Arc<[u8]> = secret.as_bytes().into();
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        std::thread::Builder::new()
            .name("tessel-coordinator".into())
            .spawn(move || {
                use std::sync::atomic::Ordering;
                for stream in listener.incoming().flatten() {
                    if open.fetch_add(1, Ordering::SeqCst) >= max_connections {
                        open.fetch_sub(1, Ordering::SeqCst);
                        drop(stream);
                        continue;
                    }
                    let (table, count) = (Arc::clone(&table), Arc::clone(&open));
                    let key = Arc::clone(&key);
                    // A connection that misbehaves ends its own thread only.
                    let spawned = std::thread::Builder::new()
                        .name("tessel-coordinator-conn".into())
                        .spawn(move || {
                            let _ = serve(stream, &table, &key);
                            count.fetch_sub(1, Ordering::SeqCst);
                        });
                    if spawned.is_err() {
                        // Not served: its count goes back.
                        open.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            })?;
        Ok(Coordinator {
            address,
            secret: secret.to_string(),
        })
    }

    /// The address it listens on (the one to give the other processes).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The secret a process must present to be served (give it to the
    /// other processes through the environment, [`SECRET_ENV`](crate::runtime::SECRET_ENV)).
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

fn read_item(r: &mut impl Read) -> io::Result<Vec<u8>> {
    kv_frame::read_item(r, MAX_ITEM)
}

fn check_item(item: &[u8]) -> io::Result<()> {
    kv_frame::check_item(item, MAX_ITEM).map(|_| ())
}

fn write_item(w: &mut impl Write, item: &[u8]) -> io::Result<()> {
    kv_frame::write_item(w, item, MAX_ITEM)
}

fn serve(stream: TcpStream, table: &Table, key: &[u8]) -> io::Result<()> {
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let timeouts = stream.try_clone()?;
    let mut r = BufReader::new(stream.try_clone()?);
    let mut w = BufWriter::new(stream);
    timeouts.set_read_timeout(Some(AUTH_TIMEOUT))?;
    if !authenticate(&mut r, &mut w, key)? {
        return Ok(());
    }
    loop {
        let mut op = [0u8; 1];
        timeouts.set_read_timeout(Some(IDLE_TIMEOUT))?;
        if r.read(&mut op)? == 0 {
            return Ok(());
        }
        timeouts.set_read_timeout(Some(REQUEST_TIMEOUT))?;
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
    /// The connection, `None` after an exchange failed part-way (the next
    /// request connects again rather than reading a stale reply).
    conn: Mutex<Option<Conn>>,
    address: SocketAddr,
    secret: String,
}

/// One connection's two buffered halves.
type Conn = (BufReader<TcpStream>, BufWriter<TcpStream>);

fn open(address: &SocketAddr, secret: &str, deadline: Instant) -> io::Result<Conn> {
    let stream = loop {
        match TcpStream::connect_timeout(address, Duration::from_secs(5)) {
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
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_read_timeout(Some(AUTH_TIMEOUT))?;
    let (mut r, mut w) = (BufReader::new(stream.try_clone()?), BufWriter::new(stream));
    present(&mut r, &mut w, secret, address)?;
    Ok((r, w))
}

impl KvStore {
    /// Connects to the coordinator at `address` with its `secret`,
    /// retrying for up to 30 s while it is not listening yet (processes
    /// start in any order).
    ///
    /// # Errors
    ///
    /// No coordinator within 30 s; `ErrorKind::PermissionDenied` if it
    /// refuses the secret.
    pub fn connect(address: impl ToSocketAddrs, secret: &str) -> io::Result<KvStore> {
        check_secret(secret)?;
        let address = address
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no coordinator address"))?;
        let conn = open(&address, secret, Instant::now() + Duration::from_secs(30))?;
        Ok(KvStore {
            conn: Mutex::new(Some(conn)),
            address,
            secret: secret.to_string(),
        })
    }

    /// Runs one exchange on the connection (reconnecting if the last one
    /// failed), waiting at most `wait` for the reply; a failure drops the
    /// connection, so no half-sent request or unread reply is left on it.
    fn exchange<T>(
        &self,
        wait: Duration,
        f: impl FnOnce(&mut Conn) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = match slot.take() {
            Some(c) => c,
            None => open(
                &self.address,
                &self.secret,
                Instant::now() + Duration::from_secs(5),
            )?,
        };
        let mut conn = conn;
        conn.0.get_ref().set_read_timeout(Some(wait))?;
        let out = f(&mut conn)?;
        *slot = Some(conn);
        Ok(out)
    }

    /// The coordinator's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stores `value` under `key` (replacing an earlier value).
    pub fn put(&self, key: impl AsRef<[u8]>, value: &[u8]) -> io::Result<()> {
        let key = key.as_ref();
        check_item(key)?;
        check_item(value)?;
        self.exchange(REQUEST_TIMEOUT, |(r, w)| {
            w.write_all(b"P")?;
            write_item(w, key)?;
            write_item(w, value)?;
            w.flush()?;
            let mut status = [0u8; 1];
            r.read_exact(&mut status)?;
            Ok(())
        })
    }

    /// The value under `key`, waiting up to `timeout` for some process to
    /// put it; `ErrorKind::TimedOut` if none did.
    pub fn get(&self, key: impl AsRef<[u8]>, timeout: Duration) -> io::Result<Vec<u8>> {
        let key = key.as_ref();
        check_item(key)?;
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let wait = Duration::from_millis(u64::from(ms)) + REQUEST_TIMEOUT;
        self.exchange(wait, |(r, w)| {
            w.write_all(b"G")?;
            write_item(w, key)?;
            w.write_all(&ms.to_le_bytes())?;
            w.flush()?;
            let mut status = [0u8; 1];
            r.read_exact(&mut status)?;
            if status[0] != 0 {
                return Ok(None);
            }
            read_item(r).map(Some)
        })?
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no process put `{}` within {} ms",
                    String::from_utf8_lossy(key),
                    ms
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_waits_for_the_put_of_another_connection_and_times_out_cleanly() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        let (a, b) = (
            KvStore::connect(c.address(), c.secret()).unwrap(),
            Arc::new(KvStore::connect(c.address(), c.secret()).unwrap()),
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

    /// An item past the limit is refused before anything is sent, so the
    /// connection stays usable (a get after it used to block on the
    /// half-sent put).
    #[test]
    fn a_refused_put_leaves_the_connection_usable() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        let a = KvStore::connect(c.address(), c.secret()).unwrap();
        let big = vec![0u8; MAX_ITEM as usize + 1];
        let e = a.put("big", &big).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        a.put("small", b"1").unwrap();
        assert_eq!(a.get("small", Duration::from_millis(100)).unwrap(), b"1");
        let t = Instant::now();
        assert!(a.get("none", Duration::from_millis(50)).is_err());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    /// A client that announces a large item and sends nothing costs the
    /// coordinator no allocation, and a dropped connection is survived:
    /// the store reconnects on its next request.
    #[test]
    fn announced_items_and_dropped_connections() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        let mut raw = Vec::new();
        for _ in 0..50 {
            let mut s = raw_client(&c, c.secret());
            s.write_all(b"P").unwrap();
            s.write_all(&(MAX_ITEM).to_le_bytes()).unwrap();
            raw.push(s);
        }
        let store = KvStore::connect(c.address(), c.secret()).unwrap();
        store.put("k", b"v").unwrap();
        // The store's connection breaks (the server side is gone): the
        // next exchange opens a new one.
        *store.conn.lock().unwrap() = None;
        assert_eq!(store.get("k", Duration::from_millis(100)).unwrap(), b"v");
        drop(raw);
    }

    /// A raw connection that has presented `secret` (and been accepted).
    fn raw_client(c: &Coordinator, secret: &str) -> TcpStream {
        let mut s = TcpStream::connect(c.address()).unwrap();
        let mut r = s.try_clone().unwrap();
        present(&mut r, &mut s, secret, &c.address()).unwrap();
        s
    }

    /// Without the secret, a client reads and writes nothing: a wrong
    /// secret, a request sent without one, and an oversized secret are
    /// each answered with status 2 and the connection closed; the table
    /// is untouched.
    #[test]
    fn only_clients_with_the_secret_are_served() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        assert_eq!(c.secret().len(), 64);
        let other = Coordinator::start("127.0.0.1:0").unwrap();
        assert_ne!(c.secret(), other.secret(), "each coordinator has its own");
        let store = KvStore::connect(c.address(), c.secret()).unwrap();
        store.put("devices", b"2").unwrap();
        let e = KvStore::connect(c.address(), other.secret()).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let refused = |request: &[u8]| {
            let mut s = TcpStream::connect(c.address()).unwrap();
            s.write_all(request).unwrap();
            let mut reply = Vec::new();
            s.read_to_end(&mut reply).unwrap();
            assert_eq!(reply, [2], "{request:?}");
        };
        // A put or a get with no secret (their first byte is all the
        // coordinator reads).
        refused(b"P");
        refused(b"G");
        // A secret past the limit is not read.
        let mut long = b"A".to_vec();
        long.extend_from_slice(&(MAX_SECRET as u32 + 1).to_le_bytes());
        refused(&long);
        assert_eq!(store.get("devices", Duration::ZERO).unwrap(), b"2");
        // Given secrets are checked.
        assert!(Coordinator::start_with_secret("127.0.0.1:0", "").is_err());
        let mine = Coordinator::start_with_secret("127.0.0.1:0", "job-7").unwrap();
        assert!(KvStore::connect(mine.address(), "job-7").is_ok());
    }

    /// At most `max_connections` are served at once: one more is closed
    /// before it is read; once one of them ends, a new one is served.
    #[test]
    fn connections_past_the_bound_are_closed() {
        let c = Coordinator::start_bounded("127.0.0.1:0", "k", 4).unwrap();
        let held: Vec<TcpStream> = (0..4).map(|_| raw_client(&c, "k")).collect();
        let mut extra = TcpStream::connect(c.address()).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reply = Vec::new();
        // Closed without a reply (a reset or an end of stream).
        let _ = extra.read_to_end(&mut reply);
        assert!(reply.is_empty(), "{reply:?}");
        drop(held);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match KvStore::connect(c.address(), "k") {
                Ok(store) => {
                    store.put("x", b"1").unwrap();
                    break;
                }
                Err(e) => assert!(Instant::now() < deadline, "never served again: {e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
