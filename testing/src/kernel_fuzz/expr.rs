//! Tensor expressions of a given shape and element type, built from the
//! variables in scope (read whole, indexed, sliced, reduced, transposed,
//! reshaped, broadcast, cast), constants and exact elementwise ops.
//!
//! Every expression is exact: its domain ([`Dom`]) says f32 holds all its
//! values, so the interpreter and XLA compute it bit for bit and it may
//! feed comparisons, casts and further arithmetic. Operands that would
//! leave the exact range are first brought back into the variables'
//! domain ([`Body::fit`]).

use super::body::Body;
use super::types::{const_dom, float_lit, Dom, Elem, Ex, Ty, BIT, F32_VAR, S32_VAR};

/// Scalars an f32 tensor is multiplied by (all exact).
const F32_MULS: [f64; 7] = [2.0, -1.0, 0.5, 1.5, 0.25, 3.0, -2.0];
/// Scalars added to an f32 tensor.
const F32_ADDS: [f64; 5] = [0.5, 1.0, 2.0, -0.25, 3.0];

impl Body {
    /// An exact tensor expression of `shape` and `elem`, nested at most `depth` ops deep.
    pub(crate) fn tensor(&mut self, shape: &[usize], elem: Elem, depth: u32) -> Ex {
        if depth == 0 || self.coin(0.3) {
            return self.leaf(shape, elem);
        }
        match elem {
            Elem::F32 => self.f32_op(shape, depth - 1),
            Elem::S32 => self.s32_op(shape, depth - 1),
            Elem::Pred => self.pred_op(shape, depth - 1),
        }
    }

    /// `ex` brought into `dom` (a power-of-two grid and magnitude): a
    /// finer grid is floored onto it, a larger magnitude clamped.
    pub(crate) fn fit(&mut self, ex: Ex, dom: Dom) -> Ex {
        if ex.elem() == Elem::Pred || ex.dom.within(dom) {
            return ex;
        }
        let mut ex = ex;
        if ex.dom.grid > dom.grid && ex.elem() == Elem::F32 {
            let s = f64::from(1u32 << dom.grid);
            ex = Ex::compound(
                format!(
                    "({} * {}).floor() * {}",
                    ex.operand(),
                    float_lit(s),
                    float_lit(1.0 / s)
                ),
                ex.ty.clone(),
                Dom::new(dom.grid, ex.dom.mag + 1.0),
            );
        }
        if ex.dom.mag > dom.mag {
            let m = if ex.elem() == Elem::F32 {
                float_lit(dom.mag)
            } else {
                format!("{}", dom.mag as i64)
            };
            ex = Ex::atom(
                format!("{}.clamp(-{m}, {m})", ex.operand()),
                ex.ty.clone(),
                Dom::new(ex.dom.grid, dom.mag),
            );
        }
        ex
    }

    /// The domain the variables of `elem` are kept in.
    pub(crate) fn var_dom(elem: Elem) -> Dom {
        match elem {
            Elem::F32 => F32_VAR,
            Elem::S32 => S32_VAR,
            Elem::Pred => BIT,
        }
    }

    /// An operand shape that broadcasts against `shape`: itself, a scalar,
    /// a suffix, or the shape with some extents 1.
    fn broadcast_shape(&mut self, shape: &[usize]) -> Vec<usize> {
        if shape.is_empty() || self.coin(0.7) {
            return shape.to_vec();
        }
        match self.below(3) {
            0 => Vec::new(),
            1 => shape[self.below(shape.len())..].to_vec(),
            _ => shape
                .iter()
                .map(|&d| if self.coin(0.5) { 1 } else { d })
                .collect(),
        }
    }

