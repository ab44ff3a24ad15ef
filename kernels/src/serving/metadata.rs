//! The serving kernels' metadata checked inside the program: block tables,
//! lengths and query offsets are traced values (a decode loop builds them
//! on the device), so their checks are [`check`]s, raised after the call as
//! [`Error::Check`](tessel::Error::Check) naming the kernel, the entry and
//! its value. Without them a bad page id or length is clamped by XLA's
//! gathers into a read of another sequence's page (one user's context in
//! another's answer), or a write is dropped.
//!
//! Each check reduces over the metadata only (`B × max_pages` entries;
//! for ids listed twice, the pairs of entries of a narrow row, or a sort
//! per row of a wide one): no key or value is touched. A check already made
//! in the same region over the same traced values is not made again.

use tessel::check;
use tessel::ops::check::first_check;
use tessel::prelude::*;

/// What a metadata check is, beside the values it reads: a cache update
/// and the attention reading the cache check one block table (or one set
/// of lengths or offsets) once per program region
/// ([`first_check`]), whichever op comes first.
#[derive(Hash)]
enum Checked {
    /// [`check_tables`] of pages of `page` tokens in a pool of `num_pages`.
    Tables { page: usize, num_pages: usize },
    /// [`check_lengths`] within `min..=max`.
    Lengths { min: usize, max: usize },
    /// [`check_offsets`] for `t` packed queries.
    Offsets { t: usize },
}

/// The most `rows × width²` entry pairs [`check_ids`] compares directly
/// for ids listed twice; wider tables sort each row instead. XLA's sort
/// costs a program about 60–90 ms of compile time (a 2-layer GPT's decode
/// step on the CPU plugin), where the pairs cost none that could be told
/// from noise, and 2¹⁶ comparisons take microseconds.
const PAIRWISE_MAX: usize = 1 << 16;

/// Whether no element of `bad` (`[B, M]`) is true (a pred scalar), and
/// the first true one's (row, column) as s32 scalars (`(0, 0)` when none
/// is). One reduction gives both: the check's condition is the scalar, not
/// a second reduction over `bad` (each costs the program a kernel).
fn first(bad: Tensor) -> (Tensor, Tensor, Tensor) {
    let (b, m) = (bad.dim(0), bad.dim(1));
    let n = (b * m) as f64;
    let flat = Tensor::iota([b, m], 0, S32) * m as i32 + Tensor::iota([b, m], 1, S32);
    let found = bad.select(flat, n).min(&[0, 1]);
    let at = found.minimum((n - 1.0).max(0.0));
    (found.ge(n), at / m as i32, at % m as i32)
}

/// Element `i` of the vector `v`, as a scalar.
fn element(v: Tensor, i: Tensor) -> Tensor {
    v.dynamic_slice(&[i], &[1]).reshape(&[])
}

/// Element `(row, col)` of the matrix `x`, as a scalar.
fn entry(x: Tensor, row: Tensor, col: Tensor) -> Tensor {
    x.dynamic_slice(&[row, col], &[1, 1]).reshape(&[])
}

/// Checks `lens` (`s32 [B]`, named `lens_name`) against the capacity of
/// block tables `[B, width]` of pages of `page` tokens, and the page ids
/// each sequence uses (the first `ceil(len / page)` of its row): each in
/// `0 .. num_pages`, none listed twice in one row.
#[track_caller]
pub(crate) fn check_tables(
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
    check_lengths(lens, lens_name, 0, capacity, &holds);
    if width == 0 {
        return;
    }
    // Entry (s, j) is used when page j holds one of sequence s's keys.
    let used = (Tensor::iota([b, width], 1, S32) * page as i32).lt(lens.reshape(&[b as isize, 1]));
    check_ids(
        block_tables,
        used,
        num_pages,
        "block_tables",
        "not a page of the pool",
        "sequence {} lists page {} twice in its block table",
    );
}

