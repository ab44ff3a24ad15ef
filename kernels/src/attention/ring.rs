//! Ring attention (sequence parallelism) for per-device (`shard_map`)
//! kernels: the sequence is split over a mesh axis, each device keeps its
//! block of queries, and the blocks of keys and values travel around the
//! ring with `ppermute`, each folded into an online softmax as it arrives.
//! Under the causal mask a device skips, with a traced `cond`, the blocks
//! that come from later in the sequence.

use tessel::prelude::*;

/// How the sequence is spread, and what hides a key.
#[derive(Clone, Copy, Debug)]
pub struct Ring<'a> {
    /// The mesh axis the sequence is split over.
    pub axis: &'a str,
    /// The devices along `axis` (the ring's length).
    pub devices: usize,
    /// Whether a query sees only keys at or before its position.
    pub causal: bool,
}

/// This device's block of the attention output, `[B, H, S/n, D]`, from its
/// blocks of `q`, `k` and `v` (`[B, H, S/n, D]`; device `i` holds positions
/// `i·S/n ..`). `kv_len` (s32 `[B]`, optional) is each sequence's length:
/// keys at or past it are hidden, and a query that sees no key at all (a
/// sequence of length 0) gets zeros. Logits and statistics are f32; the
/// result has `q`'s dtype.
#[track_caller]
pub fn ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kv_len: Option<Tensor>,
    ring: &Ring<'_>,
) -> Tensor {
    let (b, h, s, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let n = ring.devices as i32;
    let me = axis_index(ring.axis);
    let qs = q.cast(F32) * (1.0 / (d as f64).sqrt());
    let rows = Tensor::iota([s, 1], 0, S32) + me * s as i32;
    // [B, 1, 1, 1]: the length of each sequence (all keys when none given).
    let len = kv_len.map_or(Tensor::full([b, 1, 1, 1], i32::MAX as f64, S32), |l| {
        l.cast(S32).reshape(&[b as isize, 1, 1, 1])
    });
    let pairs: Vec<(usize, usize)> = (0..ring.devices)
        .map(|i| (i, (i + 1) % ring.devices))
        .collect();
    let causal = ring.causal;
    let init = (
        Tensor::full([b, h, s, 1], -1e30, F32),
        Tensor::full([b, h, s, 1], 0.0, F32),
        Tensor::full([b, h, s, d], 0.0, F32),
        k.cast(F32),
        v.cast(F32),
    );
    let step = |src: Tensor, (m, l, acc, kb, vb): (Tensor, Tensor, Tensor, Tensor, Tensor)| {
        let cols = Tensor::iota([1, s], 1, S32) + src * s as i32;
        let mut visible = cols.lt(len);
        if causal {
            visible = visible & cols.le(rows);
        }
        let logits = qs.matmul(kb.transpose(&[0, 1, 3, 2]));
        let logits = visible.select(logits, f64::NEG_INFINITY);
        let m_new = m.maximum(logits.max_keepdims(&[-1]));
        let p = (logits - m_new).exp();
        let alpha = (m - m_new).exp();
        (
            m_new,
            l * alpha + p.sum_keepdims(&[-1]),
            acc * alpha + p.matmul(vb),
        )
    };
    let (_, l, acc, _, _) = fori_loop(
        0,
        n,
        init,
        |i, carry: (Tensor, Tensor, Tensor, Tensor, Tensor)| {
            // The block held now started on device `me - i` (mod n).
            let src = (me - i + n) % n;
            let (m, l, acc, kb, vb) = carry;
            let (m, l, acc) = if causal {
                cond(
                    src.le(me),
                    || step(src, (m, l, acc, kb, vb)),
                    || (m, l, acc),
                )
            } else {
                step(src, (m, l, acc, kb, vb))
            };
            (
                m,
                l,
                acc,
                kb.ppermute(ring.axis, &pairs),
                vb.ppermute(ring.axis, &pairs),
            )
        },
    );
    let seen = l.gt(0.0);
    (seen.select(acc / seen.select(l, 1.0), 0.0)).cast(q.dtype())
}
