//! The types of a program's values, derived from its parameters: what the
//! generator builds on, and what tells the shrinker whether an edited
//! program still makes sense (the tracer checks again when it is built).

use tessel_dsl::{DType, TensorSpec};

use super::program::{Binary, Block, Bound, Inst, Op, Program, Reduce, Unary, V};

/// The numpy broadcast of two shapes, if they broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        if i + s.len() < r {
            1
        } else {
            s[i + s.len() - r]
        }
    };
    (0..r)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Whether unary `op` is defined for `d`.
pub fn unary_ok(op: Unary, d: DType) -> bool {
    match op {
        Unary::Neg => !d.is_pred() && !d.is_unsigned(),
        Unary::Abs | Unary::Sign => !d.is_pred(),
        Unary::Not => !d.is_float(),
        Unary::PopCount => d.is_integer(),
        _ => d.is_float(),
    }
}

/// Whether binary `op` is defined for `d`.
pub fn binary_ok(op: Binary, d: DType) -> bool {
    match op {
        Binary::And | Binary::Or | Binary::Xor => !d.is_float(),
        Binary::ShiftLeft | Binary::ShiftRightArithmetic | Binary::ShiftRightLogical => {
            d.is_integer()
        }
        Binary::Pow | Binary::Atan2 => d.is_float(),
        _ => !d.is_pred(),
    }
}

/// Whether reduction `op` is defined for `d`.
pub fn reduce_ok(op: Reduce, d: DType) -> bool {
    match op {
        Reduce::All | Reduce::Any => !d.is_float(),
        _ => !d.is_pred(),
    }
}

fn axes_ok(axes: &[usize], rank: usize) -> Result<(), String> {
    let distinct = axes.iter().enumerate().all(|(i, a)| !axes[..i].contains(a));
    ensure(distinct && axes.iter().all(|&a| a < rank), || {
        format!("axes {axes:?} of a rank-{rank} value")
    })
}