/// Checks the used entries (`used`, `pred [R, W]`) of an id table `ids`
/// (`s32 [R, W]`, named `name`): each in `0 .. bound` (else `name[r, j] =
/// id is <outside> (0..bound)`), none twice in a row (`twice`, with the
/// row and the id for its two `{}`).
#[track_caller]
pub(crate) fn check_ids(
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
    let (none, s, j) = first(out);
    check!(
        none,
        &format!("{name}[{{}}, {{}}] = {{}} is {outside} (0..{bound})"),
        s,
        j,
        entry(ids, s, j)
    );
    if width < 2 {
        return;
    }
    if r.saturating_mul(width).saturating_mul(width) <= PAIRWISE_MAX {
        // Narrow rows: each used entry against the used ones before it in
        // its row, all at once.
        let (rr, w) = (r as isize, width as isize);
        let before = Tensor::iota([width, width], 1, S32).lt(Tensor::iota([width, width], 0, S32));
        let same = ids.reshape(&[rr, w, 1]).eq(ids.reshape(&[rr, 1, w]));
        let both = used.reshape(&[rr, w, 1]) & used.reshape(&[rr, 1, w]);
        let dup = (same & both & before).reshape(&[rr, w * w]);
        let (none, s, at) = first(dup);
        check!(none, twice, s, entry(ids, s, at / width as i32));
        return;
    }
    // Unused entries become distinct ids past every valid one, then each
    // row is sorted: an id listed twice sits next to itself.
    let beyond = Tensor::iota([r, width], 1, S32) + bound.min(i32::MAX as usize / 2) as i32;
    let sorted = used.select(ids, beyond).sort(1, false);
    let left = sorted.slice_axis(1, 0, width - 1);
    let right = sorted.slice_axis(1, 1, width);
    let dup = left.eq(right);
    let (none, s, j) = first(dup);
    check!(none, twice, s, entry(left, s, j));
}

/// Checks a ragged batch's query offsets `cu_q_lens` (`s32 [B + 1]`)
/// against `t` packed queries and the key counts `kv_lens`: non-decreasing
/// from `cu_q_lens[0] >= 0` to `cu_q_lens[B] <= t`, and each sequence's
/// queries no more than its keys (they are its last tokens).
#[track_caller]
pub(crate) fn check_offsets(cu_q_lens: Tensor, kv_lens: Tensor, t: usize) {
    if !first_check(&Checked::Offsets { t }, &[cu_q_lens, kv_lens]) {
        return;
    }
    let b = kv_lens.dim(0);
    let lo = cu_q_lens.slice_axis(0, 0, b);
    let hi = cu_q_lens.slice_axis(0, 1, b + 1);
    let head = cu_q_lens.slice_axis(0, 0, 1).reshape(&[]);
    let tail = cu_q_lens.slice_axis(0, b, b + 1).reshape(&[]);
    check!(
        head.ge(0) & tail.le(t as i32),
        &format!("cu_q_lens must run from >= 0 to <= {t} (the packed queries), got {{}} .. {{}}"),
        head,
        tail
    );
    if b == 0 {
        return;
    }
    let falls = hi.lt(lo);
    let (none, s, _) = first(falls.reshape(&[b as isize, 1]));
    check!(
        none,
        "cu_q_lens decreases at sequence {}: {} then {}",
        s,
        element(lo, s),
        element(hi, s)
    );
    let q_lens = hi - lo;
    let short = q_lens.gt(kv_lens);
    let (none, s, _) = first(short.reshape(&[b as isize, 1]));
    check!(
        none,
        "sequence {} has {} queries but kv_lens {} (its keys must include its queries)",
        s,
        element(q_lens, s),
        element(kv_lens, s)
    );
}

/// Checks per-sequence counts `lens` (`s32 [B]`, named `name`), each in
/// `min ..= max`; `why` follows the message (what bounds them).
#[track_caller]
pub(crate) fn check_lengths(lens: Tensor, name: &str, min: usize, max: usize, why: &str) {
    let b = lens.dim(0);
    if b == 0 || !first_check(&Checked::Lengths { min, max }, &[lens]) {
        return;
    }
    let bad = lens.lt(min as i32) | lens.gt(max.min(i32::MAX as usize) as i32);
    let (none, s, _) = first(bad.reshape(&[b as isize, 1]));
    check!(
        none,
        &format!("{name}[{{}}] = {{}} is not in {min}..={max}{why}"),
        s,
        element(lens, s)
    );
}
