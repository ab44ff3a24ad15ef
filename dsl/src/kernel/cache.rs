//! The compile cache: kernel identity + argument specs + static arguments +
//! config → compiled executable, so a repeated call neither traces nor
//! compiles. One cache per client, attached to its [`Device`]s.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use super::key_hasher::BuildKeyHasher;
use super::static_key::StaticKey;
use crate::config::KernelConfig;
use crate::error::Result;
use crate::runtime::{mapping_usage, Device, Executable, EVICT_PERCENT};
use crate::shape::TensorSpec;

/// What identifies one compiled specialization of a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The kernel's identity: the macros' full path of the function, or for
    /// a closure kernel its explicit key, else its name and the source
    /// location of its `Kernel::new`.
    pub kernel: Cow<'static, str>,
    /// The static arguments, by value (and, for sharded programs, the mesh
    /// and the partition specs).
    pub statics: StaticKey,
    /// The argument types.
    pub specs: Vec<TensorSpec>,
    /// The configuration in force.
    pub config: KernelConfig,
}

/// Hit and miss counts of a [`CompileCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered without tracing.
    pub hits: u64,
    /// Lookups that traced (and compiled, unless the program text was cached).
    pub misses: u64,
    /// Programs compiled by the plugin.
    pub compiles: u64,
    /// Specializations held.
    pub entries: usize,
    /// Specializations dropped to stay within the capacity.
    pub evictions: u64,
    /// The most specializations held at once.
    pub capacity: usize,
}

/// How many specializations a cache holds unless told otherwise (about
/// 150 kB of host memory each for a typical kernel); the environment
/// variable `TESSEL_COMPILE_CACHE_ENTRIES` overrides it.
pub const DEFAULT_CAPACITY: usize = 1024;

fn default_capacity() -> usize {
    std::env::var("TESSEL_COMPILE_CACHE_ENTRIES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CAPACITY)
}

/// Whether [`CompileCache::get_or_compile`] found the executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Found under its key: nothing was traced or compiled.
    Hit,
    /// Traced and lowered; the plugin compiled the program unless another
    /// key had lowered to the same text.
    Miss,
}

/// One key's slot: filled once; concurrent first lookups of the same key
/// wait on its lock, so a program is traced and compiled once.
#[derive(Default)]
struct Slot {
    exe: Mutex<Option<Arc<Executable>>>,
    /// The process's clock at the last lookup (for least-recently-used
    /// eviction, across caches under mapping pressure).
    last_used: AtomicU64,
}

/// The lookup clock, process-wide, so that the slots of every cache are
/// ordered by their last use.
static CLOCK: AtomicU64 = AtomicU64::new(0);

/// The caches attached to devices, so that mapping pressure is relieved
/// across all of them (the mappings are the process's, whichever client
/// compiled the program).
static LIVE: Mutex<Vec<Weak<CompileCache>>> = Mutex::new(Vec::new());

/// A per-device cache of compiled kernels, keyed by [`CacheKey`] and, one
/// level down, by the lowered program text (two keys that lower to the same
/// program share one executable). It holds at most
/// [`capacity`](CacheStats::capacity) specializations and drops the least
/// recently used beyond that, and fewer when the process nears its limit of
/// memory mappings (see [`mapping_usage`]): then the least recently used
/// executables of every device's cache go first. Poisoned locks are recovered: slots hold only
/// finished executables, so a panic elsewhere cannot leave one half made.
pub struct CompileCache {
    by_key: Mutex<HashMap<CacheKey, Arc<Slot>, BuildKeyHasher>>,
    /// Program text → executable, while some key still holds it.
    by_text: Mutex<HashMap<String, Weak<Executable>>>,
    /// Whether [`LIVE`] lists it.
    registered: AtomicBool,
    capacity: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    compiles: AtomicU64,
    evictions: AtomicU64,
}

