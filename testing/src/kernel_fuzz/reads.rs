//! The leaves of tensor expressions: constants, iotas, and reads of the
//! variables in scope (whole, indexed with static or traced indices,
//! sliced, windowed with `ds`, reduced, transposed, reshaped, broadcast,
//! cast), and calls of the closures in scope.

use super::body::Body;
use super::types::{
    axes_lit, const_dom, float_lit, shape_lit, Dom, Elem, Ex, Ty, BIT, F32_VAR, S32_VAR,
};

impl Body {
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
        if self.coin(0.15) {
            if let Some(call) = self.closure_call(shape, elem) {
                return call;
            }
        }
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

    /// The reads of visible tensors (and tuple and array components) that
    /// give `shape` and `elem`.
    fn reads(&mut self, shape: &[usize], elem: Elem) -> Vec<Ex> {
        let mut out = Vec::new();
        let indices: Vec<String> = self
            .tensors()
            .into_iter()
            .filter(|v| v.ty == Ty::tensor(&[], Elem::S32))
            .map(|v| v.name)
            .collect();
        for v in self.places() {
            let (vs, ve) = (&v.shape, &v.elem);
            let mut found: Vec<(String, Dom)> = Vec::new();
            // Reads giving positions (s32) rather than `v`'s values.
            let mut positions: Vec<(String, Dom)> = Vec::new();
            let name = v.code.clone();
            if vs == shape {
                found.push((name.clone(), v.dom));
                if !vs.is_empty() && ve != &Elem::Pred && self.coin(0.3) {
                    // Sorting keeps the values (ties and NaNs in an order
                    // both sides must agree on).
                    let ax = self.below(vs.len());
                    let desc = self.coin(0.5);
                    found.push((format!("{name}.sort({ax}, {desc})"), v.dom));
                }
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
                if ve != &Elem::Pred && self.coin(0.3) {
                    let call = if self.coin(0.5) { "argmax" } else { "argmin" };
                    positions.push((format!("{name}.{call}({ax})"), Dom::new(0, n as f64)));
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
                if *ve == Elem::F32 && !dom.exact() {
                    // A sum f32 might round: not a value to read further.
                    continue;
                }
                let ex = Ex::atom(code, Ty::tensor(shape, *ve), dom);
                out.push(self.convert(ex, elem));
            }
            for (code, dom) in positions {
                let ex = Ex::atom(code, Ty::tensor(shape, Elem::S32), dom);
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
        let ex = match from {
            Elem::F32 => self.fit(ex, F32_VAR),
            Elem::S32 => self.fit(ex, S32_VAR),
            Elem::Pred => ex,
        };
        let d = match (from, elem) {
            (_, Elem::Pred) | (Elem::Pred, _) => BIT,
            _ => Dom::new(0, ex.dom.mag + 1.0),
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
