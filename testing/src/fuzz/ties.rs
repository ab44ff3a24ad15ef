//! Ties in the gradient fuzzer's programs: where a program's gradient
//! cannot be compared with central differences, and the rewrite that
//! makes most such programs comparable.
//!
//! A `clamp` whose operand and a bound both depend on one float parameter
//! (`x.clamp(x, hi)`, or `x.clamp(lo, y)` with `y` a copy of `x` in
//! places) may tie them. Along the differences' direction the clamp is
//! differentiable there, but its pullback follows JAX's convention (the
//! operand's gradient only strictly inside the bounds, a bound's only
//! strictly outside), which gives the tied values none. [`untie_clamps`]
//! moves such bounds by constants that no generated program uses, so they
//! no longer meet their operand; [`not_comparable`] skips the clamps left
//! tied (integer bounds, or bounds a shrink put back).

use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::DType;

use super::grad::SkipKind;
use super::program::{Binary, Case, Inst, Op, Program};

/// What [`untie_clamps`] adds to a clamp's lower bound: a constant no
/// generated program holds, so that [`not_comparable`] knows it.
const LOWER_SHIFT: f64 = -0.0371;
/// What it adds to an upper bound (another such constant: the two bounds
/// of `x.clamp(x, x)` must not meet each other either).
const UPPER_SHIFT: f64 = 0.0419;

/// Each value's dependence on the parameters, one bit per parameter (of
/// the low 64), and the bits of the float parameters. The bits above say
/// by which of [`untie_clamps`]' constants a value may be moved from the
/// parameters' values ([`not_comparable`] sets them): [`UNMOVED`] for
/// the parameters themselves.
fn parameter_bits(p: &Program) -> (Vec<u128>, u128) {
    let mut taint = vec![0u128; p.specs.len()];
    let mut floats = 0u128;
    for (i, &v) in p.params.iter().enumerate() {
        let bit = 1u128 << (i % 64);
        taint[v] = bit | UNMOVED;
        if p.specs[v].dtype.is_float() {
            floats |= bit;
        }
    }
    (taint, floats)
}

/// The parameter bits of a taint.
const PARAMS: u128 = u64::MAX as u128;
/// A value that may hold a parameter's value (or one computed from it)
/// unmoved.
const UNMOVED: u128 = 1 << 64;
/// One that may hold such a value moved by [`LOWER_SHIFT`].
const MOVED_DOWN: u128 = 1 << 65;
/// One that may hold such a value moved by [`UPPER_SHIFT`].
const MOVED_UP: u128 = 1 << 66;
/// One that may hold a 64-bit integer's magnitude, cast to a float (up to
/// 1.8e19): added to a value of a float parameter, it absorbs it.
const HUGE: u128 = 1 << 67;

/// Sets the bits of `inst`'s results (and of its blocks' values) from
/// what it reads, walking its blocks with `walk_block`. With
/// `feed_back`, a loop's parameters also get the bits of its body's
/// results, walking the blocks again until nothing changes (what an
/// iteration computes, the next one reads); without, each block is
/// walked once.
fn propagate(
    inst: &mut Inst,
    taint: &mut Vec<u128>,
    feed_back: bool,
    mut walk_block: impl FnMut(&mut Vec<Inst>, &mut Vec<u128>),
) {
    let t = inst.free_uses().iter().fold(0, |acc, &v| acc | taint[v]);
    let mut seen = t;
    let out = loop {
        let mut results = 0;
        let mut loops = false;
        for b in inst.op.blocks_mut() {
            for &v in &b.params {
                taint[v] = seen;
            }
            loops |= !b.params.is_empty();
            walk_block(&mut b.insts, taint);
            results |= b.results.iter().fold(0, |acc, &v| acc | taint[v]);
        }
        if !feed_back || !loops || results & !seen == 0 {
            break seen | results;
        }
        seen |= results;
    };
    for &v in &inst.outs {
        taint[v] = out;
    }
}

/// Rewrites every `clamp` of `p` whose float bound may tie its operand or
/// the other bound into one whose bound is moved by a small constant
/// (`lo - 0.0371`, `hi + 0.0419`): with continuous arguments the moved
/// values meet with probability zero, and the gradient is then defined
/// where the differences measure it.
pub fn untie_clamps(p: &mut Program) {
    fn walk(
        list: &mut Vec<Inst>,
        specs: &mut Vec<tessel_dsl::TensorSpec>,
        floats: u128,
        taint: &mut Vec<u128>,
    ) {
        let mut out = Vec::with_capacity(list.len());
        for mut inst in std::mem::take(list) {
            if let Op::Clamp(x, lo, hi) = &mut inst.op {
                let [bx, bl, bh] = [*x, *lo, *hi].map(|v| taint[v] & floats);
                for (bound, others, shift) in
                    [(lo, bx | bh, LOWER_SHIFT), (hi, bx | bl, UPPER_SHIFT)]
                {
                    if taint[*bound] & floats & others == 0 || !specs[*bound].dtype.is_float() {
                        continue;
                    }
                    let spec = specs[*bound].clone();
                    specs.push(spec.clone());
                    let k = specs.len() - 1;
                    specs.push(spec.clone());
                    let moved = specs.len() - 1;
                    let bits = taint[*bound];
                    taint.extend([0, bits]);
                    out.push(Inst {
                        outs: vec![k],
                        op: Op::Full { spec, value: shift },
                    });
                    out.push(Inst {
                        outs: vec![moved],
                        op: Op::Binary(Binary::Add, *bound, k),
                    });
                    *bound = moved;
                }
            }
            propagate(&mut inst, taint, false, |b, taint| {
                walk(b, specs, floats, taint)
            });
            out.push(inst);
        }
        *list = out;
    }
    let (mut taint, floats) = parameter_bits(p);
    walk(&mut p.insts, &mut p.specs, floats, &mut taint);
}

