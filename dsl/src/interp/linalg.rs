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
        let av: Vec<f64> = (0..a.len()).map(|i| za(a.f64_at(i))).collect();
        let bv: Vec<f64> = (0..b.len()).map(|i| zb(b.f64_at(i))).collect();
        for (&pa, &pb) in ba.iter().zip(&bb) {
            for &qa in &ia {
                // (An empty operand has an empty contraction.)
                let la = av.get(pa + qa..).unwrap_or(&[]);
                let lb = bv.get(pb..).unwrap_or(&[]);
                for &qb in &ib {
                    let s: f64 = ca.iter().zip(&cb).map(|(&x, &y)| la[x] * lb[qb + y]).sum();
                    res.push(r(s));
                }
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
