//! Tracing a program: each instruction becomes the `tessel_dsl` call it
//! names, on the tensors of its operands, inside a kernel body.
//! [`rust`](super::rust) prints the same calls as source.

use tessel_dsl::{
    concat, cond, fori_loop, scan_with, while_loop, DType, Precision, ScanOptions, Tensor,
};

use super::program::{Binary, Block, Bound, Cmp, Inst, Op, Program, Reduce, Unary, MAX_TRIPS, V};

/// The tensors of the values defined so far.
type Env = Vec<Option<Tensor>>;

fn get(env: &Env, v: V) -> Tensor {
    env.get(v)
        .copied()
        .flatten()
        .unwrap_or_else(|| panic!("value v{v} is read before it is defined"))
}

/// Traces `p` on its parameters' tensors `params` and returns its outputs.
/// Panics if a value is read before it is defined (a malformed program);
/// an ill-typed op is a trace error, as in any kernel.
pub fn build(p: &Program, params: &[Tensor]) -> Vec<Tensor> {
    let mut env: Env = vec![None; p.specs.len()];
    for (&v, &t) in p.params.iter().zip(params) {
        env[v] = Some(t);
    }
    insts(&p.insts, &mut env);
    p.outputs.iter().map(|o| get(&env, o.value)).collect()
}

fn insts(list: &[Inst], env: &mut Env) {
    for inst in list {
        let outs = op(&inst.op, env);
        for (&v, t) in inst.outs.iter().zip(outs) {
            env[v] = Some(t);
        }
    }
}

/// Runs `b` on `args` in a copy of `env` and returns its results.
fn block(b: &Block, env: &Env, args: &[Tensor]) -> Vec<Tensor> {
    let mut env = env.clone();
    for (&v, &t) in b.params.iter().zip(args) {
        env[v] = Some(t);
    }
    insts(&b.insts, &mut env);
    b.results.iter().map(|&v| get(&env, v)).collect()
}

fn isize_axes(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}

