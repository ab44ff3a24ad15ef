//! Attention over a paged KV cache: one query per sequence
//! ([`paged_attention_with`]) and a ragged batch of prefill and decode
//! sequences ([`ragged_paged_attention_with`]).
//!
//! Each sequence is visited in a traced loop over the batch; for each, a
//! traced loop over the blocks of pages its block table lists, bounded by
//! its length: `pages_per_block` pages are gathered at a time, never the
//! whole pool. See the engine (`engine.rs`) for the online softmax. A
//! decode step over small tables takes the loop-free form of `dense.rs`.

use tessel::prelude::*;

use super::checks::{check_paged, fail, PagedDims, PagedKv};
use super::dense::{dense_bytes, dense_decode};
use super::engine::{Params, QTile, GEMV_ROWS};
use super::metadata::{check_ragged, check_tables};
use super::source::Source;
use super::ServeOptions;

/// The traced pieces shared by the paged kernels.
struct Paged<'a> {
    kv: &'a PagedKv,
    /// Block tables padded to a multiple of `pages` columns.
    tables: Tensor,
    pages: usize,
    dims: PagedDims,
    params: Params,
    scale: f64,
}

impl<'a> Paged<'a> {
    fn new(kv: &'a PagedKv, block_tables: Tensor, dims: PagedDims, opts: &ServeOptions) -> Self {
        let pages = opts.pages_for(dims.page, dims.width);
        let padded = dims.width.div_ceil(pages).max(1) * pages;
        let tables = if padded == dims.width {
            block_tables
        } else {
            block_tables.pad(0i32, &[0, 0], &[0, (padded - dims.width) as i64], &[0, 0])
        };
        Paged {
            kv,
            tables,
            pages,
            dims,
            params: Params::new(opts, dims.io, dims.stat),
            scale: opts.scale_for(dims.d),
        }
    }

    /// Sequence `b`'s keys, and its length clamped to `0 ..= capacity`.
    fn sequence(&self, b: Tensor, len: Tensor) -> (Source, Tensor) {
        let zero = Tensor::scalar(0.0, S32);
        let width = self.tables.dim(1);
        let table = self
            .tables
            .dynamic_slice(&[b, zero], &[1, width])
            .reshape(&[width as isize]);
        let capacity = (self.dims.width * self.dims.page).min(i32::MAX as usize) as i32;
        let len = len.maximum(0).minimum(capacity);
        let src = Source::Paged {
            k_pages: self.kv.k_pages,
            v_pages: self.kv.v_pages,
            scales: self.kv.scales,
            table,
            pages: self.pages,
        };
        (src, len)
    }

    /// Queries `[.., Hq, D]` (any leading extents) scaled, in the inputs' dtype.
    fn scaled(&self, q: Tensor) -> Tensor {
        (q.cast(self.dims.stat) * self.scale).cast(self.dims.io)
    }
}

/// One sequence of a ragged batch: its keys, their number, and its
/// queries' rows `start .. start + q_len` of the packed batch.
struct SeqQueries {
    src: Source,
    len: Tensor,
    start: Tensor,
    q_len: Tensor,
}

/// Element `i` (a traced s32 scalar) of the vector `v`, as a scalar.
fn at(v: Tensor, i: Tensor) -> Tensor {
    v.dynamic_slice(&[i], &[1]).reshape(&[])
}

