//! The serving kernels' metadata checked inside the program: block tables,
//! lengths and query offsets are traced values (a decode loop builds them
//! on the device), so their checks are [`check`]s, raised after the call as
//! [`Error::Check`](tessel::Error::Check) naming the kernel, the entry and
//! its value. Without them a bad page id or length is clamped by XLA's
//! gathers into a read of another sequence's page (one user's context in
//! another's answer), or a write is dropped.
//!
//! The checks an op makes are collected in [`MetadataChecks`] and found by
//! one reduction over the metadata only (`B × max_pages` entries; for ids
//! listed twice, the pairs of entries of a narrow row, or a sort per row of
//! a wide one): no key or value is touched. Each reduction is a kernel of
//! its own, and a kernel costs the CPU plugin 10–15 ms of compile whatever
//! its size; five separate ones made a 2-layer GPT's decode step compile
//! about 60 ms slower. A check already made in the same region over the
//! same traced values is not made again.

use tessel::ops::check::{check, first_check};
use tessel::prelude::*;

/// What a metadata check is, beside the values it reads: a cache update
/// and the attention reading the cache check one block table (or one set
/// of lengths or offsets) once per program region
/// ([`first_check`]), whichever op comes first.
#[derive(Hash)]
enum Checked {
    /// [`MetadataChecks::tables`] of pages of `page` tokens in a pool of `num_pages`.
    Tables { page: usize, num_pages: usize },
    /// [`MetadataChecks::lengths`] within `min..=max`.
    Lengths { min: usize, max: usize },
    /// [`MetadataChecks::offsets`] for `t` packed queries.
    Offsets { t: usize },
}

/// The most `rows × width²` entry pairs [`MetadataChecks::ids`] compares
/// directly for ids listed twice; wider tables sort each row instead.
/// XLA's sort costs a program about 60–90 ms of compile time (a 2-layer
/// GPT's decode step on the CPU plugin), where the pairs cost none that
/// could be told from noise, and 2¹⁶ comparisons take microseconds.
const PAIRWISE_MAX: usize = 1 << 16;

/// The values a failed check reports, made from the row and the column of
/// its first failing entry (s32 scalars).
type Report = Box<dyn FnOnce(Tensor, Tensor) -> Vec<Tensor>>;

/// One check waiting for the reduction its op's checks share.
struct Pending {
    /// `pred [R, M]`: the entries that fail it.
    bad: Tensor,
    /// The message, a `{}` for each reported value.
    message: String,
    /// The reported values.
    report: Report,
}

/// The metadata checks of one op, made by one reduction when
/// [`raise`](Self::raise)d: each check is a table of failing entries; the
/// tables are laid end to end in the order they were added and the first
/// failing entry of all is found. That entry's check fails; the checks
/// before it pass, and so do the ones after it, which is what the caller
/// sees either way (the first failed check in program order is the one
/// reported).
#[derive(Default)]
pub(crate) struct MetadataChecks {
    pending: Vec<Pending>,
}

/// Element `i` of the vector `v`, as a scalar.
pub(crate) fn element(v: Tensor, i: Tensor) -> Tensor {
    v.dynamic_slice(&[i], &[1]).reshape(&[])
}

/// Element `(row, col)` of the matrix `x`, as a scalar.
fn entry(x: Tensor, row: Tensor, col: Tensor) -> Tensor {
    x.dynamic_slice(&[row, col], &[1, 1]).reshape(&[])
}

/// `bad` (`pred [B]`) as the one-column table of a per-sequence check.
fn column(bad: Tensor) -> Tensor {
    bad.reshape(&[bad.dim(0) as isize, 1])
}

impl MetadataChecks {
    /// No checks yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds a check failing at the true entries of `bad` (`pred [R, M]`)
    /// with `message`, reporting what `report` makes of the first one's
    /// row and column.
    pub(crate) fn table(
        &mut self,
        bad: Tensor,
        message: impl Into<String>,
        report: impl FnOnce(Tensor, Tensor) -> Vec<Tensor> + 'static,
    ) {
        let message = message.into();
        self.pending.push(Pending {
            bad,
            message,
            report: Box::new(report),
        });
    }