impl Default for CompileCache {
    fn default() -> Self {
        CompileCache::with_capacity(default_capacity())
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The executable a slot holds, without waiting for a compile in progress
/// (such a slot is not filled yet).
fn filled(slot: &Slot) -> Option<Arc<Executable>> {
    match slot.exe.try_lock() {
        Ok(exe) => exe.clone(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Whether a slot holds an executable (see [`filled`]).
fn is_filled(slot: &Slot) -> bool {
    filled(slot).is_some()
}

impl CompileCache {
    /// An empty cache holding at most `capacity` specializations (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        CompileCache {
            by_key: Mutex::default(),
            by_text: Mutex::default(),
            registered: AtomicBool::new(false),
            capacity: AtomicUsize::new(capacity.max(1)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            compiles: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Changes the capacity (at least 1), evicting at once if it shrank.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity.max(1), Ordering::Relaxed);
        self.evict();
    }

    fn touch(&self, slot: &Slot) {
        let now = CLOCK.fetch_add(1, Ordering::Relaxed);
        slot.last_used.store(now, Ordering::Relaxed);
    }

    /// Drops least recently used filled slots until within capacity, and
    /// program texts no key holds any more.
    fn evict(&self) {
        self.evict_to(self.capacity.load(Ordering::Relaxed));
    }

    /// Filled slots held.
    fn held(&self) -> usize {
        locked(&self.by_key)
            .values()
            .filter(|s| is_filled(s))
            .count()
    }

    /// Halves the executables held, across every device's cache and least
    /// recently used first, while the process holds more than
    /// [`EVICT_PERCENT`] of the memory mappings it may (compiled programs
    /// hold mappings for their code; see [`mapping_usage`]). An executable
    /// also held outside the caches frees nothing, so this stops when they
    /// are empty.
    fn relieve_mapping_pressure(&self) {
        while mapping_usage().is_some_and(|u| u.above(EVICT_PERCENT)) {
            let live: Vec<Arc<CompileCache>> =
                locked(&LIVE).iter().filter_map(Weak::upgrade).collect();
            let mut caches: Vec<&CompileCache> = live.iter().map(|c| &**c).collect();
            if !caches.iter().any(|c| std::ptr::eq(*c, self)) {
                caches.push(self);
            }
            let mut held: Vec<(u64, usize, CacheKey)> = Vec::new();
            for (i, c) in caches.iter().enumerate() {
                held.extend(c.filled().into_iter().map(|(t, k)| (t, i, k)));
            }
            if held.is_empty() {
                return;
            }
            held.sort_by_key(|(t, _, _)| *t);
            let mut doomed: Vec<Vec<CacheKey>> = vec![Vec::new(); caches.len()];
            let count = held.len().div_ceil(2);
            for (_, i, key) in held.into_iter().take(count) {
                doomed[i].push(key);
            }
            for (c, keys) in caches.iter().zip(doomed) {
                c.remove(keys);
            }
        }
    }

    /// The filled slots' keys, with their last use.
    fn filled(&self) -> Vec<(u64, CacheKey)> {
        locked(&self.by_key)
            .iter()
            .filter(|(_, s)| is_filled(s))
            .map(|(k, s)| (s.last_used.load(Ordering::Relaxed), k.clone()))
            .collect()
    }

    /// Drops least recently used filled slots until at most `capacity` are
    /// held, and program texts no key holds any more.
    fn evict_to(&self, capacity: usize) {
        let mut held = self.filled();
        if held.len() <= capacity {
            return;
        }
        held.sort_by_key(|(t, _)| *t);
        let excess = held.len() - capacity;
        self.remove(held.into_iter().take(excess).map(|(_, k)| k).collect());
    }

    /// Drops the slots of `keys` (counted as evictions), and program texts
    /// no key holds any more.
    fn remove(&self, keys: Vec<CacheKey>) {
        if keys.is_empty() {
            return;
        }
        let mut by_key = locked(&self.by_key);
        for key in keys {
            if by_key.remove(&key).is_some() {
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(by_key);
        locked(&self.by_text).retain(|_, exe| exe.strong_count() > 0);
    }

    /// The executable for `key`: from the cache, or made by `lower` (which
    /// traces for the key and returns the program text and a compile step)
    /// and remembered. Concurrent callers with the same key wait for the first
    /// one instead of compiling again; a failure is returned to the caller
    /// that made it and not cached.
    pub fn get_or_compile<C>(
        &self,
        key: CacheKey,
        lower: impl FnOnce(&CacheKey) -> Result<(String, C)>,
    ) -> Result<(Arc<Executable>, Lookup)>
    where
        C: FnOnce() -> Result<Executable>,
    {
        let slot = {
            let mut by_key = locked(&self.by_key);
            match by_key.get(&key) {
                Some(slot) => slot.clone(),
                None => by_key.entry(key.clone()).or_default().clone(),
            }
        };
        self.touch(&slot);
        let mut exe_slot = locked(&slot.exe);
        if let Some(exe) = exe_slot.as_ref() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((exe.clone(), Lookup::Hit));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let built = lower(&key).and_then(|(text, compile)| {
            let cached = locked(&self.by_text).get(&text).and_then(Weak::upgrade);
            match cached {
                Some(e) => Ok(e),
                None => {
                    self.relieve_mapping_pressure();
                    let e = Arc::new(compile()?);
                    self.compiles.fetch_add(1, Ordering::Relaxed);
                    locked(&self.by_text).insert(text, Arc::downgrade(&e));
                    Ok(e)
                }
            }
        });
        let exe = match built {
            Ok(e) => e,
            Err(e) => {
                // A failed trace or compile keeps nothing: its empty slot
                // would stay for the process's life (100,000 failures with
                // distinct specs took 36 MB).
                drop(exe_slot);
                locked(&self.by_key).retain(|_, s| !Arc::ptr_eq(s, &slot));
                return Err(e);
            }
        };
        *exe_slot = Some(exe.clone());
        drop(exe_slot);
        self.evict();
        Ok((exe, Lookup::Miss))
    }

    /// The executable for `key` if it is cached and compiled, counted as a
    /// hit; `None` (counted as nothing) when it is not, or while another
    /// caller compiles it: a call's fast path, which falls back to
    /// [`get_or_compile`](Self::get_or_compile).
    pub fn find(&self, key: &CacheKey) -> Option<Arc<Executable>> {
        let slot = locked(&self.by_key).get(key).cloned()?;
        let exe = filled(&slot)?;
        self.touch(&slot);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(exe)
    }

    /// The executable for `key`, if cached (counts a hit or a miss).
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Executable>> {
        let slot = locked(&self.by_key).get(key).cloned();
        let found = slot.and_then(|s| {
            self.touch(&s);
            locked(&s.exe).clone()
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Current counts.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            compiles: self.compiles.load(Ordering::Relaxed),
            entries: self.held(),
            evictions: self.evictions.load(Ordering::Relaxed),
            capacity: self.capacity.load(Ordering::Relaxed),
        }
    }

    /// Drops every cached executable.
    pub fn clear(&self) {
        locked(&self.by_key).clear();
        locked(&self.by_text).clear();
    }
}

/// A device's compile cache, as `device.cache()` (in the prelude).
///
/// ```
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// assert_eq!(dev.cache().stats().entries, 0);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub trait DeviceCache {
    /// This device's compile cache (shared by every `Device` over the same
    /// client).
    fn cache(&self) -> Arc<CompileCache>;
}

impl DeviceCache for Device {
    fn cache(&self) -> Arc<CompileCache> {
        let cache = self.attachment::<CompileCache>();
        if !cache.registered.load(Ordering::Relaxed)
            && !cache.registered.swap(true, Ordering::AcqRel)
        {
            let mut live = locked(&LIVE);
            live.retain(|c| c.strong_count() > 0);
            live.push(Arc::downgrade(&cache));
        }
        cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a lookup's lowering returns: the text and the compile step.
    type Lowered = Result<(String, fn() -> Result<Executable>)>;

    /// A failed trace or compile leaves no slot behind.
    #[test]
    fn failed_lookups_keep_no_slot() {
        let cache = CompileCache::with_capacity(4);
        for i in 0..100 {
            let key = CacheKey {
                kernel: "failing".into(),
                statics: StaticKey::default(),
                specs: vec![TensorSpec::new([i], crate::dtype::DType::F32)],
                config: KernelConfig::default(),
            };
            let failed = cache.get_or_compile(key, |_| -> Lowered {
                Err(crate::Error::Io {
                    path: "trace".into(),
                    source: std::io::Error::other("does not trace"),
                })
            });
            assert!(failed.is_err());
        }
        assert_eq!(locked(&cache.by_key).len(), 0);
        assert_eq!(cache.stats().misses, 100);
    }
}
