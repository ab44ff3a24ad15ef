//! Loops and branches: blocks generated with the same steps as the
//! program's body (nested up to [`MAX_DEPTH`](super::generate::MAX_DEPTH)),
//! ending in values of the types their op needs.

use tessel_dsl::{DType, TensorSpec};

use super::generate::Gen;
use super::program::{Binary, Block, Bound, Cmp, Inst, Op, Reduce, V};

impl Gen {
    /// Opens a block whose parameters have `specs`; returns them.
    fn open(&mut self, specs: &[TensorSpec]) -> Vec<V> {
        self.scopes.push(Vec::new());
        self.code.push(Vec::new());
        let params: Vec<V> = specs.iter().map(|s| self.fresh(s.clone())).collect();
        for &v in &params {
            self.keep(v);
        }
        params
    }

    /// Closes the open block, returning `results`.
    fn close(&mut self, params: Vec<V>, results: Vec<V>) -> Block {
        self.scopes.pop();
        let insts: Vec<Inst> = self.code.pop().expect("an open block");
        Block {
            params,
            insts,
            results,
        }
    }

    /// A few steps in the open block.
    fn steps(&mut self, lo: i64, hi: i64) {
        for _ in 0..self.int(lo, hi) {
            self.step();
        }
    }

    /// A value of type `want` computed in the open block: one of its own
    /// values of that type, or one reduced to a scalar, cast and
    /// broadcast, then combined with `carry` (when given) so that the
    /// result depends on both.
    fn fit(&mut self, want: &TensorSpec, carry: Option<V>) -> V {
        let own = self.scopes.last().expect("an open block").clone();
        let same: Vec<V> = own
            .iter()
            .copied()
            .filter(|&v| self.p.specs[v] == *want && Some(v) != carry)
            .collect();
        if !same.is_empty() && !self.one_in(4) {
            return same[same.len() - 1];
        }
        let src = if own.is_empty() {
            self.any()
        } else {
            self.pick(&own)
        };
        let v = self.shaped(src, want);
        let Some(c) = carry else { return v };
        if self.one_in(3) {
            return v;
        }
        let b = match want.dtype {
            DType::Pred => Binary::Xor,
            d if d.is_integer() => self.pick(&[Binary::Add, Binary::Xor, Binary::Max]),
            // Not `+` of a constant: see `elementwise`.
            _ if self.facts[v].konst => self.pick(&[Binary::Max, Binary::Min]),
            _ => self.pick(&[Binary::Max, Binary::Min, Binary::Add]),
        };
        self.emit(Op::Binary(b, c, v))
    }

    /// `src` reduced to a scalar, cast to `want`'s dtype and broadcast to
    /// its shape.
    fn shaped(&mut self, src: V, want: &TensorSpec) -> V {
        let s = self.spec(src);
        let mut v = src;
        if s.rank() > 0 {
            let kind = if s.dtype.is_float() || s.dtype.is_integer() {
                Reduce::Max
            } else {
                Reduce::Any
            };
            v = self.emit(Op::Reduce(kind, v, (0..s.rank()).collect()));
        }
        if s.dtype != want.dtype {
            v = self.emit(Op::Cast(v, want.dtype));
        }
        if want.rank() > 0 {
            v = self.emit(Op::BroadcastInDim(v, want.shape.clone(), Vec::new()));
        }
        v
    }

    /// `c` with its row `counter` (clamped) replaced by a value computed
    /// without reading `c`: a stacked output, which the gradient of a loop
    /// need not keep per iteration. (An update that read `c` could see rows
    /// XLA already overwrote in place; see `steps.rs`.)
    fn stacked(&mut self, c: V, counter: V) -> V {
        let want = self.spec(c);
        let mut readers = vec![c];
        for inst in self.code.last().expect("an open block") {
            if inst.free_uses().iter().any(|v| readers.contains(v)) {
                readers.extend(&inst.outs);
            }
        }
        let own: Vec<V> = self.scopes.last().expect("an open block").clone();
        let free: Vec<V> = own.into_iter().filter(|v| !readers.contains(v)).collect();
        let src = match free.is_empty() {
            true => {
                let k = self.small(want.dtype);
                self.full(Vec::new(), k, want.dtype)
            }
            false => self.pick(&free),
        };
        let mut window = want.clone();
        window.shape[0] = 1;
        let update = self.shaped(src, &window);
        let zero = self.full(Vec::new(), 0.0, DType::S32);
        let mut starts = vec![counter];
        starts.extend((1..want.rank()).map(|_| zero));
        self.emit(Op::DynamicUpdateSlice {
            x: c,
            update,
            starts,
        })
    }

    /// The carries of a loop starting at `x`: it and sometimes a second
    /// visible value.
    fn carries(&mut self, x: V) -> Vec<V> {
        let mut init = vec![x];
        if self.one_in(2) {
            let y = self.any();
            init.push(y);
        }
        init
    }

    /// The body of a loop over `init`: counter and carries in, new carries
    /// out. `one_trip`: the loop runs once, so XLA may replace it with its
    /// body and the counter with its one value.
    fn loop_body(&mut self, init: &[V], one_trip: bool) -> Block {
        let mut specs = vec![TensorSpec::scalar(DType::S32)];
        specs.extend(init.iter().map(|&v| self.spec(v)));
        let params = self.open(&specs);
        self.facts[params[0]].konst = one_trip;
        self.steps(1, 2);
        let results = params[1..]
            .iter()
            .map(|&c| {
                let want = self.spec(c);
                match want.shape.first() {
                    Some(&rows) if rows > 0 && self.one_in(4) => self.stacked(c, params[0]),
                    _ => self.fit(&want, Some(c)),
                }
            })
            .collect();
        self.close(params, results)
    }

