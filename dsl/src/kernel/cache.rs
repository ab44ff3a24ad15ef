//! The compile cache: kernel identity + argument specs + static arguments +
//! config → compiled executable, so a repeated call neither traces nor
//! compiles. One cache per client, attached to its [`Device`]s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::static_key::StaticKey;
use crate::config::KernelConfig;
use crate::error::Result;
use crate::runtime::{Device, Executable};
use crate::shape::TensorSpec;

/// What identifies one compiled specialization of a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The kernel's identity: the macros' full path of the function, or for
    /// a closure kernel its explicit key, else its name and the source
    /// location of its `Kernel::new`.
    pub kernel: String,
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
type Slot = Arc<Mutex<Option<Arc<Executable>>>>;

/// A per-device cache of compiled kernels, keyed by [`CacheKey`] and, one
/// level down, by the lowered program text (two keys that lower to the same
/// program share one executable). Poisoned locks are recovered: the maps
/// hold only finished entries, so a panic elsewhere cannot leave one half made.
#[derive(Default)]
pub struct CompileCache {
    by_key: Mutex<HashMap<CacheKey, Slot>>,
    by_text: Mutex<HashMap<String, Arc<Executable>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    compiles: AtomicU64,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CompileCache {
    /// The executable for `key`: from the cache, or made by `lower` (which
    /// traces and returns the program text and a compile step) and
    /// remembered. Concurrent callers with the same key wait for the first
    /// one instead of compiling again; a failure is returned to the caller
    /// that made it and not cached.
    pub fn get_or_compile<C>(
        &self,
        key: CacheKey,
        lower: impl FnOnce() -> Result<(String, C)>,
    ) -> Result<(Arc<Executable>, Lookup)>
    where
        C: FnOnce() -> Result<Executable>,
    {
        let slot = locked(&self.by_key).entry(key).or_default().clone();
        let mut slot = locked(&slot);
        if let Some(exe) = slot.as_ref() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok((exe.clone(), Lookup::Hit));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let (text, compile) = lower()?;
        let cached = locked(&self.by_text).get(&text).cloned();
        let exe = match cached {
            Some(e) => e,
            None => {
                let e = Arc::new(compile()?);
                self.compiles.fetch_add(1, Ordering::Relaxed);
                locked(&self.by_text)
                    .entry(text)
                    .or_insert_with(|| e.clone())
                    .clone()
            }
        };
        *slot = Some(exe.clone());
        Ok((exe, Lookup::Miss))
    }

    /// The executable for `key`, if cached (counts a hit or a miss).
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Executable>> {
        let slot = locked(&self.by_key).get(key).cloned();
        let found = slot.and_then(|s| locked(&s).clone());
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
            entries: locked(&self.by_key)
                .values()
                .filter(|s| locked(s).is_some())
                .count(),
        }
    }

    /// Drops every cached executable.
    pub fn clear(&self) {
        locked(&self.by_key).clear();
        locked(&self.by_text).clear();
    }
}

impl Device {
    /// This device's compile cache (shared by every `Device` over the same
    /// client).
    pub fn cache(&self) -> Arc<CompileCache> {
        self.attachment::<CompileCache>()
    }
}
