//! Tuples and arrays of tensors in a kernel body: declared, assigned whole
//! or by component (`p.1 = ..`, `arr[k] = ..`, which a traced branch or
//! loop carries as the whole tuple or array), and read by component
//! wherever a tensor variable is read.

use super::body::Body;
use super::types::{Dom, Elem, Ty, Var};

/// A tensor-valued place: a tensor variable, a tuple's component or an
/// array's element, as source text with its type and domain.
pub(crate) struct Place {
    pub code: String,
    pub shape: Vec<usize>,
    pub elem: Elem,
    pub dom: Dom,
}

impl Body {
    /// Every tensor-valued place in scope.
    pub(crate) fn places(&mut self) -> Vec<Place> {
        let mut out = Vec::new();
        for v in self.scope.visible() {
            match v.ty {
                Ty::Tensor { shape, elem } => out.push(Place {
                    code: v.name,
                    shape,
                    elem,
                    dom: v.dom,
                }),
                Ty::Tuple(parts) => {
                    for (i, (shape, elem)) in parts.into_iter().enumerate() {
                        out.push(Place {
                            code: format!("{}.{i}", v.name),
                            shape,
                            elem,
                            dom: Body::var_dom(elem),
                        });
                    }
                }
                Ty::Array { shape, elem, len } => {
                    let k = self.array_index(len);
                    out.push(Place {
                        code: format!("{}[{k}]", v.name),
                        shape,
                        elem,
                        dom: v.dom,
                    });
                }
                _ => {}
            }
        }
        out
    }

    /// A static index below `len`: a literal, or a Rust `usize` in scope
    /// known to be small enough.
    fn array_index(&mut self, len: usize) -> String {
        let small: Vec<Var> = self
            .rust_vars(&Ty::Usize)
            .into_iter()
            .filter(|v| (v.dom.mag as usize) < len)
            .collect();
        if !small.is_empty() && self.coin(0.4) {
            self.pick(&small).name
        } else {
            self.below(len).to_string()
        }
    }

    fn components(&mut self, parts: &[(Vec<usize>, Elem)]) -> Vec<String> {
        parts
            .iter()
            .map(|(shape, elem)| {
                let ex = self.tensor(shape, *elem, 2);
                self.fit(ex, Body::var_dom(*elem)).code
            })
            .collect()
    }

    /// `let mut p = (a, b);` or `let mut arr = [a, b, c];`.
    pub(crate) fn aggregate_let(&mut self) {
        let n = 2 + self.below(2);
        let name = self.new_name("v");
        let ty = if self.coin(0.5) {
            let parts: Vec<(Vec<usize>, Elem)> =
                (0..n).map(|_| (self.shape(), self.elem())).collect();
            let items = self.components(&parts);
            self.line(format!("let mut {name} = ({});", items.join(", ")));
            Ty::Tuple(parts)
        } else {
            let (shape, elem) = (self.shape(), self.elem());
            let parts = vec![(shape.clone(), elem); n];
            let items = self.components(&parts);
            self.line(format!("let mut {name} = [{}];", items.join(", ")));
            Ty::Array {
                shape,
                elem,
                len: n,
            }
        };
        // Each component is kept in its element type's domain.
        let dom = match &ty {
            Ty::Array { elem, .. } => Body::var_dom(*elem),
            _ => Dom::new(0, 0.0),
        };
        self.scope.declare(Var {
            name,
            ty,
            dom,
            mutable: true,
            locked: false,
        });
    }

    /// An assignment to a tuple or array in scope: a component, or the whole.
    pub(crate) fn aggregate_assign(&mut self) {
        let vars: Vec<Var> = self
            .scope
            .assignable()
            .into_iter()
            .filter(|v| matches!(v.ty, Ty::Tuple(_) | Ty::Array { .. }))
            .collect();
        if vars.is_empty() {
            return self.aggregate_let();
        }
        let v = self.pick(&vars);
        let text = match &v.ty {
            Ty::Tuple(parts) if self.coin(0.3) => {
                format!("{} = ({});", v.name, self.components(parts).join(", "))
            }
            Ty::Tuple(parts) => {
                let i = self.below(parts.len());
                let item = self.components(&parts[i..=i]).remove(0);
                format!("{}.{i} = {item};", v.name)
            }
            Ty::Array { shape, elem, len } => {
                let parts = vec![(shape.clone(), *elem)];
                let item = self.components(&parts).remove(0);
                let k = self.array_index(*len);
                format!("{}[{k}] = {item};", v.name)
            }
            _ => return,
        };
        self.line(text);
        self.scope.note_assign(&v.name);
    }
}