/// Decode attention over a paged cache, inside a kernel: `q: [B, Hq, D]`,
/// one query per sequence at the position of its last key; `kv` the pages;
/// `block_tables: s32 [B, M]` lists each sequence's pages in order (key
/// `j` of sequence `b` is token `j % page` of page `block_tables[b, j /
/// page]`); `lengths: s32 [B]` the keys of each sequence (`0 ..= M ·
/// page`). Returns `[B, Hq, Dv]` in `q`'s dtype; a sequence of
/// length 0 gives zeros.
///
/// The metadata is checked inside the program unless
/// [`ServeOptions::unchecked`]: a length outside `0 ..= M · page`, a page
/// id a sequence uses outside `0 .. num_pages`, or a page listed twice in
/// one row is [`Error::Check`](tessel::Error::Check) after the call.
/// Unchecked, page ids are read as XLA reads gather indices (clamped into
/// range). Table entries past a sequence's length are never read.
///
/// A step whose keys, values and logits over the whole block table fit
/// [`ServeOptions::max_dense_bytes`] (16 MiB by default) is computed
/// without loops: every listed page gathered at once and one masked
/// softmax, as a dense decode over a contiguous cache. Larger steps walk
/// each sequence's blocks in traced loops bounded by its length.
#[track_caller]
pub fn paged_attention_with(
    q: Tensor,
    kv: &PagedKv,
    block_tables: Tensor,
    lengths: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let opts = &opts;
    let op = "paged_attention";
    let form = "[B, Hq, D] (one query per sequence)";
    let Some(dims) = check_paged(op, q, form, kv, block_tables, lengths, "lengths", opts) else {
        return q;
    };
    let qs = q.shape();
    if qs[0] != dims.b {
        return fail(
            op,
            &[q, block_tables],
            format!(
                "q has {} sequences, block_tables {}: one row per sequence",
                qs[0], dims.b
            ),
        )
        .unwrap_or(q);
    }
    if dims.b == 0 {
        // No sequence: an empty batch.
        return Tensor::zeros([0, dims.hq, dims.dv], dims.io);
    }
    if !opts.unchecked {
        let num_pages = kv.k_pages.dim(0);
        check_tables(block_tables, lengths, "lengths", dims.page, num_pages);
    }
    let p = Paged::new(kv, block_tables, dims, opts);
    if dense_bytes(&dims) <= opts.max_dense_bytes {
        return dense_decode(kv, block_tables, p.scaled(q), lengths, &dims, &p.params);
    }
    let d = &dims;
    let zero = Tensor::scalar(0.0, S32);
    let out = Tensor::zeros([d.b, d.hq, d.dv], d.io);
    let qs = p.scaled(q);
    fori_loop(0, d.b as i32, out, |b, out| {
        let (src, len) = p.sequence(b, at(lengths, b));
        let qb = qs
            .dynamic_slice(&[b, zero, zero], &[1, d.hq, d.d])
            .reshape(&[d.hkv as isize, d.g as isize, d.d as isize]);
        let pos = len - 1;
        let tile = QTile {
            q: qb,
            pos: pos.reshape(&[1, 1, 1]),
        };
        let o = p.params.attend(&src, tile, len, pos, pos);
        let o = o.cast(d.io).reshape(&[1, d.hq as isize, d.dv as isize]);
        out.dynamic_update_slice(o, &[b, zero, zero])
    })
}

