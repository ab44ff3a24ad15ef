//! The loop-free form of decode attention over a paged cache, for small
//! block tables: every sequence's pages gathered at once (`[B, Hkv, width,
//! page, D]`), one masked softmax over all of them, one product with the values —
//! what a decode over a contiguous cache computes in JAX, with the pages
//! read through the block tables.
//!
//! The looped forms (`engine.rs`, `two_pass.rs`) walk each sequence's
//! blocks in traced loops bounded by its length, so a step reads only the
//! keys a sequence has; that is what long contexts need. For a table of a
//! few pages the loops cost more than they save: XLA compiles each of them
//! (a 2-layer decode step held 12 loops), and each iteration of the batch
//! loop is a handful of tiny kernels. Below
//! [`max_dense_bytes`](super::ServeOptions::max_dense_bytes) of gathered
//! keys, values and logits, `paged_attention` takes this form.

use tessel::ops::DotDims;
use tessel::prelude::*;

use super::checks::{PagedDims, PagedKv};
use super::engine::{Mask, Params, MASK_VALUE};

/// The bytes the dense form holds for `dims`: the keys and values of every
/// table column (in the queries' dtype) and the logits `[B, Hq, keys]` (in
/// the statistics' dtype).
pub(crate) fn dense_bytes(dims: &PagedDims) -> usize {
    let keys = dims.width.saturating_mul(dims.page);
    let kv = dims
        .hkv
        .saturating_mul(dims.d + dims.dv)
        .saturating_mul(dims.io.size_in_bytes());
    let logits = dims.hq.saturating_mul(dims.stat.size_in_bytes());
    dims.b
        .saturating_mul(keys)
        .saturating_mul(kv.saturating_add(logits))
}

/// A product batched over the two leading axes (sequence, key/value head).
fn batched(lhs_contract: usize, rhs_contract: usize) -> DotDims {
    DotDims {
        lhs_batch: vec![0, 1],
        rhs_batch: vec![0, 1],
        lhs_contract: vec![lhs_contract],
        rhs_contract: vec![rhs_contract],
    }
}

/// Decode attention of `q` (`[B, Hq, D]`, scaled, in the inputs' dtype),
/// one query per sequence at position `lengths[b] - 1`, over the keys `0 ..
/// lengths[b]` (clamped to `0 ..= width · page`) of the pages
/// `block_tables` (`s32 [B, width]`) lists: `[B, Hq, Dv]` in the inputs'
/// dtype, zeros for a sequence of length 0. Page ids are read clamped
/// into range, as the looped forms' gathers read them.
pub(crate) fn dense_decode(
    kv: &PagedKv,
    block_tables: Tensor,
    q: Tensor,
    lengths: Tensor,
    dims: &PagedDims,
    params: &Params,
) -> Tensor {
    let d = dims;
    let keys = d.width * d.page;
    let (b, hkv) = (d.b as isize, d.hkv as isize);
    let ids = block_tables.reshape(&[(d.b * d.width) as isize]);
    // One query row per key/value head (no GQA): products and a sum,
    // which stream the keys (a dot batched over B × Hkv with one row each
    // ran 1.8–3× slower on the CPU plugin); grouped rows: one dot.
    let rowwise = d.g == 1;
    // The row-wise form keeps the keys on two axes, (table column, slot of
    // its page), and each reduction over them reduces both: XLA's CPU
    // compiler splits a reduced axis longer than 32 into a windowed
    // reduction and a reduction of the windows, two kernels where one does
    // (the keys of a 4-page table would be 64 long). The dots of grouped
    // rows contract one key axis: over two they ran 1.5–1.9× slower (B 8,
    // Hq 32, Hkv 8, D 128, 128 keys).
    let key_shape: Vec<isize> = match rowwise {
        true => vec![d.width as isize, d.page as isize],
        false => vec![keys as isize],
    };
    let nk = key_shape.len();
    // `lead`, the key axes, then `tail`.
    let around = |lead: &[isize], tail: &[isize]| [lead, &key_shape[..], tail].concat();
    let key_axes: Vec<isize> = (1..=nk as isize).rev().map(|i| -i).collect();
    // [P, page, Hkv, ..] pages -> [B, Hkv, keys.., ..] of each sequence.
    let gather = |pages: Tensor| {
        let rows = pages.take_with(ids, 0, TakeMode::Clip);
        let rest: Vec<isize> = pages.shape()[3..].iter().map(|&x| x as isize).collect();
        let moved: Vec<usize> = (3..3 + rest.len()).collect();
        rows.reshape(&[&[b, keys as isize, hkv][..], &rest].concat())
            .transpose(&[&[0, 2, 1][..], &moved].concat())
            .reshape(&around(&[b, hkv], &rest))
    };
    let k = gather(kv.k_pages).cast(d.io);
    let v = gather(kv.v_pages).cast(d.io);
    let q = q.reshape(&[b, hkv, d.g as isize, d.d as isize]);
    // Logits `[B, Hkv, g, keys..]`.
    let mut s = if rowwise {
        let q = q.reshape(&[b, hkv, 1, 1, 1, d.d as isize]);
        (q.cast(d.stat) * k.cast(d.stat).expand_dims(2)).sum(&[-1])
    } else {
        q.dot_general(k, batched(3, 3), None, Some(d.stat))
    };
    // Scales `[P, page, Hkv]` -> `[B, Hkv, 1, keys..]`.
    let scales = kv.scales.map(|(ks, vs)| {
        let of = |x: Tensor| gather(x).reshape(&around(&[b, hkv, 1], &[])).cast(d.stat);
        (of(ks), of(vs))
    });
    if let Some((ks, _)) = scales {
        s = s * ks;
    }
    if let Some(cap) = params.soft_cap {
        s = (s * (1.0 / cap)).tanh() * cap;
    }
    let capacity = keys.min(i32::MAX as usize) as i32;
    let mut len_shape = vec![1; 3 + nk];
    len_shape[0] = b;
    let len = lengths.maximum(0).minimum(capacity).reshape(&len_shape);
    // Each key's position in its sequence, `[1, 1, 1, keys..]`.
    let positions: Vec<usize> = around(&[1, 1, 1], &[])
        .iter()
        .map(|&x| x as usize)
        .collect();
    let kpos = match rowwise {
        true => {
            Tensor::iota(positions.clone(), 3, S32) * d.page as i32
                + Tensor::iota(positions, 4, S32)
        }
        false => Tensor::iota(positions, 3, S32),
    };
    // The sequence's keys, seen by its query at `len - 1` as the looped
    // forms see them.
    let mask = Mask {
        pos: len - 1,
        kv_len: len,
    };
    let owned = mask.owned(kpos, None);
    let s = mask
        .visible(owned, kpos, params.window)
        .select(s, f64::NEG_INFINITY);
    let m = s.max_keepdims(&key_axes).maximum(MASK_VALUE);
    let mut p = (s - m).exp();
    let l = p.sum(&key_axes).expand_dims(-1);
    if let Some((_, vs)) = scales {
        p = p * vs;
    }
    // Slots the sequence does not own hold anything: zero them.
    let v = owned.reshape(&around(&[b, 1], &[1])).select(v, 0.0);
    let p = if d.io == d.stat { p } else { p.cast(d.io) };
    let acc = if rowwise {
        (p.cast(d.stat).expand_dims(-1) * v.cast(d.stat).expand_dims(2)).sum(&[3, 4])
    } else {
        p.dot_general(v, batched(3, 2), None, Some(d.stat))
    };
    let o = l.ne(0.0).select(acc / l, 0.0);
    o.cast(d.io).reshape(&[b, d.hq as isize, d.dv as isize])
}