/// The tensor of `u` applied to `x`.
pub fn unary(u: Unary, x: Tensor) -> Tensor {
    match u {
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Sqrt => x.sqrt(),
        Unary::Floor => x.floor(),
        Unary::Ceil => x.ceil(),
        Unary::Round => x.round(),
        Unary::Sign => x.sign(),
        Unary::Not => x.logical_not(),
        Unary::PopCount => x.popcount(),
        Unary::IsFinite => x.is_finite(),
        Unary::Exp => x.exp(),
        Unary::Log => x.log(),
        Unary::Log1p => x.log1p(),
        Unary::Expm1 => x.expm1(),
        Unary::Tanh => x.tanh(),
        Unary::Sigmoid => x.sigmoid(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Erf => x.erf(),
        Unary::Rsqrt => x.rsqrt(),
        Unary::Cbrt => x.cbrt(),
        Unary::Tan => x.tan(),
    }
}

/// The tensor of `b` applied to `x` and `y`.
pub fn binary(b: Binary, x: Tensor, y: Tensor) -> Tensor {
    match b {
        Binary::Add => x + y,
        Binary::Sub => x - y,
        Binary::Mul => x * y,
        Binary::Div => x / y,
        Binary::Rem => x % y,
        Binary::Max => x.maximum(y),
        Binary::Min => x.minimum(y),
        Binary::And => x.and(y),
        Binary::Or => x.or(y),
        Binary::Xor => x.xor(y),
        Binary::ShiftLeft => x.shift_left(y),
        Binary::ShiftRightArithmetic => x.shift_right_arithmetic(y),
        Binary::ShiftRightLogical => x.shift_right_logical(y),
        Binary::Pow => x.pow(y),
        Binary::Atan2 => x.atan2(y),
    }
}

fn compare(c: Cmp, x: Tensor, y: Tensor) -> Tensor {
    match c {
        Cmp::Eq => x.eq(y),
        Cmp::Ne => x.ne(y),
        Cmp::Lt => x.lt(y),
        Cmp::Le => x.le(y),
        Cmp::Gt => x.gt(y),
        Cmp::Ge => x.ge(y),
    }
}

fn reduce(k: Reduce, x: Tensor, axes: &[usize]) -> Tensor {
    let axes = isize_axes(axes);
    match k {
        Reduce::Sum => x.sum(&axes),
        Reduce::Prod => x.prod(&axes),
        Reduce::Max => x.max(&axes),
        Reduce::Min => x.min(&axes),
        Reduce::All => x.all(&axes),
        Reduce::Any => x.any(&axes),
    }
}

fn op(op: &Op, env: &Env) -> Vec<Tensor> {
    let g = |v: &V| get(env, *v);
    let all = |vs: &[V]| vs.iter().map(g).collect::<Vec<_>>();
    let t = match op {
        Op::Full { spec, value } => Tensor::full(spec.shape.clone(), *value, spec.dtype),
        Op::Iota { spec, dim } => Tensor::iota(spec.shape.clone(), *dim, spec.dtype),
        Op::Unary(u, x) => unary(*u, g(x)),
        Op::Binary(b, x, y) => binary(*b, g(x), g(y)),
        Op::Compare(c, x, y) => compare(*c, g(x), g(y)),
        Op::Select(p, x, y) => g(p).select(g(x), g(y)),
        Op::Clamp(x, lo, hi) => g(x).clamp(g(lo), g(hi)),
        Op::Cast(x, d) => g(x).cast(*d),
        Op::BroadcastInDim(x, shape, dims) => g(x).broadcast_in_dim(shape.clone(), dims),
        Op::Reshape(x, shape) => g(x).reshape(&isize_axes(shape)),
        Op::Transpose(x, perm) => g(x).transpose(perm),
        Op::Slice {
            x,
            start,
            limit,
            stride,
        } => g(x).slice(start, limit, stride),
        Op::Pad {
            x,
            value,
            low,
            high,
            interior,
        } => {
            let x = g(x);
            x.pad(Tensor::scalar(*value, x.dtype()), low, high, interior)
        }
        Op::Concat(xs, axis) => concat(&all(xs), *axis as isize),
        Op::Reduce(k, x, axes) => reduce(*k, g(x), axes),
        Op::Arg { x, axis, max: true } => g(x).argmax(*axis as isize),
        Op::Arg { x, axis, .. } => g(x).argmin(*axis as isize),
        Op::Sort {
            x,
            axis,
            descending,
            indices: false,
        } => g(x).sort(*axis as isize, *descending),
        Op::Sort {
            x,
            axis,
            descending,
            ..
        } => g(x).argsort(*axis as isize, *descending),
        Op::DynamicSlice { x, starts, sizes } => g(x).dynamic_slice(&all(starts), sizes),
        Op::DynamicUpdateSlice { x, update, starts } => {
            g(x).dynamic_update_slice(g(update), &all(starts))
        }
        Op::Take { x, indices, axis } => g(x).take(g(indices), *axis as isize),
        Op::IndexUpdate {
            x,
            axis,
            indices,
            updates,
            combine,
        } => g(x).index_update(*axis as isize, g(indices), g(updates), *combine),
        Op::Dot {
            lhs,
            rhs,
            dims,
            out,
        } => g(lhs).dot_general(g(rhs), dims.clone(), Some(Precision::Highest), *out),
        Op::Fori { lo, hi, init, body } => {
            let run = |i: Tensor, c: Vec<Tensor>| {
                let mut args = vec![i];
                args.extend(c);
                block(body, env, &args)
            };
            return match hi {
                Bound::Static(n) => fori_loop(*lo, *n, all(init), run),
                Bound::Traced(v) => fori_loop(*lo, g(v).minimum(MAX_TRIPS), all(init), run),
            };
        }
        Op::Scan {
            init,
            xs,
            length,
            reverse,
            body,
        } => {
            let k = init.len();
            let o = ScanOptions::new().length(*length).reverse(*reverse);
            let (mut c, ys) = scan_with(all(init), all(xs), o, |c: Vec<Tensor>, x: Vec<Tensor>| {
                let mut args = c;
                args.extend(x);
                let mut r = block(body, env, &args);
                let ys = r.split_off(k.min(r.len()));
                (r, ys)
            });
            c.extend(ys);
            return c;
        }
        Op::While {
            limit,
            init,
            cond: c,
            body,
        } => {
            let limit = g(limit).minimum(MAX_TRIPS);
            let mut carry = vec![Tensor::scalar(0.0, DType::S32)];
            carry.extend(all(init));
            return while_loop(
                carry,
                |c_args: Vec<Tensor>| c_args[0].lt(limit).and(block(c, env, &c_args)[0]),
                |b_args: Vec<Tensor>| {
                    let mut next = vec![b_args[0] + 1];
                    next.extend(block(body, env, &b_args));
                    next
                },
            );
        }
        Op::Cond {
            pred,
            then,
            otherwise,
        } => {
            return cond(
                g(pred),
                || block(then, env, &[]),
                || block(otherwise, env, &[]),
            );
        }
    };
    vec![t]
}
