//! `dot_general`: batch, free and contracted axes, accumulated in `f64`
//! (floats, rounded once to the result dtype) or in wrapping 64-bit
//! integers (wrapped once to the result width).

use crate::interp::value::{daz, num_elements, rounder, strides, wrap, Counter, Data, Val};
use crate::ir::DotDims;
use crate::shape::TensorSpec;

type R<T> = Result<T, String>;

/// Offsets (in elements) of every index of `axes` of a tensor with `st` strides.
fn offsets(shape: &[usize], st: &[usize], axes: &[usize]) -> R<Vec<usize>> {
    let ext: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let n = num_elements(&ext)?;
    let mut c = Counter::new(&ext);
    Ok((0..n)
        .map(|_| {
            let o = c.idx.iter().zip(axes).map(|(i, &a)| i * st[a]).sum();
            c.step();
            o
        })
        .collect())
}

fn free_axes(rank: usize, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..rank)
        .filter(|a| !batch.contains(a) && !contract.contains(a))
        .collect()
}

/// The dot of two rows, in four interleaved partial sums (an order as good
/// as XLA's, and four times faster than one running sum).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// XLA dot_general; the result has batch axes, then the left operand's free
/// axes, then the right operand's.
pub(crate) fn dot_general(a: &Val, b: &Val, d: &DotDims, spec: &TensorSpec) -> R<Val> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let ok = d.lhs_batch.len() == d.rhs_batch.len()
        && d.lhs_contract.len() == d.rhs_contract.len()
        && d.lhs_batch.iter().chain(&d.lhs_contract).all(|&x| x < ra)
        && d.rhs_batch.iter().chain(&d.rhs_contract).all(|&x| x < rb)
        && d.lhs_batch
            .iter()
            .zip(&d.rhs_batch)
            .all(|(&x, &y)| a.shape[x] == b.shape[y])
        && d.lhs_contract
            .iter()
            .zip(&d.rhs_contract)
            .all(|(&x, &y)| a.shape[x] == b.shape[y]);
    if !ok {
        return Err(format!(
            "dot dimensions {d:?} do not fit {} and {}",
            a.spec(),
            b.spec()
        ));
    }
    let (sa, sb) = (strides(&a.shape), strides(&b.shape));
    let fa = free_axes(ra, &d.lhs_batch, &d.lhs_contract);
    let fb = free_axes(rb, &d.rhs_batch, &d.rhs_contract);
    let mut shape: Vec<usize> = d.lhs_batch.iter().map(|&x| a.shape[x]).collect();
    shape.extend(fa.iter().map(|&x| a.shape[x]));
    shape.extend(fb.iter().map(|&x| b.shape[x]));
    if shape != spec.shape {
        return Err(format!("dot result {spec} does not match its operands"));
    }
    let (ba, bb) = (
        offsets(&a.shape, &sa, &d.lhs_batch)?,
        offsets(&b.shape, &sb, &d.rhs_batch)?,
    );
    let (ia, ib) = (offsets(&a.shape, &sa, &fa)?, offsets(&b.shape, &sb, &fb)?);
    let (ca, cb) = (
        offsets(&a.shape, &sa, &d.lhs_contract)?,
        offsets(&b.shape, &sb, &d.rhs_contract)?,
    );
    let n = num_elements(&shape)?;
    let out = spec.dtype;
    let data = if out.is_float() {
        let mut res = Vec::with_capacity(n);
        // Operands as the CPU reads them, converted once.
        let (za, zb, r) = (daz(a.dtype), daz(b.dtype), rounder(out));
        // Each operand packed as [batch, free, contracted], contiguous, so
        // every result element is the dot of two contiguous rows.
        let k = ca.len();
        let pack = |v: &Val, z: fn(f64) -> f64, batch: &[usize], free: &[usize], con: &[usize]| {
            let mut p = Vec::with_capacity(batch.len() * free.len() * k);
            for &o in batch {
                for &f in free {
                    p.extend(con.iter().map(|&c| z(v.f64_at(o + f + c))));
                }
            }
            p
        };
        let pa = pack(a, za, &ba, &ia, &ca);
        let pb = pack(b, zb, &bb, &ib, &cb);
        for batch in 0..ba.len() {
            let rows_a = pa
                .chunks_exact(k.max(1))
                .skip(batch * ia.len())
                .take(ia.len());
            for ra in rows_a {
                let rows_b = pb
                    .chunks_exact(k.max(1))
                    .skip(batch * ib.len())
                    .take(ib.len());
                for rb in rows_b {
                    res.push(r(dot(ra, rb)));
                }
            }
            if k == 0 {
                // No contracted elements: every sum is empty.
                res.extend(std::iter::repeat_n(r(0.0), ia.len() * ib.len()));
            }
        }
        Data::F(res)
    } else if !a.dtype.is_float() && !b.dtype.is_float() {
        let mut res = Vec::with_capacity(n);
        for (&pa, &pb) in ba.iter().zip(&bb) {
            for &qa in &ia {
                for &qb in &ib {
                    let s = ca.iter().zip(&cb).fold(0i64, |s, (&x, &y)| {
                        s.wrapping_add(a.i64_at(pa + qa + x).wrapping_mul(b.i64_at(pb + qb + y)))
                    });
                    res.push(if out.is_pred() {
                        i64::from(s != 0)
                    } else {
                        wrap(out, s)
                    });
                }
            }
        }
        Data::I(res)
    } else {
        return Err(format!(
            "a dot of {} operands into {out} is not supported",
            a.dtype
        ));
    };
    Val::new(out, shape, data)
}
