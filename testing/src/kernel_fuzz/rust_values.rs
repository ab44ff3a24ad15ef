//! Rust values in a kernel body (known while tracing): `usize`, `f32` and
//! `bool` expressions over static arguments, Rust variables, loop counters
//! of unrolled loops and tensor shapes; and the conditions of branches and
//! loops, Rust or traced.

use super::body::Body;
use super::types::{const_dom, float_lit, Dom, Elem, Ex, Ty, BIT};

/// The domain every Rust `f32` variable is kept in.
pub(crate) const FLOAT_VAR: Dom = Dom { grid: 3, mag: 64.0 };

impl Body {
    /// A Rust `f32` expression.
    pub(crate) fn float_ex(&mut self, depth: u32) -> Ex {
        let vars = self.rust_vars(&Ty::Float);
        if depth == 0 || self.coin(0.4) {
            if !vars.is_empty() && self.coin(0.7) {
                let v = self.pick(&vars);
                return Ex::atom(v.name, Ty::Float, v.dom);
            }
            let c = self.pick(&[0.5, -1.0, 2.0, 0.25, 1.5]);
            let text = format!("{}f32", float_lit(c));
            return if c < 0.0 {
                Ex::compound(text, Ty::Float, const_dom(c))
            } else {
                Ex::atom(text, Ty::Float, const_dom(c))
            };
        }
        match self.below(4) {
            0 => {
                let a = self.float_ex(depth - 1);
                let c = self.pick(&[0.5, 2.0, -1.0]);
                let d = Dom::new(a.dom.grid + const_dom(c).grid, a.dom.mag * c.abs());
                Ex::compound(format!("{} * {}", a.operand(), float_lit(c)), Ty::Float, d)
            }
            1 => {
                let a = self.float_ex(depth - 1);
                let b = self.float_ex(depth - 1);
                let op = if self.coin(0.5) { "+" } else { "-" };
                let d = Dom::new(a.dom.grid.max(b.dom.grid), a.dom.mag + b.dom.mag);
                Ex::compound(
                    format!("{} {op} {}", a.operand(), b.operand()),
                    Ty::Float,
                    d,
                )
            }
            2 => {
                let n = self.usize_ex(8, depth - 1);
                Ex::compound(
                    format!("{} as f32", n.operand()),
                    Ty::Float,
                    Dom::new(0, n.dom.mag),
                )
            }
            _ => {
                let a = self.float_ex(depth - 1);
                if self.coin(0.5) {
                    Ex::compound(format!("-{}", a.operand()), Ty::Float, a.dom)
                } else {
                    Ex::atom(format!("{}.abs()", a.operand()), Ty::Float, a.dom)
                }
            }
        }
    }

    /// A Rust `f32` expression brought into [`FLOAT_VAR`].
    pub(crate) fn float_fit(&mut self, ex: Ex) -> Ex {
        let mut ex = ex;
        if ex.dom.grid > FLOAT_VAR.grid {
            ex = Ex::compound(
                format!("({} * 8.0).floor() / 8.0", ex.operand()),
                Ty::Float,
                Dom::new(FLOAT_VAR.grid, ex.dom.mag + 1.0),
            );
        }
        if ex.dom.mag > FLOAT_VAR.mag {
            ex = Ex::atom(
                format!("{}.clamp(-64.0, 64.0)", ex.operand()),
                Ty::Float,
                Dom::new(ex.dom.grid, FLOAT_VAR.mag),
            );
        }
        ex
    }

    /// A Rust `usize` expression whose value is at most `max`.
    pub(crate) fn usize_ex(&mut self, max: usize, depth: u32) -> Ex {
        let vars = self.rust_vars(&Ty::Usize);
        let tensors: Vec<(String, Vec<usize>)> = self
            .tensors()
            .into_iter()
            .filter_map(|v| match v.ty {
                Ty::Tensor { shape, .. } if !shape.is_empty() => Some((v.name, shape)),
                _ => None,
            })
            .collect();
        let ex = match self.below(if depth == 0 { 3 } else { 5 }) {
            0 if !vars.is_empty() => {
                let v = self.pick(&vars);
                Ex::atom(v.name, Ty::Usize, v.dom)
            }
            1 if !tensors.is_empty() => {
                let (name, shape) = self.pick(&tensors);
                let ax = self.below(shape.len());
                Ex::atom(
                    format!("{name}.dim({ax})"),
                    Ty::Usize,
                    Dom::new(0, shape[ax] as f64),
                )
            }
            3 => {
                let a = self.usize_ex(8, depth - 1);
                let b = self.usize_ex(8, depth - 1);
                Ex::compound(
                    format!("{} + {}", a.operand(), b.operand()),
                    Ty::Usize,
                    Dom::new(0, a.dom.mag + b.dom.mag),
                )
            }
            4 => {
                let a = self.usize_ex(8, depth - 1);
                let c = self.pick(&[2usize, 3]);
                if self.coin(0.5) {
                    Ex::compound(format!("{} / {c}", a.operand()), Ty::Usize, a.dom)
                } else {
                    Ex::compound(
                        format!("{} % {c}", a.operand()),
                        Ty::Usize,
                        Dom::new(0, (c - 1) as f64),
                    )
                }
            }
            _ => {
                let c = self.below(max.min(4) + 1);
                Ex::atom(c.to_string(), Ty::Usize, Dom::new(0, c as f64))
            }
        };
        if ex.dom.mag > max as f64 {
            Ex::atom(
                format!("{}.min({max})", ex.operand()),
                Ty::Usize,
                Dom::new(0, max as f64),
            )
        } else {
            ex
        }
    }

    /// A Rust `bool` expression.
    pub(crate) fn bool_ex(&mut self, depth: u32) -> Ex {
        let vars = self.rust_vars(&Ty::Bool);
        match self.below(if depth == 0 { 3 } else { 6 }) {
            0 if !vars.is_empty() => {
                let v = self.pick(&vars);
                Ex::atom(v.name, Ty::Bool, BIT)
            }
            1 => {
                let a = self.usize_ex(8, 1);
                let c = self.below(4);
                let op = self.pick(&["<", "<=", ">", ">=", "==", "!="]);
                Ex::compound(format!("{} {op} {c}", a.operand()), Ty::Bool, BIT)
            }
            2 => {
                let a = self.float_ex(1);
                let c = self.pick(&[0.0, 0.5, -1.0, 1.5]);
                let op = self.pick(&["<", ">=", ">"]);
                Ex::compound(
                    format!("{} {op} {}", a.operand(), float_lit(c)),
                    Ty::Bool,
                    BIT,
                )
            }
            3 => {
                let a = self.bool_ex(depth - 1);
                Ex::compound(format!("!{}", a.operand()), Ty::Bool, BIT)
            }
            4 => {
                let a = self.bool_ex(depth - 1);
                let b = self.bool_ex(depth - 1);
                let op = if self.coin(0.5) { "&&" } else { "||" };
                Ex::compound(
                    format!("{} {op} {}", a.operand(), b.operand()),
                    Ty::Bool,
                    BIT,
                )
            }
            _ => {
                let a = self.usize_ex(8, 1);
                Ex::compound(format!("{} % 2 == 0", a.operand()), Ty::Bool, BIT)
            }
        }
    }

    /// The condition of a traced branch or loop: a scalar `pred` tensor.
    pub(crate) fn tensor_cond(&mut self) -> Ex {
        if self.coin(0.85) {
            self.pred_op(&[], 2)
        } else {
            self.tensor(&[], Elem::Pred, 2)
        }
    }
}
