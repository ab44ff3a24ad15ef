//! Decode attention over a contiguous cache `[B, Hkv, S_max, D]` at
//! traced positions.

use tessel::prelude::*;

use super::checks::fail;
use super::engine::{Params, QTile};
use super::metadata::check_lengths;
use super::source::Source;
use super::ServeOptions;

/// Decode attention inside a kernel: `q: [B, Hq, Sq, D]`, the `Sq` newest
/// tokens of each sequence (usually 1); `k_cache: [B, Hkv, S_max, D]` and
/// `v_cache: [B, Hkv, S_max, Dv]`; `positions: s32 [B]` the position of
/// each sequence's first new token — the same `positions` that
/// [`cache_update`](fn@super::cache_update) wrote the new keys at and
/// [`rope_at`](fn@crate::rope::rope_at) rotated them by, so one tensor
/// feeds all three and there is no length to get wrong by one. Query `i`
/// sits at position `positions[b] + i` and sees the keys up to it (and,
/// with a window, not before `position - left`); each position must be in
/// `0 ..= S_max - Sq` (checked inside the program unless
/// [`ServeOptions::unchecked`]: one outside is
/// [`Error::Check`](tessel::Error::Check) after the call). Returns
/// `[B, Hq, Sq, Dv]` in `q`'s dtype. Keys past a sequence's last query are
/// never read into the result, whatever they hold.
#[track_caller]
pub fn decode_attention_with(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    opts: ServeOptions,
) -> Tensor {
    let opts = &opts;
    let op = "decode_attention";
    let (qs, ks, vs) = (q.shape(), k_cache.shape(), v_cache.shape());
    if let Some(m) = opts.problem() {
        return fail(op, &[q], m).unwrap_or(q);
    }
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return fail(
            op,
            &[q, k_cache, v_cache],
            format!(
                "q must be [B, Hq, Sq, D] and the caches [B, Hkv, S_max, D], got {}, {} and {}",
                q.spec(),
                k_cache.spec(),
                v_cache.spec()
            ),
        )
        .unwrap_or(q);
    }
    let io = q.dtype();
    if !io.is_float() || k_cache.dtype() != io || v_cache.dtype() != io {
        return fail(
            op,
            &[q, k_cache, v_cache],
            format!(
                "q and the caches must have one float dtype, got {}, {} and {}",
                io,
                k_cache.dtype(),
                v_cache.dtype()
            ),
        )
        .unwrap_or(q);
    }
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, s_max) = (ks[1], ks[2]);
    if ks[0] != b || vs[0] != b || ks[3] != d || vs[1] != hkv || vs[2] != s_max {
        return fail(
            op,
            &[q, k_cache, v_cache],
            format!(
                "the caches must be [{b}, Hkv, S_max, {d}] with one Hkv and S_max, got {} and {}",
                k_cache.spec(),
                v_cache.spec()
            ),
        )
        .unwrap_or(q);
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        return fail(
            op,
            &[q, k_cache],
            format!("the query heads ({hq}) must be a multiple of the key/value heads ({hkv})"),
        )
        .unwrap_or(q);
    }
    if positions.dtype() != S32 || positions.shape() != [b] {
        return fail(
            op,
            &[q, positions],
            format!("positions must be s32 [{b}], got {}", positions.spec()),
        )
        .unwrap_or(q);
    }
    if sq > s_max {
        return fail(
            op,
            &[q, k_cache],
            format!("{sq} new tokens do not fit a cache of {s_max} positions"),
        )
        .unwrap_or(q);
    }
    if !opts.unchecked {
        let why = format!(" ({sq} new tokens in a cache of {s_max})");
        check_lengths(positions, "positions", 0, s_max - sq, &why);
    }
    let lengths = positions + sq as i32;
    let dv = vs[3];
    let stat = if io == F64 { F64 } else { F32 };
    if s_max == 0 || sq == 0 {
        return Tensor::zeros([b, hq, sq, dv], io);
    }
    let g = hq / hkv;
    let params = Params::new(opts, io, stat);
    let block = opts.block_kv.min(s_max);
    let scale = opts.scale_for(d);
    let qs = (q.cast(stat) * scale).cast(io);
    let zero = Tensor::scalar(0.0, S32);
    let out = Tensor::zeros([b, hq, sq, dv], io);
    let (hkv_i, r) = (hkv as isize, (g * sq) as isize);
    fori_loop(0, b as i32, out, |bi, out| {
        let len = lengths
            .dynamic_slice(&[bi], &[1])
            .reshape(&[])
            .maximum(0)
            .minimum(s_max as i32);
        let qb = qs
            .dynamic_slice(&[bi, zero, zero, zero], &[1, hq, sq, d])
            .reshape(&[hkv_i, r, d as isize]);
        let first = len - sq as i32;
        let pos = (Tensor::iota([1, g, sq], 2, S32) + first).reshape(&[1, r, 1]);
        let src = Source::Contiguous {
            k: k_cache,
            v: v_cache,
            b: bi,
            block,
        };
        let o = params.attend(&src, QTile { q: qb, pos }, len, first, len - 1);
        let o = o
            .cast(io)
            .reshape(&[1, hq as isize, sq as isize, dv as isize]);
        out.dynamic_update_slice(o, &[bi, zero, zero, zero])
    })
}
