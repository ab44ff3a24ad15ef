//! The online-softmax step the attention kernels share: the context of one
//! call ([`Ctx`]), one block of keys scored, masked and folded into the
//! running statistics and accumulator (the optional inputs are in
//! `optional_inputs.rs`, tiles and dropout bits in `tiles.rs`, the argument
//! checks in `checks.rs`).
//!
//! Layout: queries are viewed as `[B, Hkv, G, Sq, D]` (`G = Hq / Hkv`
//! query heads per key/value head), so grouped-query attention contracts
//! each query group against its one key/value head without repeating keys or
//! values.
//!
//! A block of logits is `[B, Hkv, G·rows, keys]` (the query heads of a
//! group and their rows merged), the running statistics `[B, Hkv, G·rows,
//! 1]` and the accumulator `[B, Hkv, G·rows, Dv]`. The row statistics (max,
//! sum) reduce the keys split into lanes of 8, `[.., keys / 8, 8]`, first
//! each run of 8 keys, then (behind an optimization barrier) the partial
//! results ([`row_reduce`]): on the CPU plugin a plain max over the minor axis
//! compiles to a scalar loop that costs as much as both matmuls of the block
//! together. Masks and biases are built as
//! `[.., G or 1, rows, keys]` and broadcast into that layout
//! ([`Ctx::flat`]). The queries of a block are multiplied by the logit
//! scale once, before its loop over keys.

use tessel::ops::DotDims;
use tessel::prelude::*;

use super::checks::Dims;
use super::optional_inputs::AttentionExtras;
use super::options::{Band, FlashOptions};
use super::tiles::{after, dropout_keep, per_head_5d, row_reduce, tile, Pos};

/// The initial running maximum: finite, so that a row whose keys are all
/// masked (logits `-inf`) never computes `-inf - (-inf)`.
pub(crate) const MASK_VALUE: f64 = -0.7 * f32::MAX as f64;

/// The running statistics of a block of query rows: max `m`, sum `l`
/// (both `[B, Hkv, G·rows, 1]`) and the accumulator `[B, Hkv, G·rows, Dv]`.
pub(crate) type State = (Tensor, Tensor, Tensor);

/// An element mask for one block beyond the optional inputs.
#[derive(Clone, Copy)]
pub(crate) enum Elem<'a> {
    /// None: every position of the block is visible (to the layout).
    None,
    /// This `pred` mask (broadcasting to the block `[B, Hkv, G, rows, keys]`).
    Always(Tensor),
    /// The mask made by the closure, applied only when the scalar `pred`
    /// holds (an XLA conditional: the mask is not computed otherwise).
    When(Tensor, &'a dyn Fn() -> Tensor),
}

/// Everything the block step reads.
pub(crate) struct Ctx<'a> {
    pub(crate) d: Dims,
    pub(crate) o: &'a FlashOptions,
    pub(crate) scale: f64,
    /// `[B, Hkv, G, Sq, D]`.
    pub(crate) q5: Tensor,
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) bias5: Option<Tensor>,
    pub(crate) mask5: Option<Tensor>,
    pub(crate) segment_ids: Option<(Tensor, Tensor)>,
    pub(crate) seed: Option<Tensor>,
    /// The traced offset of the queries' positions, s32 `[B or 1, 1, 1, 1, 1]`.
    pub(crate) q_offset: Option<Tensor>,
}

