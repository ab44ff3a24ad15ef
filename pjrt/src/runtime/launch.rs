//! Launch ids: the number each execution passes to
//! `PJRT_LoadedExecutable_Execute`, by which a plugin's collectives meet
//! their peers.
//!
//! - In a single-process client, every execution gets an id of its own
//!   from one process-wide counter ([`next_in_process`]): two SPMD programs
//!   running at once on two clients, both with the default id 0, joined
//!   each other's all-gathers and all-reduces on the CPU plugin and wrote
//!   into each other's buffers.
//! - In a multi-process client the processes must pass the same id for the
//!   same launch, and each counts only its own executions. Each program
//!   then has its own counter, which starts at a number taken from its
//!   text ([`seed_of`], [`next_of_program`]): processes that run one
//!   program the same number of times, as an SPMD group does, agree on
//!   every id, and two programs running at once count from different
//!   starts (JAX does the same, seeding each executable's counter from its
//!   fingerprint). The program text, not the compile options, is what is
//!   hashed: the options may differ by host (they depend on the processor).

use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use sha2::{Digest, Sha256};

/// The largest launch id; ids are positive (`1 ..= MAX_ID`).
const MAX_ID: u32 = i32::MAX as u32;

/// The `n`-th id counted from `start`, in `1 ..= MAX_ID`.
fn id_at(start: u32, n: u32) -> c_int {
    let id = (start % MAX_ID).wrapping_add(n % MAX_ID) % MAX_ID + 1;
    // `id` is at most MAX_ID, which fits.
    c_int::try_from(id).unwrap_or(1)
}

/// A launch id distinct from those of the executions running beside it in
/// this process: counts up from 1 and wraps within the positive range.
pub(crate) fn next_in_process() -> c_int {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    id_at(0, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The start of a program's launch ids: 32 bits of the SHA-256 of its text.
pub(crate) fn seed_of(program_text: &str) -> u32 {
    let digest = Sha256::digest(program_text.as_bytes());
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The next launch id of the program seeded `seed` in this process: its
/// `n`-th execution (counted from 0) gets `id_at(seed, n)` whichever
/// process runs it.
pub(crate) fn next_of_program(seed: u32) -> c_int {
    static COUNTS: OnceLock<Mutex<HashMap<u32, u32>>> = OnceLock::new();
    let counts = COUNTS.get_or_init(Mutex::default);
    // A panic while the map was held cannot leave it inconsistent (one
    // insert or increment): a poisoned lock is used as it is.
    let mut map = counts.lock().unwrap_or_else(PoisonError::into_inner);
    let count = map.entry(seed).or_insert(0);
    let n = *count;
    *count = count.wrapping_add(1);
    id_at(seed, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_and_wrap() {
        assert_eq!(id_at(0, 0), 1);
        assert_eq!(id_at(0, 1), 2);
        assert_eq!(id_at(MAX_ID - 1, 0), MAX_ID as c_int);
        assert_eq!(id_at(MAX_ID - 1, 1), 1);
        assert_eq!(
            id_at(u32::MAX, u32::MAX),
            id_at(u32::MAX % MAX_ID, u32::MAX % MAX_ID)
        );
        for (s, n) in [
            (u32::MAX, 0),
            (u32::MAX, u32::MAX),
            (MAX_ID, 5),
            (7, MAX_ID),
        ] {
            assert!(id_at(s, n) >= 1, "{s} {n}");
        }
    }

    #[test]
    fn a_program_counts_from_its_seed_and_programs_count_apart() {
        let a = seed_of("module @a {}");
        let b = seed_of("module @b {}");
        assert_ne!(a, b);
        assert_eq!(a, seed_of("module @a {}"));
        // Each program's ids are its own count from its seed, whatever
        // else runs in between, so another process that runs the program
        // as often sees the same ids.
        let first = next_of_program(a);
        let other = next_of_program(b);
        let second = next_of_program(a);
        assert_eq!(first, id_at(a, 0));
        assert_eq!(second, id_at(a, 1));
        assert_eq!(other, id_at(b, 0));
        assert_ne!(first, other);
        // Single-process ids count up regardless of the program.
        let x = next_in_process();
        let y = next_in_process();
        assert!(x >= 1 && y >= 1 && x != y);
    }
}