    /// Checks `lens` (`s32 [B]`, named `lens_name`) against the capacity
    /// of block tables `[B, width]` of pages of `page` tokens, and the page
    /// ids each sequence uses (the first `ceil(len / page)` of its row):
    /// each in `0 .. num_pages`, none listed twice in one row.
    #[track_caller]
    pub(crate) fn tables(
        &mut self,
        block_tables: Tensor,
        lens: Tensor,
        lens_name: &str,
        page: usize,
        num_pages: usize,
    ) {
        let (b, width) = (block_tables.dim(0), block_tables.dim(1));
        if b == 0 || !first_check(&Checked::Tables { page, num_pages }, &[block_tables, lens]) {
            return;
        }
        let capacity = (width * page).min(i32::MAX as usize);
        let holds = format!(" (a block table row holds {width} pages of {page} tokens)");
        self.lengths(lens, lens_name, 0, capacity, &holds);
        if width == 0 {
            return;
        }
        // Entry (s, j) is used when page j holds one of sequence s's keys.
        let used =
            (Tensor::iota([b, width], 1, S32) * page as i32).lt(lens.reshape(&[b as isize, 1]));
        self.ids(
            block_tables,
            used,
            num_pages,
            "block_tables",
            "not a page of the pool",
            "sequence {} lists page {} twice in its block table",
        );
    }

    /// Checks the used entries (`used`, `pred [R, W]`) of an id table `ids`
    /// (`s32 [R, W]`, named `name`): each in `0 .. bound` (else `name[r, j]
    /// = id is <outside> (0..bound)`), none twice in a row (`twice`, with
    /// the row and the id for its two `{}`).
    #[track_caller]
    pub(crate) fn ids(
        &mut self,
        ids: Tensor,
        used: Tensor,
        bound: usize,
        name: &str,
        outside: &str,
        twice: &str,
    ) {
        let (r, width) = (ids.dim(0), ids.dim(1));
        if r == 0 || width == 0 {
            return;
        }
        let out = used & (ids.lt(0) | ids.ge(bound.min(i32::MAX as usize) as i32));
        self.table(
            out,
            format!("{name}[{{}}, {{}}] = {{}} is {outside} (0..{bound})"),
            move |s, j| vec![s, j, entry(ids, s, j)],
        );
        if width < 2 {
            return;
        }
        if r.saturating_mul(width).saturating_mul(width) <= PAIRWISE_MAX {
            // Narrow rows: each used entry against the used ones before it
            // in its row, all at once.
            let (rr, w) = (r as isize, width as isize);
            let before =
                Tensor::iota([width, width], 1, S32).lt(Tensor::iota([width, width], 0, S32));
            let same = ids.reshape(&[rr, w, 1]).eq(ids.reshape(&[rr, 1, w]));
            let both = used.reshape(&[rr, w, 1]) & used.reshape(&[rr, 1, w]);
            let dup = (same & both & before).reshape(&[rr, w * w]);
            self.table(dup, twice, move |s, at| {
                vec![s, entry(ids, s, at / width as i32)]
            });
            return;
        }
        // Unused entries become distinct ids past every valid one, then
        // each row is sorted: an id listed twice sits next to itself.
        let beyond = Tensor::iota([r, width], 1, S32) + bound.min(i32::MAX as usize / 2) as i32;
        let sorted = used.select(ids, beyond).sort(1, false);
        let left = sorted.slice_axis(1, 0, width - 1);
        let right = sorted.slice_axis(1, 1, width);
        self.table(left.eq(right), twice, move |s, j| {
            vec![s, entry(left, s, j)]
        });
    }

    /// Checks a ragged batch's query offsets `cu_q_lens` (`s32 [B + 1]`)
    /// against `t` packed queries and the key counts `kv_lens`:
    /// non-decreasing from `cu_q_lens[0] >= 0` to `cu_q_lens[B] <= t`, and
    /// each sequence's queries no more than its keys (they are its last
    /// tokens).
    #[track_caller]
    pub(crate) fn offsets(&mut self, cu_q_lens: Tensor, kv_lens: Tensor, t: usize) {
        if !first_check(&Checked::Offsets { t }, &[cu_q_lens, kv_lens]) {
            return;
        }
        let b = kv_lens.dim(0);
        let lo = cu_q_lens.slice_axis(0, 0, b);
        let hi = cu_q_lens.slice_axis(0, 1, b + 1);
        let head = cu_q_lens.slice_axis(0, 0, 1);
        let tail = cu_q_lens.slice_axis(0, b, b + 1);
        let ends = !(head.ge(0) & tail.le(t as i32));
        self.table(
            ends.reshape(&[1, 1]),
            format!(
                "cu_q_lens must run from >= 0 to <= {t} (the packed queries), got {{}} .. {{}}"
            ),
            move |_, _| vec![head.reshape(&[]), tail.reshape(&[])],
        );
        if b == 0 {
            return;
        }
        self.table(
            column(hi.lt(lo)),
            "cu_q_lens decreases at sequence {}: {} then {}",
            move |s, _| vec![s, element(lo, s), element(hi, s)],
        );
        // The count is reported from its two offsets: `hi - lo` itself,
        // read by the check and the report, would be a kernel of its own.
        self.table(
            column((hi - lo).gt(kv_lens)),
            "sequence {} has {} queries but kv_lens {} (its keys must include its queries)",
            move |s, _| vec![s, element(hi, s) - element(lo, s), element(kv_lens, s)],
        );
    }

