//! `tessel cache`: what the persistent compilation cache holds, and
//! `tessel cache clear` to empty it.

use super::command::CacheAction;
use tessel::runtime::{clear_executable_cache, executable_cache_usage, DiskCacheUsage};

/// `tessel cache [clear]`.
pub fn cache(action: Option<CacheAction>) -> Result<String, String> {
    match action {
        None => Ok(describe(&executable_cache_usage(), "holds")),
        Some(CacheAction::Clear) => {
            let removed = clear_executable_cache().map_err(|e| e.to_string())?;
            Ok(describe(&removed, "removed"))
        }
    }
}

fn describe(u: &DiskCacheUsage, verb: &str) -> String {
    match &u.dir {
        None => "the persistent compilation cache is off (TESSEL_EXECUTABLE_CACHE=0, or no cache \
                 directory: set TESSEL_EXECUTABLE_CACHE_DIR or HOME)"
            .into(),
        Some(dir) => {
            let plural = |n: usize| if n == 1 { "" } else { "s" };
            let label = format!("{verb}:");
            format!(
                "directory:   {}\n{label:<12}{} executable{}, {}\ntuned:       {} autotuning choice{}",
                dir.display(),
                u.entries,
                plural(u.entries),
                size(u.bytes),
                u.tunings,
                plural(u.tunings)
            )
        }
    }
}

/// `bytes` in B, KiB, MiB or GiB.
fn size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[unit])
    }
}