/// Attention of a ragged batch over a paged cache, inside a kernel: the
/// queries of every sequence packed in `q: [T, Hq, D]`, sequence `b`'s
/// being rows `cu_q_lens[b] .. cu_q_lens[b + 1]` (`cu_q_lens: s32 [B +
/// 1]`, non-decreasing, at most `T`); `kv_lens: s32 [B]` the keys of each
/// sequence, the new tokens' included: its last query sits at position
/// `kv_lens[b] - 1` and the others just before, each attending causally
/// (query at position `p` sees keys `..= p`). Prefill (many queries) and
/// decode (one) sequences mix freely. Returns `[T, Hq, Dv]`; rows no
/// sequence covers are zeros.
///
/// Checked inside the program unless [`ServeOptions::unchecked`], as
/// [`paged_attention_with`] checks its tables (with `kv_lens` as the
/// lengths), and the offsets: `cu_q_lens` non-decreasing from `>= 0` to
/// `<= T`, no sequence with more queries than keys.
#[track_caller]
pub fn ragged_paged_attention_with(
    q: Tensor,
    kv: &PagedKv,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let opts = &opts;
    let op = "ragged_paged_attention";
    let form = "[T, Hq, D] (the packed queries)";
    let Some(dims) = check_paged(op, q, form, kv, block_tables, kv_lens, "kv_lens", opts) else {
        return q;
    };
    let qs = q.shape();
    if cu_q_lens.dtype() != S32 || cu_q_lens.shape() != [dims.b + 1] {
        return fail(
            op,
            &[block_tables, cu_q_lens],
            format!(
                "cu_q_lens must be s32 [{}] (B + 1 row offsets), got {}",
                dims.b + 1,
                cu_q_lens.spec()
            ),
        )
        .unwrap_or(q);
    }
    let t = qs[0];
    if dims.b == 0 || t == 0 {
        // No sequence or no query: nothing attends.
        return Tensor::zeros([t, dims.hq, dims.dv], dims.io);
    }
    if !opts.unchecked {
        let num_pages = kv.k_pages.dim(0);
        check_ragged(block_tables, kv_lens, cu_q_lens, dims.page, num_pages, t);
    }
    let bq = opts.block_q;
    let p = Paged::new(kv, block_tables, dims, opts);
    let d = &dims;
    let zero = Tensor::scalar(0.0, S32);
    // Rows past T read and write padding, so a tile never shifts back.
    let qs = p
        .scaled(q)
        .pad(0.0, &[0, 0, 0], &[bq as i64, 0, 0], &[0, 0, 0]);
    let out = Tensor::zeros([t + bq, d.hq, d.dv], d.io);
    let (hkv, g) = (d.hkv as isize, d.g as isize);
    // Queries `r0 .. r0 + rows` of `seq`'s, written into `out`.
    let tile = |rows: usize, seq: &SeqQueries, r0: Tensor, out: Tensor| {
        let row0 = seq.start + r0;
        let qt = qs
            .dynamic_slice(&[row0, zero, zero], &[rows, d.hq, d.d])
            .reshape(&[rows as isize, hkv, g, d.d as isize])
            .transpose(&[1, 2, 0, 3])
            .reshape(&[hkv, g * rows as isize, d.d as isize]);
        // Row r of the tile sits at len - q_len + r0 + r.
        let base = seq.len - seq.q_len + r0;
        let last_row = (seq.q_len - r0).minimum(rows as i32) - 1;
        let qmax = base + last_row;
        let pos = (Tensor::iota([1, d.g, rows], 2, S32) + base)
            .minimum(qmax)
            .reshape(&[1, g * rows as isize, 1]);
        let o = p
            .params
            .attend(&seq.src, QTile { q: qt, pos }, seq.len, base, qmax);
        let o = o
            .cast(d.io)
            .reshape(&[hkv, g, rows as isize, d.dv as isize])
            .transpose(&[2, 0, 1, 3])
            .reshape(&[rows as isize, d.hq as isize, d.dv as isize]);
        let keep = Tensor::iota([rows, 1, 1], 0, S32).le(last_row);
        let old = out.dynamic_slice(&[row0, zero, zero], &[rows, d.hq, d.dv]);
        out.dynamic_update_slice(keep.select(o, old), &[row0, zero, zero])
    };
    // A sequence of at most `few` queries (decode, or a few speculative
    // tokens) is one tile small enough for the two-pass decode form,
    // rather than a tile of `block_q` mostly empty rows.
    let few = (GEMV_ROWS / d.g).max(1).min(bq);
    let out = fori_loop(0, d.b as i32, out, |b, out| {
        let start = at(cu_q_lens, b).maximum(0).minimum(t as i32);
        let end = at(cu_q_lens, b + 1).maximum(start).minimum(t as i32);
        let q_len = end - start;
        let (src, len) = p.sequence(b, at(kv_lens, b));
        let seq = SeqQueries {
            src,
            len,
            start,
            q_len,
        };
        let tiled = |out: Tensor| {
            let tiles = (q_len + (bq as i32 - 1)) / bq as i32;
            fori_loop(0, tiles, out, |i, out| tile(bq, &seq, i * bq as i32, out))
        };
        // One query (decode) is a tile of one row; up to `few`, one tile
        // of `few` rows; more, tiles of `block_q` rows.
        let up_to_few = |out: Tensor| {
            if few == bq || few == 1 {
                return tiled(out);
            }
            cond(
                q_len.gt(0) & q_len.le(few as i32),
                || tile(few, &seq, zero, out),
                || tiled(out),
            )
        };
        if bq == 1 {
            return tiled(out);
        }
        cond(q_len.eq(1), || tile(1, &seq, zero, out), || up_to_few(out))
    });
    out.slice_axis(0, 0, t)
}
