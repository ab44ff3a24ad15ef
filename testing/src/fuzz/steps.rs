//! The generator's steps: one random op (or a few related ones) on a
//! random operand, keeping exact results for later ops and sending the
//! others to the outputs (see [`generate`](super::generate) for which are
//! which).

use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{DType, TensorSpec};

use super::generate::{Gen, DTYPES, EXTENTS, MAX_ELEMENTS};
use super::inexact::widening;
use super::program::{Binary, Cmp, Op, Reduce, Unary, V};
use super::types::broadcast_shapes;

/// Lengths of the rows [`Gen::long_rows`] reduces: multiples of 8 from 64
/// on, the rows the CPU compile splits.
const LONG_ROWS: [usize; 3] = [64, 72, 128];
/// The dtypes [`Gen::long_rows`] takes: floats whose iota up to 127 is
/// exact.
const LONG_ROW_DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::BF16, DType::F16];

impl Gen {
    /// One random step.
    pub fn step(&mut self) {
        let x = self.any();
        let s = self.spec(x);
        let rank = s.rank();
        let top = self.depth() == 0;
        match self.int(0, 17) {
            0..=2 => {
                let (t, exact) = self.elementwise(x);
                if exact {
                    self.keep(t);
                } else if top {
                    self.output_inexact(t, 1);
                }
            }
            3 => self.compare_select(x),
            4 => self.cast(x),
            5 => self.broadcast_or_reshape(x),
            6 if rank > 0 => self.transpose_or_slice(x),
            7 if rank > 0 => self.reduce(x),
            8 if rank > 0 => self.dynamic_slices(x),
            9 if rank > 0 => self.gather_scatter(x),
            10 if self.depth() < super::generate::MAX_DEPTH => self.fori(x),
            11 if self.depth() < super::generate::MAX_DEPTH => self.while_(x),
            12 if self.depth() < super::generate::MAX_DEPTH => self.branch(x),
            13 => self.concat_or_pad(x),
            14 if rank > 0 && !s.dtype.is_pred() && !self.facts[x].nan_sign_open => {
                let axis = self.int(0, rank as i64 - 1) as usize;
                let descending = self.one_in(2);
                let indices = self.one_in(2);
                let t = self.emit(Op::Sort {
                    x,
                    axis,
                    descending,
                    indices,
                });
                self.keep(t);
            }
            15 if rank > 0 && rank <= 2 && !s.dtype.is_pred() => self.dot(x),
            16 if !s.dtype.is_pred() => {
                let lo = self.partner_within(x);
                let hi = self.partner_within(x);
                let t = self.emit(Op::Clamp(x, lo, hi));
                self.keep(t);
            }
            _ if top => self.inexact(x),
            _ => {}
        }
    }

    /// A value of `x`'s dtype whose shape broadcasts with `x`'s (usually
    /// to `x`'s own): a visible value (cast if needed and exact) or a
    /// constant.
    pub fn partner(&mut self, x: V) -> V {
        let s = self.spec(x);
        let fits = |t: &TensorSpec| {
            broadcast_shapes(&t.shape, &s.shape)
                .is_some_and(|b| b.iter().product::<usize>() <= MAX_ELEMENTS)
        };
        let mut cands = self.visible_where(|t| fits(t) && widening(t.dtype, s.dtype).is_none());
        if !cands.is_empty() && !self.one_in(5) {
            // Mostly the same shape, so that results do not grow.
            let same: Vec<V> = cands
                .iter()
                .copied()
                .filter(|&v| self.p.specs[v].shape == s.shape)
                .collect();
            if !same.is_empty() && !self.one_in(3) {
                cands = same;
            }
            let t = self.pick(&cands);
            return if self.p.specs[t].dtype == s.dtype {
                t
            } else {
                self.emit(Op::Cast(t, s.dtype))
            };
        }
        let shape = match self.int(0, 2) {
            0 => Vec::new(),
            1 => s
                .shape
                .iter()
                .map(|&e| if self.one_in(2) { 1 } else { e })
                .collect(),
            _ => s.shape.clone(),
        };
        let v = self.small(s.dtype);
        self.full(shape, v, s.dtype)
    }