/// Why the gradient of `p` is not compared with differences, if it is
/// not: a `clamp` whose bound may still equal its operand or the other
/// bound (see the module docs), a multiplying scatter whose updates
/// depend on a parameter, whose gradient JAX does not define (the
/// pullback refuses it), or a 64-bit integer cast to a float and combined
/// with a float parameter's value, which it may absorb (`x + 1.8e19` is
/// constant in `x` to f64, but its gradient is 1).
///
/// Two values may tie when they depend on a common float parameter and may
/// be moved by the same constant: a bound moved by [`untie_clamps`] holds
/// its constant's mark alone, and every other value the marks of what it
/// reads. So a clamp's result, which may be its moved bound, is marked as
/// that bound is, and ties it in a second clamp with the same bound, or in
/// the next iteration of a loop that clamps a carried value.
pub fn not_comparable(p: &Program) -> Option<SkipKind> {
    struct Walk<'a> {
        specs: &'a [tessel_dsl::TensorSpec],
        floats: u128,
        /// The mark of each constant [`untie_clamps`] made.
        konst: Vec<Option<u128>>,
        found: Option<SkipKind>,
    }
    impl Walk<'_> {
        fn list(&mut self, list: &mut Vec<Inst>, taint: &mut Vec<u128>) {
            for inst in list {
                let mut moved = None;
                match inst.op {
                    Op::Full { value, .. } if value == LOWER_SHIFT => {
                        self.konst[inst.outs[0]] = Some(MOVED_DOWN);
                    }
                    Op::Full { value, .. } if value == UPPER_SHIFT => {
                        self.konst[inst.outs[0]] = Some(MOVED_UP);
                    }
                    Op::Binary(Binary::Add, _, k) => moved = self.konst[k],
                    Op::Clamp(a, b, c) => {
                        let [a, b, c] = [a, b, c].map(|v| taint[v]);
                        let floats = self.floats;
                        let may_tie =
                            |u: u128, w: u128| u & w & floats != 0 && u & w & !PARAMS != 0;
                        if may_tie(a, b) || may_tie(a, c) || may_tie(b, c) {
                            self.found = Some(SkipKind::TiedClamp);
                        }
                    }
                    Op::IndexUpdate {
                        updates,
                        combine: ScatterCombine::Mul,
                        ..
                    } if taint[updates] & PARAMS != 0 => {
                        self.found = Some(SkipKind::MultiplyingScatter);
                    }
                    _ => {}
                }
                propagate(inst, taint, true, |b, taint| self.list(b, taint));
                if let Some(mark) = moved {
                    let v = inst.outs[0];
                    taint[v] = taint[v] & PARAMS | mark;
                }
                if let Op::Cast(x, to) = inst.op {
                    let from = self.specs[x].dtype;
                    if to.is_float() && matches!(from, DType::S64 | DType::U64) {
                        taint[inst.outs[0]] |= HUGE;
                    }
                }
                if inst
                    .outs
                    .iter()
                    .any(|&v| taint[v] & HUGE != 0 && taint[v] & self.floats != 0)
                {
                    self.found.get_or_insert(SkipKind::Absorbed);
                }
            }
        }
    }
    let (mut taint, floats) = parameter_bits(p);
    let mut w = Walk {
        specs: &p.specs,
        floats,
        konst: vec![None; p.specs.len()],
        found: None,
    };
    // The walk only reads the program; `propagate` takes it mutably to
    // share one traversal with `untie_clamps`.
    let mut insts = p.insts.clone();
    w.list(&mut insts, &mut taint);
    w.found
}

/// Whether two elements of `case`'s float arguments are equal: a tie the
/// generated (continuous) arguments hold with probability zero, which a
/// shrink may make (it sets elements to 0 and 1, and turns values into
/// arguments), and which the structural check above cannot see. The
/// gradient fuzzer's shrink does not take such a case.
pub fn repeats_a_float(case: &Case) -> bool {
    let mut seen: Vec<u64> = case
        .args
        .iter()
        .filter(|a| a.dtype().is_float())
        .flat_map(|a| a.to_f64_vec())
        .map(|x| if x == 0.0 { 0 } else { x.to_bits() })
        .collect();
    let n = seen.len();
    seen.sort_unstable();
    seen.dedup();
    seen.len() < n
}

/// Whether an element of `case`'s float arguments is 2^40 or more in
/// magnitude: generated arguments are small, but a shrink may turn a
/// value into an argument, and a 64-bit integer's magnitude absorbs what
/// it is added to (see [`not_comparable`]). The gradient fuzzer's shrink
/// does not take such a case.
pub fn holds_a_huge_float(case: &Case) -> bool {
    case.args
        .iter()
        .filter(|a| a.dtype().is_float())
        .flat_map(|a| a.to_f64_vec())
        .any(|x| x.abs() >= (1u64 << 40) as f64)
}
