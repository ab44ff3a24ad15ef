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
use super::types::{
    axes_lit, const_dom, float_lit, shape_lit, Dom, Elem, Ex, Ty, BIT, F32_VAR, S32_VAR,
};

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
        if ex.dom.grid > dom.grid {
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

    fn method(shape: &[usize], elem: Elem, a: &Ex, call: &str, dom: Dom) -> Ex {
        Ex::atom(
            format!("{}.{call}", a.operand()),
            Ty::tensor(shape, elem),
            dom,
        )
    }

    fn f32_op(&mut self, shape: &[usize], depth: u32) -> Ex {
        let f = Elem::F32;
        match self.below(12) {
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
                    // A literal on the left is typed: `2.0 * x` leaves the
                    // literal's type to inference, which a method called on
                    // the product cannot wait for.
                    let c = Ex::atom(format!("{}f32", float_lit(c)), Ty::Float, const_dom(c));
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
                let lhs = Ex::atom(format!("{}f32", float_lit(c)), Ty::Float, cd);
                let c = Ex::atom(float_lit(c), Ty::Float, cd);
                match self.below(3) {
                    0 => Body::binary(shape, f, &a, "+", &c, d),
                    1 => Body::binary(shape, f, &a, "-", &c, d),
                    _ => Body::binary(shape, f, &lhs, "-", &a, d),
                }
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

    /// A constant (or iota) of `shape` and `elem`.
    pub(crate) fn constant(&mut self, shape: &[usize], elem: Elem) -> Ex {
        let ty = Ty::tensor(shape, elem);
        if !shape.is_empty() && elem != Elem::Pred && self.coin(0.3) {
            let axis = self.below(shape.len());
            let d = Dom::new(0, shape[axis] as f64);
            return Ex::atom(
                format!(
                    "Tensor::iota({}, {axis}, {})",
                    shape_lit(shape),
                    elem.dtype()
                ),
                ty,
                d,
            );
        }
        let c = match elem {
            Elem::F32 => self.pick(&[0.0, 0.5, -1.5, 2.0, 0.125]),
            Elem::S32 => self.pick(&[0.0, 1.0, -2.0, 3.0]),
            Elem::Pred => self.pick(&[0.0, 1.0]),
        };
        let d = const_dom(c);
        if shape.is_empty() {
            Ex::atom(
                format!("Tensor::scalar({}, {})", float_lit(c), elem.dtype()),
                ty,
                d,
            )
        } else {
            Ex::atom(
                format!(
                    "Tensor::full({}, {}, {})",
                    shape_lit(shape),
                    float_lit(c),
                    elem.dtype()
                ),
                ty,
                d,
            )
        }
    }

    /// A variable read (whole, indexed, sliced, reduced, reshaped, ...) or
    /// a constant, of `shape` and `elem`.
    pub(crate) fn leaf(&mut self, shape: &[usize], elem: Elem) -> Ex {
        let mut cands = self.reads(shape, elem);
        if cands.is_empty() || self.coin(0.1) {
            return self.constant(shape, elem);
        }
        // Whole reads of the right type first: they keep data flowing.
        let direct: Vec<Ex> = cands
            .iter()
            .filter(|e| e.atom && !e.code.contains(['.', '[', '(']))
            .cloned()
            .collect();
        if !direct.is_empty() && self.coin(0.5) {
            cands = direct;
        }
        self.pick(&cands)
    }

    /// The reads of visible tensors that give `shape` and `elem`.
    fn reads(&mut self, shape: &[usize], elem: Elem) -> Vec<Ex> {
        let mut out = Vec::new();
        let indices: Vec<String> = self
            .tensors()
            .into_iter()
            .filter(|v| v.ty == Ty::tensor(&[], Elem::S32))
            .map(|v| v.name)
            .collect();
        for v in self.tensors() {
            let Ty::Tensor {
                shape: vs,
                elem: ve,
            } = &v.ty
            else {
                continue;
            };
            let mut found: Vec<(String, Dom)> = Vec::new();
            let name = v.name.clone();
            if vs == shape {
                found.push((name.clone(), v.dom));
            }
            // One axis dropped by an index (static or traced).
            for ax in 0..vs.len() {
                let mut rest = vs.clone();
                let n = rest.remove(ax);
                if rest != shape {
                    continue;
                }
                let k = self.below(n) as i64 - if self.coin(0.2) { n as i64 } else { 0 };
                let item = if !indices.is_empty() && self.coin(0.4) {
                    self.pick(&indices)
                } else {
                    k.to_string()
                };
                found.push((index_code(&name, vs.len(), ax, &item), v.dom));
                if ve != &Elem::Pred {
                    let (call, d) = match self.below(3) {
                        0 => ("sum", Dom::new(v.dom.grid, v.dom.mag * n as f64)),
                        1 => ("max", v.dom),
                        _ => ("min", v.dom),
                    };
                    found.push((format!("{name}.{call}({})", axes_lit(&[ax])), d));
                } else {
                    let call = if self.coin(0.5) { "any" } else { "all" };
                    found.push((format!("{name}.{call}({})", axes_lit(&[ax])), v.dom));
                }
            }
            if shape.is_empty() && vs.len() > 1 {
                let all: Vec<usize> = (0..vs.len()).collect();
                let n: usize = vs.iter().product();
                if ve == &Elem::Pred {
                    found.push((format!("{name}.any({})", axes_lit(&all)), v.dom));
                } else {
                    found.push((
                        format!("{name}.sum({})", axes_lit(&all)),
                        Dom::new(v.dom.grid, v.dom.mag * n as f64),
                    ));
                }
                let items: Vec<String> = vs.iter().map(|&d| self.below(d).to_string()).collect();
                found.push((format!("{name}[({})]", items.join(", ")), v.dom));
            }
            if vs.len() == 2 && shape == [vs[1], vs[0]] {
                found.push((format!("{name}.transpose(&[1, 0])"), v.dom));
            }
            // A window along one axis (static, or traced with `ds`).
            if vs.len() == shape.len() && vs != shape {
                let diff: Vec<usize> = (0..vs.len()).filter(|&a| vs[a] != shape[a]).collect();
                if let [ax] = diff[..] {
                    if vs[ax] > shape[ax] {
                        let len = shape[ax];
                        let item = if !indices.is_empty() && self.coin(0.4) {
                            let i = self.pick(&indices);
                            format!("ds({i}, {len})")
                        } else {
                            let lo = self.below(vs[ax] - len + 1);
                            format!("{lo}..{}", lo + len)
                        };
                        found.push((index_code(&name, vs.len(), ax, &item), v.dom));
                    }
                }
            }
            if vs.is_empty() && !shape.is_empty() {
                found.push((format!("{name}.broadcast_to({})", shape_lit(shape)), v.dom));
            }
            let count = |s: &[usize]| s.iter().product::<usize>();
            if vs != shape && !vs.is_empty() && !shape.is_empty() && count(vs) == count(shape) {
                let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
                found.push((format!("{name}.reshape(&[{}])", dims.join(", ")), v.dom));
            }
            for (code, dom) in found {
                let ex = Ex::atom(code, Ty::tensor(shape, *ve), dom);
                out.push(self.convert(ex, elem));
            }
        }
        out
    }

    /// `ex` cast to `elem` if it has another element type.
    fn convert(&mut self, ex: Ex, elem: Elem) -> Ex {
        let from = ex.elem();
        if from == elem {
            return ex;
        }
        let shape = ex.shape().to_vec();
        let d = match (from, elem) {
            (_, Elem::Pred) => BIT,
            (Elem::Pred, _) => BIT,
            _ => Dom::new(0, ex.dom.mag + 1.0),
        };
        let ex = if from == Elem::F32 {
            self.fit(ex, F32_VAR)
        } else {
            ex
        };
        Body::method(&shape, elem, &ex, &format!("cast({})", elem.dtype()), d)
    }
}

/// `name[item]` with `item` on axis `ax` of a rank-`rank` tensor (earlier
/// axes taken whole).
pub(crate) fn index_code(name: &str, rank: usize, ax: usize, item: &str) -> String {
    if ax == 0 && rank > 0 {
        format!("{name}[{item}]")
    } else {
        let mut items = vec![".."; ax];
        items.push(item);
        format!("{name}[({})]", items.join(", "))
    }
}
