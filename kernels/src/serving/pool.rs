//! Host-side bookkeeping of a paged cache: [`PagePool`] hands out pages to
//! sequences and writes their block tables; [`Buckets`] rounds sizes up so
//! that a server compiles one program per bucket.

use std::collections::BTreeMap;

use tessel::prelude::*;
use tessel::HostError;

fn invalid(what: &'static str, message: String) -> tessel::Error {
    HostError::InvalidInput { what, message }.into()
}

/// The pages of a paged KV cache, handed out to sequences (by any `u64`
/// id) as they grow and taken back when they end. Pages come off a free
/// list, so a sequence's pages are in general not contiguous.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::serving::PagePool;
/// let mut pool = PagePool::new(4, 16);
/// pool.reserve(7, 20)?; // 2 pages
/// pool.reserve(9, 1)?; // 1 page
/// assert_eq!(pool.free_pages(), 1);
/// assert!(pool.reserve(9, 40).is_err()); // would need 2 more pages
/// pool.release(7);
/// assert_eq!(pool.free_pages(), 3);
/// let tables = pool.block_tables(&[9], 4)?; // s32 [1, 4], unused entries 0
/// assert_eq!(tables.shape(), &[1, 4]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PagePool {
    page_size: usize,
    num_pages: usize,
    free: Vec<u32>,
    owned: BTreeMap<u64, Vec<u32>>,
}