    /// Checks per-sequence counts `lens` (`s32 [B]`, named `name`), each
    /// in `min ..= max`; `why` follows the message (what bounds them).
    #[track_caller]
    pub(crate) fn lengths(&mut self, lens: Tensor, name: &str, min: usize, max: usize, why: &str) {
        let b = lens.dim(0);
        if b == 0 || !first_check(&Checked::Lengths { min, max }, &[lens]) {
            return;
        }
        let bad = lens.lt(min as i32) | lens.gt(max.min(i32::MAX as usize) as i32);
        self.table(
            column(bad),
            format!("{name}[{{}}] = {{}} is not in {min}..={max}{why}"),
            move |s, _| vec![s, element(lens, s)],
        );
    }

    /// Makes the checks added: one reduction finds the first failing entry
    /// of all the tables laid end to end; the check whose table holds it
    /// fails, reporting its values at that entry's row and column.
    #[track_caller]
    pub(crate) fn raise(self) {
        let sizes: Vec<usize> = self
            .pending
            .iter()
            .map(|p| p.bad.dim(0) * p.bad.dim(1))
            .collect();
        let total: usize = sizes.iter().sum();
        // The tables end to end (table k from entry starts[k]) as 0/1,
        // and a 1 past the last: the first 1 is the first failing entry,
        // or `total` when none fails. An arg-reduction is one kernel
        // whatever its length (XLA's CPU compiler splits a plain one
        // longer than 32 into two).
        let mut starts = Vec::with_capacity(sizes.len());
        let mut next = 0;
        let mut placed = Vec::with_capacity(sizes.len());
        for (p, &n) in self.pending.iter().zip(&sizes) {
            starts.push(next);
            let own = p.bad.reshape(&[n as isize]).cast(S32);
            placed.push(own.pad(0.0, &[next as i64], &[(total - next - n) as i64], &[0]));
            next += n;
        }
        let Some(all) = placed.into_iter().reduce(|a, b| a.maximum(b)) else {
            return;
        };
        let all = all.pad(1.0, &[0], &[1], &[0]);
        let found = all.argmax(0);
        for ((p, start), n) in self.pending.into_iter().zip(starts).zip(sizes) {
            let m = p.bad.dim(1).max(1) as i32;
            let at = (found - start as i32).clamp(0, n.saturating_sub(1) as i32);
            let passes = found.lt(start as i32) | found.ge((start + n) as i32);
            let values = (p.report)(at / m, at % m);
            check(passes, p.message, &values);
        }
    }
}

/// [`MetadataChecks::tables`], made at once.
#[track_caller]
pub(crate) fn check_tables(
    block_tables: Tensor,
    lens: Tensor,
    lens_name: &str,
    page: usize,
    num_pages: usize,
) {
    let mut c = MetadataChecks::new();
    c.tables(block_tables, lens, lens_name, page, num_pages);
    c.raise();
}

/// [`MetadataChecks::tables`] and [`MetadataChecks::offsets`] of a ragged
/// batch, by one reduction.
#[track_caller]
pub(crate) fn check_ragged(
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
    page: usize,
    num_pages: usize,
    t: usize,
) {
    let mut c = MetadataChecks::new();
    c.tables(block_tables, kv_lens, "kv_lens", page, num_pages);
    c.offsets(cu_q_lens, kv_lens, t);
    c.raise();
}

/// [`MetadataChecks::lengths`], made at once.
#[track_caller]
pub(crate) fn check_lengths(lens: Tensor, name: &str, min: usize, max: usize, why: &str) {
    let mut c = MetadataChecks::new();
    c.lengths(lens, name, min, max, why);
    c.raise();
}