    /// A `scan` from `x` (one time in three), or a `fori_loop` with a
    /// static or traced trip count.
    pub fn fori(&mut self, x: V) {
        if self.one_in(3) {
            return self.scan(x);
        }
        let init = self.carries(x);
        let lo = self.int(-1, 1) as i32;
        let hi = if self.one_in(3) {
            Bound::Traced(self.index_scalar())
        } else {
            Bound::Static(lo + self.int(0, 3) as i32)
        };
        let one_trip = matches!(hi, Bound::Static(hi) if hi == lo + 1);
        let body = self.loop_body(&init, one_trip);
        let outs = self.emit_all(Op::Fori { lo, hi, init, body });
        for v in outs {
            self.keep(v);
        }
    }

    /// A `scan` from `x`: over the rows of one or two visible values of
    /// one first extent (or none, for 0 to 3 steps), forward or reversed,
    /// stacking one or two of the body's values.
    fn scan(&mut self, x: V) {
        let init = self.carries(x);
        let rows =
            self.visible_where(|t| matches!(t.shape.first(), Some(&n) if (1..=6).contains(&n)));
        let (length, xs) = match rows.is_empty() || self.one_in(4) {
            true => (self.int(0, 3) as usize, Vec::new()),
            false => {
                let first = self.pick(&rows);
                let n = self.spec(first).shape[0];
                let mut xs = vec![first];
                let same = self.visible_where(|t| t.shape.first() == Some(&n));
                if self.one_in(2) {
                    let second = self.pick(&same);
                    xs.push(second);
                }
                (n, xs)
            }
        };
        let mut specs: Vec<TensorSpec> = init.iter().map(|&v| self.spec(v)).collect();
        for &v in &xs {
            let s = self.spec(v);
            specs.push(TensorSpec::new(s.shape[1..].to_vec(), s.dtype));
        }
        let params = self.open(&specs);
        self.steps(1, 2);
        let mut results: Vec<V> = params[..init.len()]
            .iter()
            .map(|&c| {
                let want = self.spec(c);
                self.fit(&want, Some(c))
            })
            .collect();
        let own = self.scopes.last().expect("an open block").clone();
        for _ in 0..self.int(1, 2) {
            let y = self.pick(&own);
            results.push(y);
        }
        let body = self.close(params, results);
        let reverse = self.one_in(2);
        let outs = self.emit_all(Op::Scan {
            init,
            xs,
            length,
            reverse,
            body,
        });
        for v in outs {
            self.keep(v);
        }
    }

    /// A `while_loop` from `x`, bounded by an index scalar (at most
    /// [`MAX_TRIPS`](super::program::MAX_TRIPS) iterations), with a condition of its own.
    pub fn while_(&mut self, x: V) {
        let init = self.carries(x);
        let limit = self.index_scalar();
        let mut specs = vec![TensorSpec::scalar(DType::S32)];
        specs.extend(init.iter().map(|&v| self.spec(v)));
        let params = self.open(&specs);
        let r = if self.one_in(3) {
            self.full(Vec::new(), 1.0, DType::Pred)
        } else {
            // Whether some carried element compares with a constant.
            let c = self.pick(&params[1..]);
            let d = self.spec(c).dtype;
            let k = self.small(d);
            let k = self.full(Vec::new(), k, d);
            let cmp = self.pick(&[Cmp::Ne, Cmp::Lt, Cmp::Ge]);
            let p = self.emit(Op::Compare(cmp, c, k));
            self.keep(p);
            self.fit(&TensorSpec::scalar(DType::Pred), None)
        };
        let cond = self.close(params, vec![r]);
        let body = self.loop_body(&init, false);
        let outs = self.emit_all(Op::While {
            limit,
            init,
            cond,
            body,
        });
        for v in outs {
            self.keep(v);
        }
    }

    /// A `cond` on a visible pred scalar (or a comparison of an index
    /// scalar) returning values of `x`'s type and sometimes another's.
    pub fn branch(&mut self, x: V) {
        let preds = self.visible_where(|t| *t == TensorSpec::scalar(DType::Pred));
        let pred = if !preds.is_empty() && self.one_in(2) {
            self.pick(&preds)
        } else {
            let i = self.index_scalar();
            let c = self.pick(&[-1.0, 0.0, 3.0]);
            let c = self.full(Vec::new(), c, DType::S32);
            self.emit(Op::Compare(Cmp::Gt, i, c))
        };
        let mut types = vec![self.spec(x)];
        if self.one_in(3) {
            let y = self.any();
            types.push(self.spec(y));
        }
        let arm = |g: &mut Gen| {
            let params = g.open(&[]);
            g.steps(0, 1);
            let results = types.iter().map(|t| g.fit(t, None)).collect();
            g.close(params, results)
        };
        let then = arm(self);
        let otherwise = arm(self);
        let outs = self.emit_all(Op::Cond {
            pred,
            then,
            otherwise,
        });
        for v in outs {
            self.keep(v);
        }
    }
}
