//! Writing new tokens' keys and values into a cache, at traced positions:
//! into their pages' slots ([`kv_cache_update_with`], quantizing for int8
//! and fp8 pages) or into a contiguous cache ([`cache_update_with`]).
//!
//! Both are scatters: called from a kernel that donates the cache, XLA
//! writes the rows in place (no copy of the cache per step). A write whose
//! slot is out of range (past a sequence's pages, a page id outside the
//! pool, a position past `S_max`) is dropped, never clamped onto another
//! token's slot.

use tessel::ops::{ScatterCombine, ScatterDims};
use tessel::prelude::*;

use super::batch::token_sequences;
use super::checks::{fail, pages_problem, PagedKv};
use super::metadata::{check_lengths, check_ragged};
use crate::quantized::qmax;

/// The slot (`page_id · page_size + offset`) of each of the `t` packed
/// tokens of a ragged batch, or `num_pages · page_size` (out of range) for
/// a token no sequence covers or whose position has no page: token `i` of
/// sequence `b` (rows `cu_q_lens[b] .. cu_q_lens[b + 1]`) sits at position
/// `kv_lens[b] - (cu_q_lens[b + 1] - i)`.
pub fn token_slots(
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
    t: usize,
    page_size: usize,
    num_pages: usize,
) -> Tensor {
    let bt = block_tables.shape();
    let (b, width) = (bt[0], bt[1]);
    let none = (num_pages * page_size).min(i32::MAX as usize) as i32;
    if b == 0 || width == 0 {
        return Tensor::full([t], f64::from(none), S32);
    }
    let tok = Tensor::iota([t], 0, S32);
    let seq = token_sequences(cu_q_lens, t);
    let lo = cu_q_lens.take_with(seq, 0, TakeMode::PromiseInBounds);
    let hi = cu_q_lens.take_with(seq + 1, 0, TakeMode::PromiseInBounds);
    let pos = kv_lens.take_with(seq, 0, TakeMode::PromiseInBounds) - (hi - tok);
    let page = pos / page_size as i32;
    let idx = seq * width as i32 + page;
    let ids =
        block_tables
            .reshape(&[(b * width) as isize])
            .take_with(idx, 0, TakeMode::PromiseInBounds);
    let valid = seq.lt(b as i32)
        & tok.ge(lo)
        & pos.ge(0)
        & page.lt(width as i32)
        & ids.ge(0)
        & ids.lt(num_pages as i32);
    valid.select(ids * page_size as i32 + pos % page_size as i32, none)
}

/// `x` `[T, Hkv, D]` quantized to `dtype` with one f32 scale per token
/// and head (`[T, Hkv]`): `scale = max|x| / qmax` over `D`.
pub fn quantize_tokens(x: Tensor, dtype: DType) -> (Tensor, Tensor) {
    let xf = x.cast(F32);
    let q = qmax(dtype);
    let scale = (xf.abs().max(&[2]) / q).maximum(f32::MIN_POSITIVE);
    let scaled = (xf / scale.expand_dims(2)).clamp(-q, q);
    let scaled = if dtype.is_integer() {
        scaled.round()
    } else {
        scaled
    };
    (scaled.cast(dtype), scale)
}

/// Rows `x` `[T, ..]` written into `pages` `[P, page, ..]` at `slots`.
fn scatter_rows(pages: Tensor, slots: Tensor, x: Tensor) -> Tensor {
    let mut flat: Vec<isize> = pages.shape().iter().map(|&e| e as isize).collect();
    let shape = flat.clone();
    let page = flat.remove(1);
    flat[0] *= page;
    pages
        .reshape(&flat)
        .index_update(0, slots, x.cast(pages.dtype()), ScatterCombine::Set)
        .reshape(&shape)
}

/// Records `message` for `op` over the cache and the new tokens, and
/// returns the cache unchanged.
#[track_caller]
fn bad(op: &str, kv: &PagedKv, k: Tensor, v: Tensor, message: String) -> PagedKv {
    fail::<()>(op, &[kv.k_pages, k, v], message);
    *kv
}