    /// A partner that broadcasts to exactly `x`'s shape (a constant when
    /// no visible value does).
    pub fn partner_within(&mut self, x: V) -> V {
        let s = self.spec(x);
        let t = self.partner(x);
        if broadcast_shapes(&self.p.specs[t].shape, &s.shape).as_deref() == Some(&s.shape[..]) {
            t
        } else {
            let v = self.small(s.dtype);
            self.full(s.shape, v, s.dtype)
        }
    }

    /// An elementwise op of `x` (and a partner), and whether it is exact.
    pub fn elementwise(&mut self, x: V) -> (V, bool) {
        let d = self.spec(x).dtype;
        let y = self.partner(x);
        let r = self.int(0, 11);
        let konst = self.facts[x].konst && self.facts[y].konst;
        let (fx, fy) = (self.facts[x], self.facts[y]);
        // XLA rewrites a product with a pred cast to a float as a select,
        // which gives +0 where the product is -0, and `sqrt(a) * sqrt(a)`
        // as `a`, which skips two roundings.
        let float_mul = !(fx.pred_cast || fy.pred_cast || fx.sqrt && fy.sqrt);
        // XLA drops `x + 0`, which keeps a -0 that the sum makes +0.
        let float_add = !(fx.konst || fy.konst);
        let bin = |g: &mut Gen, b: Binary, x: V, y: V| g.emit(Op::Binary(b, x, y));
        let t = match d {
            DType::Pred => match r % 4 {
                0 => bin(self, Binary::And, x, y),
                1 => bin(self, Binary::Or, x, y),
                2 => bin(self, Binary::Xor, x, y),
                _ => self.emit(Op::Unary(Unary::Not, x)),
            },
            d if d.is_integer() => match r {
                0 => bin(self, Binary::Add, x, y),
                1 => bin(self, Binary::Sub, x, y),
                2 => bin(self, Binary::Mul, x, y),
                // Never by zero, and never of two constants: XLA folds an
                // integer division of known operands on the host, where
                // `x / 0` and `MIN / -1` trap and kill the process.
                3 | 4 if !konst => {
                    let one = self.full(Vec::new(), 1.0, d);
                    let nz = bin(self, Binary::Or, y, one);
                    let b = if r == 3 { Binary::Div } else { Binary::Rem };
                    bin(self, b, x, nz)
                }
                5 => bin(self, Binary::Max, x, y),
                6 => bin(self, Binary::ShiftRightArithmetic, x, y),
                7 => {
                    let s = bin(self, Binary::ShiftLeft, x, y);
                    bin(self, Binary::Xor, s, y)
                }
                8 => bin(self, Binary::ShiftRightLogical, x, y),
                9 if !d.is_unsigned() => {
                    let a = self.emit(Op::Unary(Unary::Abs, x));
                    self.emit(Op::Unary(Unary::Neg, a))
                }
                10 => {
                    let c = self.emit(Op::Unary(Unary::PopCount, x));
                    bin(self, Binary::Min, c, y)
                }
                _ => {
                    let n = self.emit(Op::Unary(Unary::Not, x));
                    let sg = self.emit(Op::Unary(Unary::Sign, n));
                    bin(self, Binary::And, sg, y)
                }
            },
            _ => match r {
                0 if float_add => bin(self, Binary::Add, x, y),
                1 => bin(self, Binary::Sub, x, y),
                2 if float_mul => bin(self, Binary::Mul, x, y),
                // XLA divides by a constant (or a value it proves constant,
                // such as a select on `i < i`) as a product with its
                // reciprocal, which may be one ulp off the quotient.
                3 => return (bin(self, Binary::Div, x, y), false),
                4 => bin(self, Binary::Rem, x, y),
                5 => bin(self, Binary::Max, x, y),
                6 => bin(self, Binary::Min, x, y),
                7 => {
                    let a = self.emit(Op::Unary(Unary::Abs, x));
                    self.emit(Op::Unary(Unary::Sqrt, a))
                }
                8 => {
                    let c = self.full(Vec::new(), 1.5, d);
                    let m = bin(self, Binary::Mul, x, c);
                    self.emit(Op::Unary(Unary::Round, m))
                }
                9 => {
                    let f = self.emit(Op::Unary(Unary::Floor, x));
                    let c = self.emit(Op::Unary(Unary::Ceil, x));
                    bin(self, Binary::Sub, f, c)
                }
                // XLA folds the sign of a known -0 to +0.
                10 if !fx.konst => {
                    let n = self.emit(Op::Unary(Unary::Neg, x));
                    self.emit(Op::Unary(Unary::Sign, n))
                }
                _ => self.emit(Op::Unary(Unary::IsFinite, x)),
            },
        };
        (t, true)
    }

