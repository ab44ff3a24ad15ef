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

use super::grad::SkipKind;
use super::program::{Binary, Inst, Op, Program, V};

/// What [`untie_clamps`] adds to a clamp's lower bound: a constant no
/// generated program holds, so that [`not_comparable`] knows it.
const LOWER_SHIFT: f64 = -0.0371;
/// What it adds to an upper bound (another such constant: the two bounds
/// of `x.clamp(x, x)` must not meet each other either).
const UPPER_SHIFT: f64 = 0.0419;

/// Each value's dependence on the parameters, one bit per parameter, and
/// the bits of the float parameters.
fn parameter_bits(p: &Program) -> (Vec<u64>, u64) {
    let mut taint = vec![0u64; p.specs.len()];
    let mut floats = 0u64;
    for (i, &v) in p.params.iter().enumerate() {
        let bit = 1 << (i % 64);
        taint[v] = bit;
        if p.specs[v].dtype.is_float() {
            floats |= bit;
        }
    }
    (taint, floats)
}

/// Sets the bits of `inst`'s results (and of its blocks' values) from
/// what it reads, walking its blocks with `walk_block`.
fn propagate(
    inst: &mut Inst,
    taint: &mut Vec<u64>,
    mut walk_block: impl FnMut(&mut Vec<Inst>, &mut Vec<u64>),
) {
    let t = inst.free_uses().iter().fold(0, |acc, &v| acc | taint[v]);
    let mut out = t;
    for b in inst.op.blocks_mut() {
        for &v in &b.params {
            taint[v] = t;
        }
        walk_block(&mut b.insts, taint);
        out |= b.results.iter().fold(0, |acc, &v| acc | taint[v]);
    }
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
        floats: u64,
        taint: &mut Vec<u64>,
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
            propagate(&mut inst, taint, |b, taint| walk(b, specs, floats, taint));
            out.push(inst);
        }
        *list = out;
    }
    let (mut taint, floats) = parameter_bits(p);
    walk(&mut p.insts, &mut p.specs, floats, &mut taint);
}

/// Why the gradient of `p` is not compared with differences, if it is
/// not: a `clamp` whose bound may still equal its operand or the other
/// bound (see the module docs; bounds moved by [`untie_clamps`] do not),
/// or a multiplying scatter whose updates depend on a parameter, whose
/// gradient JAX does not define (the pullback refuses it).
pub fn not_comparable(p: &Program) -> Option<SkipKind> {
    struct Walk {
        floats: u64,
        /// The constant each value was moved by, for the values
        /// [`untie_clamps`] made.
        shift: Vec<Option<f64>>,
        /// The value each constant holds, for the constants it made.
        konst: Vec<Option<f64>>,
        found: Option<SkipKind>,
    }
    impl Walk {
        fn list(&mut self, list: &mut Vec<Inst>, taint: &mut Vec<u64>) {
            for inst in list {
                match inst.op {
                    Op::Full { value, .. } if [LOWER_SHIFT, UPPER_SHIFT].contains(&value) => {
                        self.konst[inst.outs[0]] = Some(value);
                    }
                    Op::Binary(Binary::Add, _, k) => self.shift[inst.outs[0]] = self.konst[k],
                    Op::Clamp(a, b, c) => {
                        let bits = |v: V| (taint[v] & self.floats, self.shift[v]);
                        let [a, b, c] = [a, b, c].map(bits);
                        let may_tie = |(u, su): (u64, _), (w, sw): (u64, _)| u & w != 0 && su == sw;
                        if may_tie(a, b) || may_tie(a, c) || may_tie(b, c) {
                            self.found = Some(SkipKind::TiedClamp);
                        }
                    }
                    Op::IndexUpdate {
                        updates,
                        combine: ScatterCombine::Mul,
                        ..
                    } if taint[updates] != 0 => {
                        self.found = Some(SkipKind::MultiplyingScatter);
                    }
                    _ => {}
                }
                propagate(inst, taint, |b, taint| self.list(b, taint));
            }
        }
    }
    let (mut taint, floats) = parameter_bits(p);
    let mut w = Walk {
        floats,
        shift: vec![None; p.specs.len()],
        konst: vec![None; p.specs.len()],
        found: None,
    };
    // The walk only reads the program; `propagate` takes it mutably to
    // share one traversal with `untie_clamps`.
    let mut insts = p.insts.clone();
    w.list(&mut insts, &mut taint);
    w.found
}
