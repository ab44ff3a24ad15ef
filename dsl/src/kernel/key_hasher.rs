//! The hasher of the compile cache's keys: the multiply-rotate hash of
//! rustc's own maps (FxHash), many times cheaper than the standard
//! library's SipHash on the long keys of tree arguments (a hundred specs and
//! the tree's structure). The keys are the program's own, not an
//! adversary's, so SipHash's resistance to chosen collisions buys nothing
//! here.

use std::hash::{BuildHasherDefault, Hasher};

/// The multiplier of FxHash (`0x517cc1b727220a95`, from rustc).
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// A word-at-a-time multiply-rotate hasher.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyHasher {
    hash: u64,
}

impl KeyHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length keeps `[1]` and `[1, 0]` apart.
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Builds [`KeyHasher`]s for a `HashMap`.
pub(crate) type BuildKeyHasher = BuildHasherDefault<KeyHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
        let mut h = KeyHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    /// Byte strings that differ anywhere (or only in length) hash apart.
    #[test]
    fn byte_strings_differ() {
        let mut seen = std::collections::HashSet::new();
        for n in 0..40usize {
            let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
            assert!(seen.insert(hash(v.as_slice())), "length {n}");
            for i in 0..n {
                let mut w = v.clone();
                w[i] ^= 1;
                assert_ne!(hash(w.as_slice()), hash(v.as_slice()), "byte {i} of {n}");
            }
        }
        let mut h = KeyHasher::default();
        h.write(&[1]);
        let mut g = KeyHasher::default();
        g.write(&[1, 0]);
        assert_ne!(h.finish(), g.finish());
        assert_ne!(hash(&[2usize, 3]), hash(&[3usize, 2]));
    }
}