    fn compare_select(&mut self, x: V) {
        let y = self.partner(x);
        let cmp = if self.spec(x).dtype.is_pred() {
            self.pick(&[Cmp::Eq, Cmp::Ne])
        } else {
            self.pick(&[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge])
        };
        let p = self.emit(Op::Compare(cmp, x, y));
        self.keep(p);
        let z = self.partner_within(x);
        let t = self.emit(Op::Select(p, y, z));
        self.keep(t);
    }

    fn cast(&mut self, x: V) {
        let to = self.pick(&DTYPES);
        let from = self.spec(x).dtype;
        let t = self.emit(Op::Cast(x, to));
        match widening(from, to) {
            // Within one ulp of the narrow type: the harness allows 4 ulps
            // of the wide one per term.
            Some(ratio) if self.depth() == 0 => self.output_inexact(t, ratio / 4),
            Some(_) => {}
            None => self.keep(t),
        }
    }

    fn broadcast_or_reshape(&mut self, x: V) {
        let s = self.spec(x);
        let rank = s.rank();
        if self.one_in(3) && rank > 0 {
            let n = s.num_elements();
            let shape = match self.int(0, 2) {
                0 => vec![n],
                1 => {
                    let mut sh = s.shape.clone();
                    let at = self.int(0, rank as i64) as usize;
                    sh.insert(at, 1);
                    sh
                }
                _ => s.shape.iter().rev().copied().collect(),
            };
            let t = self.emit(Op::Reshape(x, shape));
            self.keep(t);
            return;
        }
        let at = self.int(0, rank as i64) as usize;
        let mut out: Vec<usize> = s
            .shape
            .iter()
            .map(|&e| {
                if e == 1 && self.one_in(2) {
                    self.pick(&EXTENTS)
                } else {
                    e
                }
            })
            .collect();
        out.insert(at, self.pick(&EXTENTS));
        let dims: Vec<usize> = (0..rank).map(|a| if a < at { a } else { a + 1 }).collect();
        let t = self.emit(Op::BroadcastInDim(x, out, dims));
        self.keep(t);
    }

    fn transpose_or_slice(&mut self, x: V) {
        let s = self.spec(x);
        let rank = s.rank();
        if self.one_in(2) {
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.rotate_left(self.int(0, rank as i64 - 1) as usize);
            if rank > 2 && self.one_in(2) {
                perm.swap(0, 1);
            }
            let t = self.emit(Op::Transpose(x, perm));
            self.keep(t);
            return;
        }
        let (mut start, mut limit, mut stride) = (Vec::new(), Vec::new(), Vec::new());
        for &e in &s.shape {
            let a = self.int(0, e as i64) as usize;
            start.push(a);
            limit.push(self.int(a as i64, e as i64) as usize);
            stride.push(self.int(1, 3) as usize);
        }
        let t = self.emit(Op::Slice {
            x,
            start,
            limit,
            stride,
        });
        self.keep(t);
    }

    fn reduce(&mut self, x: V) {
        let s = self.spec(x);
        let d = s.dtype;
        let rank = s.rank();
        if LONG_ROW_DTYPES.contains(&d) && s.num_elements() <= 8 && self.one_in(2) {
            return self.long_rows(x);
        }
        let mut axes = vec![self.int(0, rank as i64 - 1) as usize];
        if rank > 1 && self.one_in(3) {
            let other = (axes[0] + 1) % rank;
            axes.push(other);
        }
        let kind = if d.is_pred() {
            self.pick(&[Reduce::All, Reduce::Any])
        } else if d.is_integer() {
            self.pick(&[
                Reduce::Sum,
                Reduce::Prod,
                Reduce::Max,
                Reduce::Min,
                Reduce::All,
                Reduce::Any,
            ])
        } else {
            self.pick(&[Reduce::Max, Reduce::Min])
        };
        let t = self.emit(Op::Reduce(kind, x, axes.clone()));
        self.keep(t);
        if !d.is_pred() {
            let max = self.one_in(2);
            let a = self.emit(Op::Arg {
                x,
                axis: axes[0],
                max,
            });
            self.keep(a);
        }
    }

