//! The process's memory mappings, against the limit the operating system
//! sets on them.
//!
//! Every compiled program keeps memory mappings for its machine code: on the
//! CPU plugin about 3 for an elementwise kernel and about 100 for flash
//! attention (its fusions are compiled as separate modules, each with its
//! own code and data sections). Linux allows a process `vm.max_map_count`
//! of them (65,530 by default), so about 650 cached flash attention
//! programs reach it, and past it every `mmap` fails: XLA cannot compile
//! ("LLVM compilation error: Cannot allocate memory") and a new thread
//! cannot set up its stack guard, which panics inside the standard library.
//!
//! Two defences use this module: the compile cache drops its least recently
//! used executables when half the limit is in use
//! ([`EVICT_PERCENT`]), and [`Device::compile`](super::super::Device::compile)
//! refuses with [`DeviceError::TooManyMappings`](crate::DeviceError) at
//! [`REFUSE_PERCENT`], before XLA or a thread runs into the wall.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The share of the limit (percent) above which the compile cache evicts
/// before it compiles.
pub const EVICT_PERCENT: usize = 50;

/// The share of the limit (percent) above which nothing more is compiled.
pub const REFUSE_PERCENT: usize = 90;

/// A limit set by [`set_mapping_limit`] (0: the operating system's).
static LIMIT_OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// How many memory mappings the process holds, and how many it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappingUsage {
    /// Mappings in use now (the lines of `/proc/self/maps`).
    pub in_use: usize,
    /// The most the process may hold: `vm.max_map_count`, or the limit set
    /// with [`set_mapping_limit`].
    pub limit: usize,
}

impl MappingUsage {
    /// Whether more than `percent` % of the limit is in use.
    pub fn above(&self, percent: usize) -> bool {
        self.in_use.saturating_mul(100) > self.limit.saturating_mul(percent)
    }
}

/// The process's mapping usage, or `None` where the operating system does
/// not report it (anything but Linux, or `/proc` not mounted).
///
/// Reading it costs time in proportion to the mappings held (about a
/// millisecond per 10,000), so tessel reads it only before a compile.
///
/// ```
/// if let Some(u) = tessel_dsl::runtime::mapping_usage() {
///     assert!(u.in_use > 0 && u.limit > 0);
/// }
/// ```
pub fn mapping_usage() -> Option<MappingUsage> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let maps = std::fs::read("/proc/self/maps").ok()?;
    let in_use = maps.iter().filter(|&&b| b == b'\n').count();
    let limit = match LIMIT_OVERRIDE.load(Ordering::Relaxed) {
        0 => std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()?
            .trim()
            .parse()
            .ok()?,
        set => set,
    };
    Some(MappingUsage { in_use, limit })
}

/// Makes tessel assume the process may hold at most `limit` memory mappings
/// (`None`: the operating system's `vm.max_map_count`), for a process
/// whose other parts need many of their own. The limit is process-wide.
///
/// ```
/// use tessel_dsl::runtime::set_mapping_limit;
/// set_mapping_limit(Some(40_000)); // leave the rest to the rest of the process
/// set_mapping_limit(None);         // back to the operating system's
/// ```
pub fn set_mapping_limit(limit: Option<usize>) {
    LIMIT_OVERRIDE.store(limit.unwrap_or(0), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn above_compares_shares_without_overflow() {
        let u = MappingUsage {
            in_use: 51,
            limit: 100,
        };
        assert!(u.above(50));
        assert!(!u.above(51));
        let huge = MappingUsage {
            in_use: usize::MAX,
            limit: usize::MAX,
        };
        assert!(!huge.above(100));
    }
}
