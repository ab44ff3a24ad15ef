//! The steps whose results are not exact (transcendental functions, float
//! sums and dots, casts that may see excess precision): outputs only,
//! compared with the tolerances of [`compare`](super::compare).

use tessel_dsl::{DType, DotDims, TensorSpec};

use super::generate::{Gen, MAX_ELEMENTS};
use super::program::{Binary, Op, Reduce, Unary, V};

/// Whether a cast from `from` to `to` may see more precision than `from`
/// holds: XLA may skip the rounding to a narrow float of the op that made
/// the value when a conversion to a wider float follows (excess
/// precision). Returns the number of `to` ulps one `from` ulp is.
pub fn widening(from: DType, to: DType) -> Option<usize> {
    let bits = |d: DType| match d {
        DType::F16 => 10,
        DType::BF16 => 7,
        DType::F32 => 23,
        DType::F64 => 52,
        _ => 0,
    };
    let narrow = matches!(from, DType::F16 | DType::BF16);
    (narrow && to.is_float() && bits(to) > bits(from))
        .then(|| 1usize << (bits(to) - bits(from)).min(60))
}

impl Gen {
    /// A small `dot_general` of `x` and a visible value with a matching
    /// axis: exact for integers, an output for floats.
    pub fn dot(&mut self, x: V) {
        let s = self.spec(x);
        let d = s.dtype;
        let ax = self.int(0, s.rank() as i64 - 1) as usize;
        let k = s.shape[ax];
        let ys = self
            .visible_where(|t| t.dtype == d && (1..=2).contains(&t.rank()) && t.shape.contains(&k));
        let y = if ys.is_empty() {
            let spec = TensorSpec::new(vec![k, 3], d);
            self.emit(Op::Iota { spec, dim: 0 })
        } else {
            self.pick(&ys)
        };
        let t = self.spec(y);
        let axes: Vec<usize> = (0..t.rank()).filter(|&a| t.shape[a] == k).collect();
        let ay = self.pick(&axes);
        let mut dims = DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![ax],
            rhs_contract: vec![ay],
        };
        if s.rank() == 2 && t.rank() == 2 && s.shape[1 - ax] == t.shape[1 - ay] && self.one_in(2) {
            dims.lhs_batch = vec![1 - ax];
            dims.rhs_batch = vec![1 - ay];
        }
        if d.is_integer() {
            let r = self.emit(Op::Dot {
                lhs: x,
                rhs: y,
                dims,
                out: None,
            });
            self.keep(r);
        } else if self.depth() == 0 {
            // Magnitudes: no cancellation, so the sum's rounding error
            // stays within a few ulps of the result per term.
            let a = self.emit(Op::Unary(Unary::Abs, x));
            let b = self.emit(Op::Unary(Unary::Abs, y));
            let wide = matches!(d, DType::BF16 | DType::F16) && self.one_in(2);
            let out = wide.then_some(DType::F32);
            let r = self.emit(Op::Dot {
                lhs: a,
                rhs: b,
                dims,
                out,
            });
            if self.p.specs[r].num_elements() <= MAX_ELEMENTS {
                self.output_inexact(r, k);
            }
        }
    }

    /// `|x| + 1`, at least 1.
    fn abs_plus_one(&mut self, x: V) -> V {
        let d = self.spec(x).dtype;
        let a = self.emit(Op::Unary(Unary::Abs, x));
        let one = self.full(Vec::new(), 1.0, d);
        self.emit(Op::Binary(Binary::Add, a, one))
    }

    /// `x / 2`, as a product by 0.5.
    fn halved(&mut self, x: V) -> V {
        let d = self.spec(x).dtype;
        let half = self.full(Vec::new(), 0.5, d);
        self.emit(Op::Binary(Binary::Mul, x, half))
    }

    /// Float `x` clamped to `[-30, 30]`.
    fn within_30(&mut self, x: V) -> V {
        let d = self.spec(x).dtype;
        let lo = self.full(Vec::new(), -30.0, d);
        let hi = self.full(Vec::new(), 30.0, d);
        self.emit(Op::Clamp(x, lo, hi))
    }

    /// Results that are not exact: outputs only.
    pub fn inexact(&mut self, x: V) {
        let s = self.spec(x);
        if s.dtype.is_pred() {
            return;
        }
        let f = if s.dtype.is_float() {
            x
        } else {
            self.emit(Op::Cast(x, DType::F32))
        };
        let d = self.spec(f).dtype;
        let unary = |g: &mut Gen, u: Unary, v: V| g.emit(Op::Unary(u, v));
        // The plugin computes some functions of f16, bf16 and f8 in the narrow
        // type: `expm1` of f16 0.1875 is 2 ulps from the rounded result
        // (see the compare module's table).
        let func_terms = if d.is_float() && d.size_in_bytes() <= 2 {
            2
        } else {
            1
        };
        let (t, terms) = match self.int(0, 13) {
            0 => (unary(self, Unary::Tanh, f), func_terms),
            1 => (unary(self, Unary::Sin, f), func_terms),
            2 => (unary(self, Unary::Cos, f), func_terms),
            3 | 4 => {
                let p = self.abs_plus_one(f);
                let u = self.pick(&[Unary::Log, Unary::Log1p]);
                (unary(self, u, p), func_terms)
            }
            5 => {
                let h = self.halved(f);
                let u = self.pick(&[Unary::Exp, Unary::Expm1]);
                (unary(self, u, h), func_terms)
            }
            6 => (unary(self, Unary::Erf, f), func_terms),
            7 if s.rank() > 0 => {
                let axis = self.int(0, s.rank() as i64 - 1) as usize;
                let a = unary(self, Unary::Abs, f);
                let sum = self.emit(Op::Reduce(Reduce::Sum, a, vec![axis]));
                (sum, s.shape[axis])
            }
            8 => {
                // A divisor of at least 1: XLA's fusion emitters give NaN for
                // `atan2(0, 0)` when they see both zeros while compiling.
                let y = self.partner(f);
                let y = self.abs_plus_one(y);
                (self.emit(Op::Binary(Binary::Atan2, f, y)), func_terms)
            }
            9 => {
                let base = self.abs_plus_one(f);
                let e = self.pick(&[0.5, 2.0, -1.0, 1.5, 3.0]);
                let e = self.full(Vec::new(), e, d);
                (self.emit(Op::Binary(Binary::Pow, base, e)), func_terms)
            }
            10 => (unary(self, Unary::Sigmoid, f), func_terms),
            11 => {
                // Away from 0, where rsqrt is infinite.
                let p = self.abs_plus_one(f);
                (unary(self, Unary::Rsqrt, p), func_terms)
            }
            12 => {
                // Within ±30: the plugin's f32 cbrt is `pow(|x|, 1/3)`,
                // whose error grows with |log x| (5 ulps at 2^53), where
                // the interpreter rounds the exact root.
                let c = self.within_30(f);
                (unary(self, Unary::Cbrt, c), func_terms)
            }
            _ => {
                // Within ±15, where the argument reductions agree; halved,
                // so that the generator's constants stay off the poles
                // (the nearest: tan(1.5) = 14.1).
                let c = self.within_30(f);
                let h = self.halved(c);
                (unary(self, Unary::Tan, h), func_terms)
            }
        };
        if self.p.specs[t].num_elements() <= MAX_ELEMENTS {
            self.output_inexact(t, terms);
        }
    }
}