/// Writes the new tokens' keys `k: [T, Hkv, D]` and values `v` (packed as
/// the queries of [`ragged_paged_attention_with`](super::ragged_paged_attention_with):
/// sequence `b`'s rows `cu_q_lens[b] .. cu_q_lens[b + 1]`, the last at
/// position `kv_lens[b] - 1`) into their pages' slots. Quantized pages
/// (`kv.scales` set) get the tokens quantized per token and head, and their
/// scales. Returns the updated cache.
#[track_caller]
pub fn kv_cache_update_with(
    kv: &PagedKv,
    k: Tensor,
    v: Tensor,
    block_tables: Tensor,
    kv_lens: Tensor,
    cu_q_lens: Tensor,
) -> PagedKv {
    let op = "kv_cache_update";
    let (kp, vp) = (kv.k_pages, kv.v_pages);
    let (ps, vps) = (kp.shape(), vp.shape());
    let (ks, vs) = (k.shape(), v.shape());
    if !k.dtype().is_float() || v.dtype() != k.dtype() {
        return bad(
            op,
            kv,
            k,
            v,
            format!(
                "k and v must have one float dtype, got {} and {}",
                k.dtype(),
                v.dtype()
            ),
        );
    }
    if let Some((operands, m)) = pages_problem(kv, k.dtype(), "the new tokens'") {
        fail::<()>(op, &operands, m);
        return *kv;
    }
    if ks.len() != 3 || vs.len() != 3 || ks[0] != vs[0] || ks[1..] != ps[2..] || vs[1..] != vps[2..]
    {
        return bad(op, kv, k, v, format!(
            "k and v must be [T, Hkv, D] matching the pages' [.., {}, {}] and [.., {}, {}], got {} and {}",
            ps[2],
            ps[3],
            vps[2],
            vps[3],
            k.spec(),
            v.spec()
        ));
    }
    let bt = block_tables.shape();
    if block_tables.dtype() != S32 || bt.len() != 2 {
        return bad(
            op,
            kv,
            k,
            v,
            format!(
                "block_tables must be s32 [B, max_pages], got {}",
                block_tables.spec()
            ),
        );
    }
    let b = bt[0];
    if kv_lens.dtype() != S32
        || kv_lens.shape() != [b]
        || cu_q_lens.dtype() != S32
        || cu_q_lens.shape() != [b + 1]
    {
        return bad(
            op,
            kv,
            k,
            v,
            format!(
                "kv_lens must be s32 [{b}] and cu_q_lens s32 [{}], got {} and {}",
                b + 1,
                kv_lens.spec(),
                cu_q_lens.spec()
            ),
        );
    }
    if ps[0].saturating_mul(ps[1]) >= i32::MAX as usize {
        return bad(
            op,
            kv,
            k,
            v,
            format!(
                "the pool's {} × {} slots do not fit s32 slot numbers",
                ps[0], ps[1]
            ),
        );
    }
    check_ragged(block_tables, kv_lens, cu_q_lens, ps[1], ps[0], ks[0]);
    let slots = token_slots(block_tables, kv_lens, cu_q_lens, ks[0], ps[1], ps[0]);
    match kv.scales {
        None => PagedKv::new(scatter_rows(kp, slots, k), scatter_rows(vp, slots, v)),
        Some((kscale, vscale)) => {
            let (kq, ksc) = quantize_tokens(k, kp.dtype());
            let (vq, vsc) = quantize_tokens(v, vp.dtype());
            PagedKv::quantized(
                scatter_rows(kp, slots, kq),
                scatter_rows(vp, slots, vq),
                scatter_rows(kscale, slots, ksc),
                scatter_rows(vscale, slots, vsc),
            )
        }
    }
}

/// Writes `k: [B, Hkv, T, D]` and `v` into the contiguous caches
/// `[B, Hkv, S_max, D]` at positions `positions[b] .. positions[b] + T`
/// (`positions: s32 [B]`, each in `0 ..= S_max - T`, checked inside the
/// program: a write that would not fit is
/// [`Error::Check`](tessel::Error::Check) after the call). Returns the
/// updated caches.
#[track_caller]
pub fn cache_update_with(
    k_cache: Tensor,
    v_cache: Tensor,
    k: Tensor,
    v: Tensor,
    positions: Tensor,
) -> (Tensor, Tensor) {
    let op = "cache_update";
    let (cs, vcs, ks, vs) = (k_cache.shape(), v_cache.shape(), k.shape(), v.shape());
    let ok = cs.len() == 4
        && vcs.len() == 4
        && ks.len() == 4
        && vs.len() == 4
        && vcs[..3] == cs[..3]
        && ks[0] == cs[0]
        && ks[1] == cs[1]
        && ks[3] == cs[3]
        && vs[..3] == ks[..3]
        && vs[3] == vcs[3]
        && k_cache.dtype() == k.dtype()
        && v_cache.dtype() == v.dtype();
    if !ok {
        fail::<()>(
            op,
            &[k_cache, k],
            format!(
                "the caches must be [B, Hkv, S_max, D] and the new tokens [B, Hkv, T, D] of the same B, Hkv, \
                 D and dtypes, got {}, {}, {} and {}",
                k_cache.spec(),
                v_cache.spec(),
                k.spec(),
                v.spec()
            ),
        );
        return (k_cache, v_cache);
    }
    let b = cs[0];
    if positions.dtype() != S32 || positions.shape() != [b] {
        fail::<()>(
            op,
            &[k_cache, positions],
            format!("positions must be s32 [{b}], got {}", positions.spec()),
        );
        return (k_cache, v_cache);
    }
    let (t, s_max) = (ks[2], cs[2]);
    if t > s_max {
        fail::<()>(
            op,
            &[k_cache, k],
            format!("{t} new tokens do not fit a cache of {s_max} positions"),
        );
        return (k_cache, v_cache);
    }
    check_lengths(positions, "positions", 0, s_max - t, "");
    let index = concat(
        &[
            Tensor::iota([b, 1], 0, S32),
            positions.reshape(&[b as isize, 1]),
        ],
        1,
    );
    let dims = ScatterDims {
        update_window_dims: vec![1, 2, 3],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0, 2],
        index_vector_dim: 1,
    };
    let write =
        |cache: Tensor, x: Tensor| cache.scatter(index, x, dims.clone(), ScatterCombine::Set);
    (write(k_cache, k), write(v_cache, v))
}