    /// Rows long enough for the CPU compile's row-reduction split
    /// (`tessel_dsl::lower::split_row_reductions`): `x` broadcast along a
    /// new last axis of 64 or more elements and combined with an iota
    /// there (one elementwise op that nothing else reads), then its max or
    /// min over that axis (exact) and, at the top level, the sum of its
    /// magnitudes (an output).
    fn long_rows(&mut self, x: V) {
        let s = self.spec(x);
        let (d, rank) = (s.dtype, s.rank());
        let len = self.pick(&LONG_ROWS);
        let mut shape = s.shape.clone();
        shape.push(len);
        let spec = TensorSpec::new(shape.clone(), d);
        let dims: Vec<usize> = (0..rank).collect();
        let row = |g: &mut Gen| {
            let b = g.emit(Op::BroadcastInDim(x, shape.clone(), dims.clone()));
            let i = g.emit(Op::Iota {
                spec: spec.clone(),
                dim: rank,
            });
            let op = g.pick(&[Binary::Add, Binary::Sub, Binary::Mul, Binary::Max]);
            g.emit(Op::Binary(op, b, i))
        };
        let t = row(self);
        let kind = self.pick(&[Reduce::Max, Reduce::Min]);
        let r = self.emit(Op::Reduce(kind, t, vec![rank]));
        self.keep(r);
        if self.depth() == 0 && self.one_in(2) {
            let t = row(self);
            let a = self.emit(Op::Unary(Unary::Abs, t));
            let sum = self.emit(Op::Reduce(Reduce::Sum, a, vec![rank]));
            self.output_inexact(sum, len);
        }
    }

    /// An s32 scalar to index with: a visible one, sometimes scaled and
    /// shifted, or a constant.
    pub fn index_scalar(&mut self) -> V {
        let scalars = self.visible_where(|t| *t == TensorSpec::scalar(DType::S32));
        if scalars.is_empty() {
            let v = self.int(-2, 6) as f64;
            return self.full(Vec::new(), v, DType::S32);
        }
        let s = self.pick(&scalars);
        if self.one_in(3) {
            let k = self.int(1, 3) as f64;
            let c = self.full(Vec::new(), k, DType::S32);
            let m = self.emit(Op::Binary(Binary::Mul, s, c));
            let two = self.full(Vec::new(), 2.0, DType::S32);
            return self.emit(Op::Binary(Binary::Sub, m, two));
        }
        s
    }

    fn dynamic_slices(&mut self, x: V) {
        if self.facts[x].dyn_slice {
            // XLA folds a dynamic slice of a dynamic slice into one whose
            // start is the sum of both, clamped once instead of twice.
            return;
        }
        let s = self.spec(x);
        let sizes: Vec<usize> = s
            .shape
            .iter()
            .map(|&e| self.int(0, e as i64) as usize)
            .collect();
        let starts: Vec<V> = (0..s.rank()).map(|_| self.index_scalar()).collect();
        let w = self.emit(Op::DynamicSlice {
            x,
            starts: starts.clone(),
            sizes,
        });
        self.keep(w);
        // The update reads `x` only through `w`, at the same starts: XLA
        // updates `x` in place, so an update that reads `x` at other
        // positions may see elements already overwritten.
        let d = s.dtype;
        let k = self.small(d);
        let c = self.full(Vec::new(), k, d);
        let b = match d {
            DType::Pred => Binary::Xor,
            d if d.is_integer() => self.pick(&[Binary::Add, Binary::Xor]),
            _ => self.pick(&[Binary::Min, Binary::Max]),
        };
        let u = self.emit(Op::Binary(b, w, c));
        let t = self.emit(Op::DynamicUpdateSlice {
            x,
            update: u,
            starts: starts.clone(),
        });
        self.keep(t);
        if self.one_in(2) {
            // Elsewhere, a window of constants.
            let one = self.full(Vec::new(), 1.0, DType::S32);
            let back: Vec<V> = starts
                .iter()
                .map(|&st| self.emit(Op::Binary(Binary::Add, st, one)))
                .collect();
            let spec = self.spec(w);
            let u = if d.is_pred() || spec.rank() == 0 {
                let k = self.small(d);
                self.full(spec.shape, k, d)
            } else {
                let dim = self.int(0, spec.rank() as i64 - 1) as usize;
                self.emit(Op::Iota { spec, dim })
            };
            let t = self.emit(Op::DynamicUpdateSlice {
                x,
                update: u,
                starts: back,
            });
            self.keep(t);
        }
    }

