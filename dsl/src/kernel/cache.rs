//! The compile cache: kernel + argument specs + static arguments + config →
//! compiled executable, so a repeated call neither traces nor compiles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::kernel::KernelConfig;
use crate::runtime::Executable;
use crate::shape::TensorSpec;

/// What identifies one compiled specialization of a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The kernel's qualified name.
    pub kernel: String,
    /// The static arguments, rendered.
    pub statics: String,
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

/// A per-device cache of compiled kernels, keyed by [`CacheKey`] and, one
/// level down, by the lowered program text (two keys that lower to the same
/// program share one executable).
#[derive(Default)]
pub struct CompileCache {
    by_key: Mutex<HashMap<CacheKey, Arc<Executable>>>,
    by_text: Mutex<HashMap<String, Arc<Executable>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    compiles: AtomicU64,
}

impl CompileCache {
    /// The executable for `key`, if cached (counts a hit or a miss).
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Executable>> {
        let found = self.by_key.lock().ok()?.get(key).cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The executable for program `text`, compiling it with `compile` when
    /// no other key lowered to the same text; then remembered under `key`.
    pub fn insert_with(
        &self,
        key: CacheKey,
        text: &str,
        compile: impl FnOnce() -> Result<Executable>,
    ) -> Result<Arc<Executable>> {
        let cached = self.by_text.lock().ok().and_then(|m| m.get(text).cloned());
        let exe = match cached {
            Some(e) => e,
            None => {
                let e = Arc::new(compile()?);
                self.compiles.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut m) = self.by_text.lock() {
                    m.entry(text.to_string()).or_insert_with(|| e.clone());
                }
                e
            }
        };
        if let Ok(mut m) = self.by_key.lock() {
            m.entry(key).or_insert_with(|| exe.clone());
        }
        Ok(exe)
    }

    /// Current counts.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            compiles: self.compiles.load(Ordering::Relaxed),
            entries: self.by_key.lock().map(|m| m.len()).unwrap_or(0),
        }
    }

    /// Drops every cached executable.
    pub fn clear(&self) {
        if let Ok(mut m) = self.by_key.lock() {
            m.clear();
        }
        if let Ok(mut m) = self.by_text.lock() {
            m.clear();
        }
    }
}