/// The result types of `op` given the types of the values it reads
/// (`spec`), or why it is not well-typed. Blocks are checked by
/// [`retype`].
pub fn infer(op: &Op, spec: &dyn Fn(V) -> TensorSpec) -> Result<Vec<TensorSpec>, String> {
    let one = |s: TensorSpec| Ok(vec![s]);
    match op {
        Op::Full { spec, .. } => one(spec.clone()),
        Op::Iota { spec, dim } => {
            ensure(*dim < spec.rank() && !spec.dtype.is_pred(), || {
                format!("iota {dim} of {spec}")
            })?;
            one(spec.clone())
        }
        Op::Unary(u, x) => {
            let s = spec(*x);
            ensure(unary_ok(*u, s.dtype), || format!("{u:?} of {s}"))?;
            let d = if *u == Unary::IsFinite {
                DType::Pred
            } else {
                s.dtype
            };
            one(TensorSpec::new(s.shape, d))
        }
        Op::Binary(b, x, y) => {
            let (s, t) = (spec(*x), spec(*y));
            ensure(s.dtype == t.dtype && binary_ok(*b, s.dtype), || {
                format!("{b:?} of {s} and {t}")
            })?;
            let shape = broadcast_shapes(&s.shape, &t.shape)
                .ok_or_else(|| format!("{s} and {t} do not broadcast"))?;
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::Compare(_, x, y) => {
            let (s, t) = (spec(*x), spec(*y));
            ensure(s.dtype == t.dtype, || format!("compare {s} with {t}"))?;
            let shape = broadcast_shapes(&s.shape, &t.shape)
                .ok_or_else(|| format!("{s} and {t} do not broadcast"))?;
            one(TensorSpec::new(shape, DType::Pred))
        }
        Op::Select(p, x, y) => {
            let (p, s, t) = (spec(*p), spec(*x), spec(*y));
            ensure(p.dtype.is_pred() && s.dtype == t.dtype, || {
                format!("select {p} between {s} and {t}")
            })?;
            let shape = broadcast_shapes(&p.shape, &s.shape)
                .and_then(|u| broadcast_shapes(&u, &t.shape))
                .ok_or_else(|| format!("{p}, {s} and {t} do not broadcast"))?;
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::Clamp(x, lo, hi) => {
            let (s, l, h) = (spec(*x), spec(*lo), spec(*hi));
            let fits = |b: &TensorSpec| {
                b.dtype == s.dtype
                    && broadcast_shapes(&b.shape, &s.shape).as_deref() == Some(&s.shape[..])
            };
            ensure(fits(&l) && fits(&h) && !s.dtype.is_pred(), || {
                format!("clamp {s} to {l}, {h}")
            })?;
            one(s)
        }
        Op::Cast(x, d) => one(TensorSpec::new(spec(*x).shape, *d)),
        Op::BroadcastInDim(x, shape, dims) => {
            let s = spec(*x);
            let increasing = dims.windows(2).all(|w| w[0] < w[1]);
            let fits = dims.len() == s.rank()
                && increasing
                && dims
                    .iter()
                    .zip(&s.shape)
                    .all(|(&d, &e)| d < shape.len() && (e == shape[d] || e == 1));
            ensure(fits, || {
                format!("broadcast {s} to {shape:?} along {dims:?}")
            })?;
            one(TensorSpec::new(shape.clone(), s.dtype))
        }
        Op::Reshape(x, shape) => {
            let s = spec(*x);
            ensure(shape.iter().product::<usize>() == s.num_elements(), || {
                format!("reshape {s} to {shape:?}")
            })?;
            one(TensorSpec::new(shape.clone(), s.dtype))
        }
        Op::Transpose(x, perm) => {
            let s = spec(*x);
            ensure(perm.len() == s.rank(), || {
                format!("transpose {s} by {perm:?}")
            })?;
            axes_ok(perm, s.rank())?;
            one(TensorSpec::new(
                perm.iter().map(|&a| s.shape[a]).collect::<Vec<_>>(),
                s.dtype,
            ))
        }
        Op::Slice {
            x,
            start,
            limit,
            stride,
        } => {
            let s = spec(*x);
            let r = s.rank();
            let fits = start.len() == r
                && limit.len() == r
                && stride.len() == r
                && (0..r).all(|a| start[a] <= limit[a] && limit[a] <= s.shape[a] && stride[a] > 0);
            ensure(fits, || format!("slice {s} {start:?}..{limit:?}"))?;
            let shape: Vec<usize> = (0..r)
                .map(|a| (limit[a] - start[a]).div_ceil(stride[a]))
                .collect();
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::Pad {
            x,
            low,
            high,
            interior,
            ..
        } => {
            let s = spec(*x);
            let r = s.rank();
            ensure(
                low.len() == r && high.len() == r && interior.len() == r,
                || format!("pad {s}"),
            )?;
            let mut shape = Vec::new();
            for a in 0..r {
                let e = s.shape[a] as i64;
                let dilated = if e == 0 { 0 } else { e + (e - 1) * interior[a] };
                let n = dilated + low[a] + high[a];
                ensure(interior[a] >= 0 && n >= 0, || format!("pad {s} axis {a}"))?;
                shape.push(n as usize);
            }
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::Concat(xs, axis) => {
            let first = spec(*xs.first().ok_or("concat of nothing")?);
            let mut shape = first.shape.clone();
            ensure(*axis < first.rank(), || format!("concat {first} on {axis}"))?;
            for &x in &xs[1..] {
                let s = spec(x);
                let same = s.dtype == first.dtype
                    && s.rank() == first.rank()
                    && (0..s.rank()).all(|a| a == *axis || s.shape[a] == first.shape[a]);
                ensure(same, || format!("concat {first} with {s}"))?;
                shape[*axis] += s.shape[*axis];
            }
            one(TensorSpec::new(shape, first.dtype))
        }
        Op::Reduce(k, x, axes) => {
            let s = spec(*x);
            ensure(reduce_ok(*k, s.dtype), || format!("{k:?} of {s}"))?;
            axes_ok(axes, s.rank())?;
            let shape: Vec<usize> = (0..s.rank())
                .filter(|a| !axes.contains(a))
                .map(|a| s.shape[a])
                .collect();
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::Arg { x, axis, .. } => {
            let s = spec(*x);
            ensure(*axis < s.rank() && !s.dtype.is_pred(), || {
                format!("arg-reduce {s} on {axis}")
            })?;
            let mut shape = s.shape.clone();
            shape.remove(*axis);
            one(TensorSpec::new(shape, DType::S32))
        }
        Op::Sort {
            x, axis, indices, ..
        } => {
            let s = spec(*x);
            ensure(*axis < s.rank() && !s.dtype.is_pred(), || {
                format!("sort {s} on {axis}")
            })?;
            let d = if *indices { DType::S32 } else { s.dtype };
            one(TensorSpec::new(s.shape, d))
        }
        Op::DynamicSlice { x, starts, sizes } => {
            let s = spec(*x);
            scalar_indices(starts, s.rank(), spec)?;
            let fits = sizes.len() == s.rank() && sizes.iter().zip(&s.shape).all(|(a, b)| a <= b);
            ensure(fits, || format!("dynamic slice {sizes:?} of {s}"))?;
            one(TensorSpec::new(sizes.clone(), s.dtype))
        }
        Op::DynamicUpdateSlice { x, update, starts } => {
            let (s, u) = (spec(*x), spec(*update));
            scalar_indices(starts, s.rank(), spec)?;
            let fits = u.dtype == s.dtype
                && u.rank() == s.rank()
                && u.shape.iter().zip(&s.shape).all(|(a, b)| a <= b);
            ensure(fits, || format!("update {u} into {s}"))?;
            one(s)
        }
        Op::Take { x, indices, axis } => {
            let (s, i) = (spec(*x), spec(*indices));
            ensure(
                *axis < s.rank() && s.shape[*axis] > 0 && i.dtype == DType::S32,
                || format!("take {i} from {s} on {axis}"),
            )?;
            let mut shape = s.shape[..*axis].to_vec();
            shape.extend(&i.shape);
            shape.extend(&s.shape[axis + 1..]);
            one(TensorSpec::new(shape, s.dtype))
        }
        Op::IndexUpdate {
            x,
            axis,
            indices,
            updates,
            ..
        } => {
            let (s, i, u) = (spec(*x), spec(*indices), spec(*updates));
            ensure(*axis < s.rank() && i.dtype == DType::S32, || {
                format!("index update {s} at {i}")
            })?;
            let mut shape = s.shape[..*axis].to_vec();
            shape.extend(&i.shape);
            shape.extend(&s.shape[axis + 1..]);
            ensure(u.dtype == s.dtype && u.shape == shape, || {
                format!("updates {u} for {s} at {i}")
            })?;
            one(s)
        }
        Op::Dot {
            lhs,
            rhs,
            dims,
            out,
        } => {
            let (a, b) = (spec(*lhs), spec(*rhs));
            let pairs = |x: &[usize], y: &[usize]| {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|(&i, &j)| i < a.rank() && j < b.rank() && a.shape[i] == b.shape[j])
            };
            let ok = a.dtype == b.dtype
                && !a.dtype.is_pred()
                && pairs(&dims.lhs_batch, &dims.rhs_batch)
                && pairs(&dims.lhs_contract, &dims.rhs_contract);
            ensure(ok, || format!("dot {a} with {b} by {dims:?}"))?;
            let mut shape: Vec<usize> = dims.lhs_batch.iter().map(|&i| a.shape[i]).collect();
            let free = |s: &TensorSpec, batch: &[usize], contract: &[usize]| {
                (0..s.rank())
                    .filter(|i| !batch.contains(i) && !contract.contains(i))
                    .map(|i| s.shape[i])
                    .collect::<Vec<_>>()
            };
            shape.extend(free(&a, &dims.lhs_batch, &dims.lhs_contract));
            shape.extend(free(&b, &dims.rhs_batch, &dims.rhs_contract));
            one(TensorSpec::new(shape, out.unwrap_or(a.dtype)))
        }
        Op::Fori { hi, init, .. } => {
            if let Bound::Traced(v) = hi {
                scalar_indices(&[*v], 1, spec)?;
            }
            Ok(init.iter().map(|&v| spec(v)).collect())
        }
        Op::Scan {
            init,
            xs,
            length,
            body,
            ..
        } => {
            for &x in xs {
                let s = spec(x);
                ensure(s.shape.first() == Some(length), || {
                    format!("scan of {length} steps over {s}")
                })?;
            }
            let mut out: Vec<TensorSpec> = init.iter().map(|&v| spec(v)).collect();
            for &y in body.results.iter().skip(init.len()) {
                let s = spec(y);
                let mut shape = vec![*length];
                shape.extend(&s.shape);
                out.push(TensorSpec::new(shape, s.dtype));
            }
            Ok(out)
        }
        Op::While { limit, init, .. } => {
            scalar_indices(&[*limit], 1, spec)?;
            let mut out = vec![TensorSpec::scalar(DType::S32)];
            out.extend(init.iter().map(|&v| spec(v)));
            Ok(out)
        }
        Op::Cond { pred, then, .. } => {
            let p = spec(*pred);
            ensure(p == TensorSpec::scalar(DType::Pred), || {
                format!("cond on {p}")
            })?;
            Ok(then.results.iter().map(|&v| spec(v)).collect())
        }
    }
}

fn scalar_indices(vs: &[V], n: usize, spec: &dyn Fn(V) -> TensorSpec) -> Result<(), String> {
    ensure(vs.len() == n, || {
        format!("{} indices for {n} axes", vs.len())
    })?;
    for &v in vs {
        let s = spec(v);
        ensure(s == TensorSpec::scalar(DType::S32), || format!("index {s}"))?;
    }
    Ok(())
}

/// Recomputes the type of every value from the parameters' (blocks
/// included), or says which instruction is no longer well-typed.
pub fn retype(p: &mut Program) -> Result<(), String> {
    let mut specs = std::mem::take(&mut p.specs);
    let r = retype_insts(&p.insts, &mut specs);
    p.specs = specs;
    r
}

fn retype_insts(insts: &[Inst], specs: &mut Vec<TensorSpec>) -> Result<(), String> {
    for inst in insts {
        let carries: Vec<TensorSpec> = match &inst.op {
            Op::Fori { init, .. } | Op::While { init, .. } => {
                let mut c = vec![TensorSpec::scalar(DType::S32)];
                c.extend(init.iter().map(|&v| specs[v].clone()));
                c
            }
            // The carries, then a row of each of the xs.
            Op::Scan { init, xs, .. } => {
                let mut c: Vec<TensorSpec> = init.iter().map(|&v| specs[v].clone()).collect();
                for &x in xs {
                    let s = &specs[x];
                    c.push(TensorSpec::new(
                        s.shape[1.min(s.rank())..].to_vec(),
                        s.dtype,
                    ));
                }
                c
            }
            _ => Vec::new(),
        };
        for b in inst.op.blocks() {
            for (&v, s) in b.params.iter().zip(&carries) {
                specs[v] = s.clone();
            }
            retype_insts(&b.insts, specs)?;
        }
        // After the blocks: a branch's results are its `then` block's.
        let out = {
            let view: &Vec<TensorSpec> = specs;
            infer(&inst.op, &|v| view[v].clone())?
        };
        match &inst.op {
            Op::Fori { body, .. } | Op::While { body, .. } => {
                block_returns(body, &carries[1..], specs)?;
            }
            Op::Scan { init, body, .. } => {
                let k = init.len();
                ensure(body.results.len() >= k, || "scan results".to_string())?;
                returns(&body.results[..k], &carries[..k], specs)?;
            }
            _ => {}
        }
        match &inst.op {
            Op::While { cond, .. } => {
                block_returns(cond, &[TensorSpec::scalar(DType::Pred)], specs)?;
            }
            Op::Cond { otherwise, .. } => block_returns(otherwise, &out, specs)?,
            _ => {}
        }
        ensure(inst.outs.len() == out.len(), || "result count".to_string())?;
        for (&v, s) in inst.outs.iter().zip(out) {
            specs[v] = s;
        }
    }
    Ok(())
}

fn block_returns(b: &Block, want: &[TensorSpec], specs: &[TensorSpec]) -> Result<(), String> {
    returns(&b.results, want, specs)
}

/// Checks that block results `results` have the types `want`.
fn returns(results: &[V], want: &[TensorSpec], specs: &[TensorSpec]) -> Result<(), String> {
    let got: Vec<&TensorSpec> = results.iter().map(|&v| &specs[v]).collect();
    ensure(
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| *g == w),
        || format!("a block returns {got:?}, its op needs {want:?}"),
    )
}