impl PagePool {
    /// A pool of `num_pages` pages of `page_size` tokens, all free.
    pub fn new(num_pages: usize, page_size: usize) -> PagePool {
        let n = num_pages.min(u32::MAX as usize) as u32;
        PagePool {
            page_size: page_size.max(1),
            num_pages: n as usize,
            // Popped from the end: page 0 first.
            free: (0..n).rev().collect(),
            owned: BTreeMap::new(),
        }
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages in the pool.
    pub fn num_pages(&self) -> usize {
        self.num_pages
    }

    /// Pages not held by any sequence.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// Makes sequence `seq` hold enough pages for `len` tokens (taking
    /// pages from the free list; it never shrinks). Fails, changing
    /// nothing, if the pool has too few free pages.
    pub fn reserve(&mut self, seq: u64, len: usize) -> tessel::Result<()> {
        let need = len.div_ceil(self.page_size);
        let have = self.owned.get(&seq).map_or(0, Vec::len);
        if need <= have {
            return Ok(());
        }
        let more = need - have;
        if more > self.free.len() {
            return Err(invalid(
                "page pool",
                format!(
                    "sequence {seq} needs {more} more pages of {} tokens for {len} tokens, {} are free",
                    self.page_size,
                    self.free.len()
                ),
            ));
        }
        let at = self.free.len() - more;
        let taken = self.free.split_off(at);
        self.owned
            .entry(seq)
            .or_default()
            .extend(taken.into_iter().rev());
        Ok(())
    }

    /// Makes each `(seq, len)` hold pages for `len` tokens, as
    /// [`reserve`](Self::reserve) does, and returns their block tables in
    /// that order, as narrow as they can be (`s32 [n, max pages]`): the
    /// set-up of a batch of prompts, each with room for the tokens it will
    /// generate. All or nothing: if the pool is short, nothing is reserved
    /// and the error says how many pages the batch needs.
    ///
    /// ```
    /// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
    /// use tessel::kernels::serving::PagePool;
    /// let mut pool = PagePool::new(8, 16);
    /// let tables = pool.reserve_batch([(0, 40), (1, 5)])?; // 3 pages and 1
    /// assert_eq!(tables.shape(), &[2, 3]);
    /// assert_eq!(tables.to_vec::<i32>()?, [0, 1, 2, 3, 0, 0]);
    /// assert!(pool.reserve_batch([(2, 64), (3, 17)]).is_err()); // 6 pages, 4 free
    /// assert_eq!(pool.free_pages(), 4);
    /// # Ok::<(), tessel::Error>(())
    /// ```
    pub fn reserve_batch(
        &mut self,
        seqs: impl IntoIterator<Item = (u64, usize)>,
    ) -> tessel::Result<HostTensor> {
        let seqs: Vec<(u64, usize)> = seqs.into_iter().collect();
        // The pages each sequence lacks, a sequence listed twice counted once.
        let mut most = BTreeMap::new();
        for &(s, len) in &seqs {
            let need = most.entry(s).or_insert(0usize);
            *need = (*need).max(len.div_ceil(self.page_size));
        }
        let more: usize = most
            .iter()
            .map(|(s, &need)| need.saturating_sub(self.pages(*s).len()))
            .sum();
        if more > self.free.len() {
            return Err(invalid(
                "page pool",
                format!(
                    "a batch of {} sequences needs {more} more pages of {} tokens, {} are free",
                    seqs.len(),
                    self.page_size,
                    self.free.len()
                ),
            ));
        }
        for &(s, len) in &seqs {
            self.reserve(s, len)?;
        }
        let ids: Vec<u64> = seqs.iter().map(|&(s, _)| s).collect();
        self.block_tables(&ids, self.max_pages(&ids))
    }

    /// Gives sequence `seq`'s pages back to the pool.
    pub fn release(&mut self, seq: u64) {
        if let Some(pages) = self.owned.remove(&seq) {
            self.free.extend(pages.into_iter().rev());
        }
    }

    /// Sequence `seq`'s pages, in order (empty for an unknown sequence).
    pub fn pages(&self, seq: u64) -> &[u32] {
        self.owned.get(&seq).map_or(&[], Vec::as_slice)
    }

    /// The most pages any of `seqs` holds: the narrowest width their
    /// [`block_tables`](Self::block_tables) can have.
    pub fn max_pages(&self, seqs: &[u64]) -> usize {
        seqs.iter().map(|&s| self.pages(s).len()).max().unwrap_or(0)
    }

    /// The block tables `s32 [seqs.len(), width]` of `seqs`, in order,
    /// each row padded with page 0 (never read: the kernels mask keys past
    /// a sequence's length). Fails if a sequence holds more than `width`
    /// pages.
    pub fn block_tables(&self, seqs: &[u64], width: usize) -> tessel::Result<HostTensor> {
        let mut rows = Vec::with_capacity(seqs.len() * width);
        for &s in seqs {
            let pages = self.pages(s);
            if pages.len() > width {
                return Err(invalid(
                    "page pool",
                    format!(
                        "sequence {s} holds {} pages, more than the table width {width}",
                        pages.len()
                    ),
                ));
            }
            rows.extend(pages.iter().map(|&p| p as i32));
            rows.extend(std::iter::repeat_n(0, width - pages.len()));
        }
        HostTensor::from_vec(rows, [seqs.len(), width])
    }
}

/// Sizes a server compiles for: a request mix is padded up to the
/// smallest bucket that holds it (a batch of 5 runs as 8), so a handful
/// of programs serve every mix.
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::serving::Buckets;
/// let b = Buckets::powers_of_two(64);
/// assert_eq!(b.bucket(5)?, 8);
/// assert_eq!(b.bucket(1)?, 1);
/// assert!(b.bucket(65).is_err());
/// assert_eq!(Buckets::new(vec![48, 16])?.bucket(17)?, 48);
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets(Vec<usize>);

impl Buckets {
    /// These sizes (sorted; at least one, none zero).
    pub fn new(mut sizes: Vec<usize>) -> tessel::Result<Buckets> {
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.is_empty() || sizes[0] == 0 {
            return Err(invalid(
                "buckets",
                format!("bucket sizes must be positive and at least one, got {sizes:?}"),
            ));
        }
        Ok(Buckets(sizes))
    }

    /// 1, 2, 4, ... up to `max` (and `max` itself).
    pub fn powers_of_two(max: usize) -> Buckets {
        let mut sizes = Vec::new();
        let mut s = 1usize;
        while s < max {
            sizes.push(s);
            s = s.saturating_mul(2);
        }
        sizes.push(max.max(1));
        Buckets(sizes)
    }

    /// The sizes.
    pub fn sizes(&self) -> &[usize] {
        &self.0
    }

    /// The smallest bucket of at least `n`; an error past the largest.
    pub fn bucket(&self, n: usize) -> tessel::Result<usize> {
        self.0.iter().copied().find(|&s| s >= n).ok_or_else(|| {
            invalid(
                "buckets",
                format!("{n} is larger than the largest bucket {:?}", self.0.last()),
            )
        })
    }
}