    fn gather_scatter(&mut self, x: V) {
        let s = self.spec(x);
        let axis = self.int(0, s.rank() as i64 - 1) as usize;
        let ints = self
            .visible_where(|t| t.dtype == DType::S32 && t.rank() <= 2 && t.num_elements() <= 16);
        if s.shape[axis] == 0 || ints.is_empty() || self.facts[x].dyn_slice {
            // Nothing to take; or `x` is a dynamic slice: XLA turns a take or
            // scatter at one index into a dynamic slice (and update), which
            // it folds with `x`'s into one start, the sum, clamped once.
            return;
        }
        let idx = self.pick(&ints);
        let t = self.emit(Op::Take {
            x,
            indices: idx,
            axis,
        });
        self.keep(t);
        // Indices that are `x` itself, or a view of it, are generated: the
        // plugin's XLA scatters in place into the buffer it reads them
        // from, and lowering gives such a scatter converted indices.
        let mut upd: Vec<usize> = s.shape[..axis].to_vec();
        upd.extend(&self.spec(idx).shape);
        upd.extend(&s.shape[axis + 1..]);
        let want = TensorSpec::new(upd.clone(), s.dtype);
        let same = self.visible_where(|t| *t == want);
        let u = if !same.is_empty() && self.one_in(2) {
            self.pick(&same)
        } else if s.dtype.is_pred() || upd.is_empty() {
            self.full(upd, 1.0, s.dtype)
        } else {
            let last = upd.len() - 1;
            let i = self.emit(Op::Iota {
                spec: want,
                dim: last,
            });
            let three = self.full(Vec::new(), 3.0, s.dtype);
            self.emit(Op::Binary(Binary::Sub, i, three))
        };
        let combine = if s.dtype.is_pred() {
            ScatterCombine::Set
        } else {
            self.pick(&[
                ScatterCombine::Set,
                ScatterCombine::Add,
                ScatterCombine::Max,
                ScatterCombine::Min,
                ScatterCombine::Mul,
            ])
        };
        let r = self.emit(Op::IndexUpdate {
            x,
            axis,
            indices: idx,
            updates: u,
            combine,
        });
        self.keep(r);
    }

    fn concat_or_pad(&mut self, x: V) {
        let s = self.spec(x);
        let rank = s.rank();
        if rank > 0 && self.one_in(2) {
            let axis = self.int(0, rank as i64 - 1) as usize;
            let same = self.visible_where(|t| {
                t.dtype == s.dtype
                    && t.rank() == rank
                    && (0..rank).all(|a| a == axis || t.shape[a] == s.shape[a])
            });
            let y = self.pick(&same);
            let parts = if self.one_in(2) {
                vec![x, y, x]
            } else {
                vec![y, x]
            };
            let t = self.emit(Op::Concat(parts, axis));
            self.keep(t);
            return;
        }
        let (mut low, mut high, mut interior) = (Vec::new(), Vec::new(), Vec::new());
        for &e in &s.shape {
            let (l, h, i) = (self.int(-1, 2), self.int(-1, 2), self.int(0, 2));
            let dilated = if e == 0 {
                0
            } else {
                e as i64 + (e as i64 - 1) * i
            };
            let ok = dilated + l + h >= 0;
            low.push(if ok { l } else { 0 });
            high.push(if ok { h } else { 0 });
            interior.push(if ok { i } else { 0 });
        }
        let value = if s.dtype.is_pred() || s.dtype.is_unsigned() {
            1.0
        } else {
            -7.0
        };
        let t = self.emit(Op::Pad {
            x,
            value,
            low,
            high,
            interior,
        });
        self.keep(t);
    }
}