    /// Two operands: one of `shape`, one of a shape broadcasting to it.
    fn operands(&mut self, shape: &[usize], elem: Elem, depth: u32) -> (Ex, Ex) {
        let a = self.tensor(shape, elem, depth);
        let bs = self.broadcast_shape(shape);
        let b = self.tensor(&bs, elem, depth);
        if self.coin(0.5) {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Operands whose combination by `combine` stays exact, fitting them
    /// into the variables' domain when it would not.
    fn exact_pair(&mut self, a: Ex, b: Ex, combine: fn(Dom, Dom) -> Dom) -> (Ex, Ex, Dom) {
        let d = combine(a.dom, b.dom);
        let limit = if a.elem() == Elem::S32 {
            Dom::new(0, f64::from(1u32 << 20))
        } else {
            Dom::new(0, f64::from(1u32 << 24))
        };
        if d.exact() && d.mag <= limit.mag {
            return (a, b, d);
        }
        let v = Body::var_dom(a.elem());
        let (a, b) = (self.fit(a, v), self.fit(b, v));
        let d = combine(a.dom, b.dom);
        (a, b, d)
    }

    fn binary(shape: &[usize], elem: Elem, a: &Ex, op: &str, b: &Ex, dom: Dom) -> Ex {
        Ex::compound(
            format!("{} {op} {}", a.operand(), b.operand()),
            Ty::tensor(shape, elem),
            dom,
        )
    }

    pub(crate) fn method(shape: &[usize], elem: Elem, a: &Ex, call: &str, dom: Dom) -> Ex {
        Ex::atom(
            format!("{}.{call}", a.operand()),
            Ty::tensor(shape, elem),
            dom,
        )
    }

    fn f32_op(&mut self, shape: &[usize], depth: u32) -> Ex {
        let f = Elem::F32;
        match self.below(13) {
            0 | 1 => {
                let (a, b) = self.operands(shape, f, depth);
                let op = if self.coin(0.5) { "+" } else { "-" };
                let (a, b, d) =
                    self.exact_pair(a, b, |x, y| Dom::new(x.grid.max(y.grid), x.mag + y.mag));
                Body::binary(shape, f, &a, op, &b, d)
            }
            2 => {
                let (a, b) = self.operands(shape, f, depth);
                let (a, b, d) =
                    self.exact_pair(a, b, |x, y| Dom::new(x.grid + y.grid, x.mag * y.mag));
                Body::binary(shape, f, &a, "*", &b, d)
            }
            3 => {
                let a = self.tensor(shape, f, depth);
                let c = self.pick(&F32_MULS);
                let (a, _, d) =
                    self.exact_pair(a, Ex::atom("", Ty::Float, const_dom(c)), |x, y| {
                        Dom::new(x.grid + y.grid, x.mag * y.mag)
                    });
                if self.coin(0.3) {
                    // A literal on the left, unsuffixed: a method called on
                    // the product needs its type at once.
                    let c = Ex::atom(float_lit(c), Ty::Float, const_dom(c));
                    Body::binary(shape, f, &c, "*", &a, d)
                } else {
                    let c = Ex::atom(float_lit(c), Ty::Float, const_dom(c));
                    Body::binary(shape, f, &a, "*", &c, d)
                }
            }
            4 => {
                let a = self.tensor(shape, f, depth);
                let c = self.pick(&F32_ADDS);
                let cd = const_dom(c);
                let (a, _, d) = self.exact_pair(a, Ex::atom("", Ty::Float, cd), |x, y| {
                    Dom::new(x.grid.max(y.grid), x.mag + y.mag)
                });
                let c = Ex::atom(float_lit(c), Ty::Float, cd);
                match self.below(3) {
                    0 => Body::binary(shape, f, &a, "+", &c, d),
                    1 => Body::binary(shape, f, &a, "-", &c, d),
                    _ => Body::binary(shape, f, &c, "-", &a, d),
                }
            }
            5 if self.coin(0.3) => {
                // The remainder is exact. The divisor is kept away from
                // zero: a NaN meeting `p.cast(F32) * y` is 0 on XLA, NaN in
                // the interpreter (the interpreter's module docs).
                let (a, b) = self.operands(shape, f, depth);
                let b = Ex::compound(
                    format!("{}.abs() + 0.5", b.operand()),
                    b.ty.clone(),
                    Dom::new(b.dom.grid.max(1), b.dom.mag + 0.5),
                );
                let d = a.dom.join(b.dom);
                Body::binary(shape, f, &a, "%", &b, d)
            }
            5 => {
                let (a, b) = self.operands(shape, f, depth);
                let m = if self.coin(0.5) { "maximum" } else { "minimum" };
                let d = a.dom.join(b.dom);
                Body::method(shape, f, &a, &format!("{m}({})", b.code), d)
            }
            6 => self.f32_unary(shape, depth),
            7 => self.select(shape, f, depth),
            8 => {
                let a = self.tensor(shape, f, depth);
                let lo = self.pick(&[-2.0, -1.0, -0.5, 0.0]);
                let hi = self.pick(&[0.5, 1.0, 4.0]);
                let d = Dom::new(a.dom.grid.max(1), a.dom.mag.clamp(2.0, 4.0));
                Body::method(
                    shape,
                    f,
                    &a,
                    &format!("clamp({}, {})", float_lit(lo), float_lit(hi)),
                    d,
                )
            }
            9 => self.with_rust_value(shape, depth),
            10 => {
                let a = self.tensor(shape, f, depth);
                let (c, g) = if self.coin(0.5) { (2.0, 1) } else { (4.0, 2) };
                let d = Dom::new(a.dom.grid + g, a.dom.mag / c);
                let c = Ex::atom(float_lit(c), Ty::Float, Dom::new(0, c));
                let a = if d.exact() { a } else { self.fit(a, F32_VAR) };
                let d = Dom::new(a.dom.grid + g, a.dom.mag);
                Body::binary(shape, f, &a, "/", &c, d)
            }
            11 if shape.len() == 2 => {
                // Operands a bf16 rounding keeps (for `tpu_kernel`s), few
                // enough terms for an exact sum.
                let k = self.pick(&[1, 2, 3, 5]);
                let small = Dom::new(3, 8.0);
                let a = self.tensor(&[shape[0], k], f, depth);
                let a = self.fit(a, small);
                let b = self.tensor(&[k, shape[1]], f, depth);
                let b = self.fit(b, small);
                let d = Body::matmul_dom(a.dom.join(b.dom), k);
                Body::method(shape, f, &a, &format!("matmul({})", b.code), d)
            }
            _ => {
                let from = if self.coin(0.7) {
                    Elem::S32
                } else {
                    Elem::Pred
                };
                let a = self.tensor(shape, from, depth);
                let a = self.fit(a, S32_VAR);
                let d = Dom::new(0, a.dom.mag);
                Body::method(shape, f, &a, "cast(F32)", d)
            }
        }
    }

    fn f32_unary(&mut self, shape: &[usize], depth: u32) -> Ex {
        let f = Elem::F32;
        let a = self.tensor(shape, f, depth);
        let (call, d) = match self.below(8) {
            0 => return Ex::compound(format!("-{}", a.operand()), a.ty.clone(), a.dom),
            1 => ("abs()", a.dom),
            2 => ("floor()", Dom::new(0, a.dom.mag + 1.0)),
            3 => ("ceil()", Dom::new(0, a.dom.mag + 1.0)),
            4 => ("round()", Dom::new(0, a.dom.mag + 1.0)),
            5 => ("relu()", a.dom),
            6 => ("sign()", BIT),
            _ => {
                let a = self.fit(a, F32_VAR);
                let d = Dom::new(a.dom.grid * 2, a.dom.mag * a.dom.mag);
                return Body::method(shape, f, &a, "square()", d);
            }
        };
        Body::method(shape, f, &a, call, d)
    }

    /// `pred.select(a, b)`.
    fn select(&mut self, shape: &[usize], elem: Elem, depth: u32) -> Ex {
        let ps = self.broadcast_shape(shape);
        let p = self.tensor(&ps, Elem::Pred, depth);
        let a = self.tensor(shape, elem, depth);
        let bs = self.broadcast_shape(shape);
        let b = self.tensor(&bs, elem, depth);
        let d = a.dom.join(b.dom);
        Body::method(
            shape,
            elem,
            &p,
            &format!("select({}, {})", a.code, b.code),
            d,
        )
    }

    /// An f32 tensor combined with a Rust value (a static argument, a Rust
    /// variable or a loop counter of an unrolled loop).
    fn with_rust_value(&mut self, shape: &[usize], depth: u32) -> Ex {
        let f = Elem::F32;
        let a = self.tensor(shape, f, depth);
        let a = self.fit(a, F32_VAR);
        if self.coin(0.5) {
            let r = self.float_ex(1);
            let d = Dom::new(a.dom.grid + r.dom.grid, a.dom.mag * r.dom.mag);
            Body::binary(shape, f, &a, "*", &r, d)
        } else {
            let n = self.usize_ex(8, 1);
            let d = Dom::new(a.dom.grid, a.dom.mag + n.dom.mag);
            Body::binary(shape, f, &a, "+", &n, d)
        }
    }

    fn s32_op(&mut self, shape: &[usize], depth: u32) -> Ex {
        let s = Elem::S32;
        match self.below(11) {
            0 | 1 => {
                let (a, b) = self.operands(shape, s, depth);
                let op = if self.coin(0.5) { "+" } else { "-" };
                let (a, b, d) = self.exact_pair(a, b, |x, y| Dom::new(0, x.mag + y.mag));
                Body::binary(shape, s, &a, op, &b, d)
            }
            2 => {
                let (a, b) = self.operands(shape, s, depth);
                let (a, b, d) = self.exact_pair(a, b, |x, y| Dom::new(0, x.mag * y.mag));
                Body::binary(shape, s, &a, "*", &b, d)
            }
            3 => {
                let (a, b) = self.operands(shape, s, depth);
                let m = if self.coin(0.5) { "maximum" } else { "minimum" };
                let d = a.dom.join(b.dom);
                Body::method(shape, s, &a, &format!("{m}({})", b.code), d)
            }
            4 => {
                let a = self.tensor(shape, s, depth);
                if self.coin(0.5) {
                    Ex::compound(format!("-{}", a.operand()), a.ty.clone(), a.dom)
                } else {
                    Body::method(shape, s, &a, "abs()", a.dom)
                }
            }
            5 => {
                let a = self.tensor(shape, s, depth);
                let c = self.pick(&[2i64, 3, 5]);
                let op = if self.coin(0.5) { "%" } else { "/" };
                let d = if op == "%" {
                    Dom::new(0, a.dom.mag.min((c - 1) as f64))
                } else {
                    a.dom
                };
                Body::binary(
                    shape,
                    s,
                    &a,
                    op,
                    &Ex::atom(c.to_string(), Ty::Usize, Dom::new(0, c as f64)),
                    d,
                )
            }
            6 => {
                let a = self.tensor(shape, Elem::F32, depth);
                let a = self.fit(a, F32_VAR);
                Body::method(shape, s, &a, "cast(S32)", Dom::new(0, a.dom.mag))
            }
            7 => {
                let a = self.tensor(shape, Elem::Pred, depth);
                Body::method(shape, s, &a, "cast(S32)", BIT)
            }
            8 => self.select(shape, s, depth),
            9 => {
                let a = self.tensor(shape, s, depth);
                let a = self.fit(a, S32_VAR);
                let c = self.pick(&[1i64, 2, 3, -1]);
                let op = self.pick(&["+", "*"]);
                let d = if op == "+" {
                    Dom::new(0, a.dom.mag + 3.0)
                } else {
                    Dom::new(0, a.dom.mag * 3.0)
                };
                Body::binary(
                    shape,
                    s,
                    &a,
                    op,
                    &Ex::atom(c.to_string(), Ty::Usize, Dom::new(0, 3.0)),
                    d,
                )
            }
            _ => {
                let a = self.tensor(shape, s, depth);
                let lo = self.pick(&[-3i64, 0, 1]);
                let hi = self.pick(&[2i64, 4, 7]);
                Body::method(
                    shape,
                    s,
                    &a,
                    &format!("clamp({lo}, {hi})"),
                    Dom::new(0, 7.0),
                )
            }
        }
    }

    pub(crate) fn pred_op(&mut self, shape: &[usize], depth: u32) -> Ex {
        let p = Elem::Pred;
        match self.below(8) {
            0..=3 => {
                let el = if self.coin(0.6) { Elem::F32 } else { Elem::S32 };
                let a = self.tensor(shape, el, depth);
                let b = if self.coin(0.4) {
                    if el == Elem::F32 {
                        let c = self.pick(&[0.0, 0.5, -1.0, 2.0]);
                        Ex::atom(float_lit(c), Ty::Float, const_dom(c))
                    } else {
                        let c = self.pick(&[0i64, 1, 2, -1]);
                        Ex::atom(c.to_string(), Ty::Usize, Dom::new(0, 2.0))
                    }
                } else {
                    let bs = self.broadcast_shape(shape);
                    self.tensor(&bs, el, depth)
                };
                let op = self.pick(&["<", "<=", ">", ">=", "==", "!="]);
                Body::binary(shape, p, &a, op, &b, BIT)
            }
            4 => {
                let (a, b) = self.operands(shape, p, depth);
                let op = self.pick(&["&", "|", "^"]);
                Body::binary(shape, p, &a, op, &b, BIT)
            }
            5 => {
                let a = self.tensor(shape, p, depth);
                Ex::compound(format!("!{}", a.operand()), a.ty.clone(), BIT)
            }
            6 => {
                let a = self.tensor(shape, p, depth);
                let b = self.tensor(shape, p, depth);
                let op = if self.coin(0.5) { "&&" } else { "||" };
                Body::binary(shape, p, &a, op, &b, BIT)
            }
            _ => self.select(shape, p, depth),
        }
    }
}