/// One block of query rows: its queries, where it starts, how many rows it
/// has, and its segment ids `[B, 1, 1, r, 1]`. The queries are multiplied
/// by the logit scale (in f32, then rounded back to the inputs' dtype) and
/// laid out `[B, Hkv, G·r, D]`.
#[derive(Clone, Copy)]
pub(crate) struct Row {
    pub(crate) qb: Tensor,
    pub(crate) q0: Pos,
    pub(crate) r: usize,
    pub(crate) q_seg: Option<Tensor>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        x: &AttentionExtras,
        o: &'a FlashOptions,
        d: Dims,
    ) -> Ctx<'a> {
        let q5 = q.reshape(&[
            d.b as isize,
            d.hkv as isize,
            d.g as isize,
            d.sq as isize,
            d.d as isize,
        ]);
        Ctx {
            d,
            o,
            scale: o.scale_for(d.d),
            q5,
            k,
            v,
            bias5: x.bias.map(|t| per_head_5d(t, &d)),
            mask5: x.mask.map(|t| per_head_5d(t, &d)),
            segment_ids: x.segment_ids,
            seed: x.dropout_seed.filter(|_| o.dropout_rate > 0.0),
            q_offset: x.q_offset.map(|t| t.cast(S32).reshape(&[-1, 1, 1, 1, 1])),
        }
    }

    /// The rows `q0 .. q0 + r`.
    pub(crate) fn row(&self, q0: Pos, r: usize) -> Row {
        self.row_read(q0, q0, r)
    }

    /// The rows `q0 .. q0 + r` (`q0` static), read only once `dep` is
    /// computed (see [`after`]).
    pub(crate) fn row_after(&self, q0: usize, r: usize, dep: Tensor) -> Row {
        self.row_read(Pos::Static(q0), after(q0, dep), r)
    }

    fn row_read(&self, q0: Pos, read_at: Pos, r: usize) -> Row {
        let d = &self.d;
        let qb = tile(self.q5, &[(3, read_at, r)], 0.0);
        let qb = (qb.cast(d.stat) * self.scale).cast(d.io).reshape(&[
            d.b as isize,
            d.hkv as isize,
            (d.g * r) as isize,
            d.d as isize,
        ]);
        Row {
            qb,
            q0,
            r,
            q_seg: self.segment_ids.map(|(qs, _)| {
                tile(qs, &[(1, q0, r)], 0.0).reshape(&[d.b as isize, 1, 1, r as isize, 1])
            }),
        }
    }

    /// The initial statistics of a row.
    pub(crate) fn init(&self, r: usize) -> State {
        let d = &self.d;
        (
            Tensor::full([d.b, d.hkv, d.g * r, 1], MASK_VALUE, d.stat),
            Tensor::zeros([d.b, d.hkv, d.g * r, 1], d.stat),
            Tensor::zeros([d.b, d.hkv, d.g * r, d.dv], d.stat),
        )
    }

    /// A mask or bias `[b, h, g, r, c]` (`b`, `h`, `g` 1 or full; `r` 1 or
    /// full) in the logits' layout `[b, h, G·r, c]`.
    pub(crate) fn flat(&self, t: Tensor) -> Tensor {
        let s = t.shape();
        let g = self.d.g;
        let t = if s[2] == g {
            t
        } else {
            t.broadcast_to([s[0], s[1], g, s[3], s[4]])
        };
        t.reshape(&[
            s[0] as isize,
            s[1] as isize,
            (g * s[3]) as isize,
            s[4] as isize,
        ])
    }

    /// The scaled, soft-capped, biased logits `[B, Hkv, G·r, c]` of `row`
    /// against keys `k0 .. k0 + c`, with the optional inputs' masks applied
    /// (hidden logits are `-inf`) and `elem` on top.
    pub(crate) fn logits(&self, row: &Row, k0: Pos, c: usize, elem: Elem<'_>) -> Tensor {
        let s = self.scores(row, k0, c);
        self.bias_and_mask(s, row, k0, c, elem)
    }

    /// The scaled and soft-capped logits `[B, Hkv, G·r, c]` of `row`
    /// against keys `k0 .. k0 + c` (no bias, no mask).
    pub(crate) fn scores(&self, row: &Row, k0: Pos, c: usize) -> Tensor {
        let d = &self.d;
        let kb = tile(self.k, &[(2, k0, c)], 0.0);
        let qk = DotDims {
            lhs_batch: vec![0, 1],
            rhs_batch: vec![0, 1],
            lhs_contract: vec![3],
            rhs_contract: vec![3],
        };
        let mut s = row.qb.dot_general(kb, qk, None, Some(d.stat));
        if let Some(cap) = self.o.soft_cap {
            s = (s * (1.0 / cap)).tanh() * cap;
        }
        s
    }

    /// `s` plus the bias, with the optional inputs' masks and `elem`
    /// applied (hidden logits are `-inf`).
    pub(crate) fn bias_and_mask(
        &self,
        mut s: Tensor,
        row: &Row,
        k0: Pos,
        c: usize,
        elem: Elem<'_>,
    ) -> Tensor {
        let d = &self.d;
        let rect = [(3, row.q0, row.r), (4, k0, c)];
        if let Some(b) = self.bias5 {
            s = s + self.flat(tile(b, &rect, 0.0)).cast(d.stat);
        }
        let mut allowed: Option<Tensor> = None;
        let mut and = |t: Tensor| allowed = Some(allowed.map_or(t, |a| a & t));
        if let Some(m) = self.mask5 {
            and(self.flat(tile(m, &rect, 0.0)));
        }
        if let (Some((_, ks)), Some(qs)) = (self.segment_ids, row.q_seg) {
            let kseg = tile(ks, &[(1, k0, c)], 0.0).reshape(&[d.b as isize, 1, 1, 1, c as isize]);
            and(self.flat(qs.eq(kseg)));
        }
        if let Elem::Always(e) = elem {
            and(self.flat(e));
        }
        if let Some(a) = allowed {
            s = a.select(s, f64::NEG_INFINITY);
        }
        if let Elem::When(p, f) = elem {
            s = cond(p, || self.flat(f()).select(s, f64::NEG_INFINITY), || s);
        }
        s
    }

    /// One online-softmax step: the statistics of `row` after keys
    /// `k0 .. k0 + c`.
    pub(crate) fn step(&self, row: &Row, st: State, k0: Pos, c: usize, elem: Elem<'_>) -> State {
        let d = &self.d;
        let (m, l, acc) = st;
        let s = self.logits(row, k0, c, elem);
        let m_new = m.maximum(row_reduce(s, true));
        let alpha = (m - m_new).exp();
        let mut p = (s - m_new).exp();
        let l = l * alpha + row_reduce(p, false);
        if let Some(seed) = self.seed {
            let rate = self.o.dropout_rate;
            let keep = dropout_keep(seed, d, row.q0, k0, row.r, c, rate);
            p = self.flat(keep).select(p * (1.0 / (1.0 - rate)), 0.0);
        }
        let vb = tile(self.v, &[(2, k0, c)], 0.0);
        // Low-precision inputs: probabilities in the inputs' dtype for the
        // matmul (as the MXU takes them), accumulated in f32.
        let p = if d.io == d.stat { p } else { p.cast(d.io) };
        let pv = DotDims {
            lhs_batch: vec![0, 1],
            rhs_batch: vec![0, 1],
            lhs_contract: vec![3],
            rhs_contract: vec![2],
        };
        let acc = acc * alpha + p.dot_general(vb, pv, None, Some(d.stat));
        (m_new, l, acc)
    }

    /// The output `[B, Hkv, G, r, Dv]` and logsumexp `[B, Hkv, G, r]` of a
    /// row; rows that saw no key (`l == 0` exactly) give 0 and `-inf`. A
    /// visible NaN logit leaves `l` NaN, and `l != 0` holds for NaN, so
    /// such a row comes out NaN rather than being taken for an empty one.
    pub(crate) fn finish(&self, st: State) -> (Tensor, Tensor) {
        let d = &self.d;
        let (m, l, acc) = st;
        let r = (l.dim(2) / d.g) as isize;
        let (b, hk, g) = (d.b as isize, d.hkv as isize, d.g as isize);
        let seen = l.ne(0.0);
        let out = seen
            .select(acc / l, 0.0)
            .reshape(&[b, hk, g, r, d.dv as isize]);
        let lse = seen
            .select(m + l.log(), f64::NEG_INFINITY)
            .reshape(&[b, hk, g, r]);
        (out, lse)
    }

    /// Row outputs (along the query axis, in order) as the results
    /// `[B, Hq, Sq, Dv]` in the inputs' dtype and `[B, Hq, Sq]` in f32.
    pub(crate) fn assemble(&self, outs: Vec<Tensor>, lses: Vec<Tensor>) -> (Tensor, Tensor) {
        let (o, lse) = self.assemble_exact(outs, lses);
        (o, lse.cast(F32))
    }

    /// [`Ctx::assemble`] with the logsumexp left in the statistics' dtype
    /// (what the backward pass recomputes probabilities from).
    pub(crate) fn assemble_exact(&self, outs: Vec<Tensor>, lses: Vec<Tensor>) -> (Tensor, Tensor) {
        let d = &self.d;
        let (b, hq, sq) = (d.b as isize, d.hq as isize, d.sq as isize);
        if outs.is_empty() {
            return (
                Tensor::zeros([d.b, d.hq, 0, d.dv], d.io),
                Tensor::zeros([d.b, d.hq, 0], d.stat),
            );
        }
        let one = |v: Vec<Tensor>| {
            if v.len() == 1 {
                v[0]
            } else {
                concat(&v, 3)
            }
        };
        let out = one(outs).reshape(&[b, hq, sq, d.dv as isize]).cast(d.io);
        let lse = one(lses).reshape(&[b, hq, sq]);
        (out, lse)
    }

    /// The band's element mask for rows `q0 ..` (`r` of them) and keys
    /// `k0 ..` (`c` of them), as `[1, 1, 1, r, c]`, or `None` if the band
    /// hides nothing.
    pub(crate) fn band_mask(
        &self,
        band: &Band,
        q0: Pos,
        r: usize,
        k0: Pos,
        c: usize,
    ) -> Option<Tensor> {
        let off = |p: Pos, t: Tensor| match p {
            Pos::Static(0) => t,
            p => t + p.tensor(),
        };
        let mut q_pos = off(q0, Tensor::iota([1, 1, 1, r, 1], 3, S32));
        if let Some(t) = self.q_offset {
            q_pos = q_pos + t;
        }
        let k_pos = off(k0, Tensor::iota([1, 1, 1, 1, c], 4, S32));
        band.element_mask(q_pos, k_pos)
    }
}
