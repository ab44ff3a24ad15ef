//! `tessel cache`: what the persistent compilation cache holds, and
//! `tessel cache clear` to empty it.

use super::args::Args;
use tessel::runtime::{clear_executable_cache, executable_cache_usage, DiskCacheUsage};

const HELP: &str = "usage: tessel cache [clear]

Shows the persistent compilation cache: its directory, how many compiled executables it holds and their
size, and the block sizes autotuning chose. `clear` removes them. Compiled programs are written there after each compile and loaded by the next
process that compiles the same program for the same plugin, so it compiles nothing twice.
TESSEL_EXECUTABLE_CACHE=0 turns the cache off, TESSEL_EXECUTABLE_CACHE_DIR moves it, and
TESSEL_EXECUTABLE_CACHE_BYTES bounds its size (default 2 GiB; the least recently used go first).";

/// `tessel cache [clear]`.
pub fn cache(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok(HELP.into());
    }
    a.only(&[])?;
    a.at_most(1, "cache takes at most one word, `clear`")?;
    match a.positional.first().map(String::as_str) {
        None => Ok(describe(&executable_cache_usage(), "holds")),
        Some("clear") => {
            let removed = clear_executable_cache().map_err(|e| e.to_string())?;
            Ok(describe(&removed, "removed"))
        }
        Some(other) => Err(format!(
            "unknown cache action `{other}`; expected `clear` (or nothing to show the cache)"
        )),
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
