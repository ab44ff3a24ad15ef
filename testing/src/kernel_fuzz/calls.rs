//! Closures in a kernel body: `let f = move |a: Tensor| <expr>;` or with a
//! block body of statements (the rewrite reaches into closure bodies, and a closure defined outside a
//! traced loop or branch may be called inside it), and their calls as
//! leaves of tensor expressions.

use super::body::Body;
use super::types::{Dom, Elem, Ex, Ty, Var};

impl Body {
    /// `let f = move |a: Tensor| <expr of a and captured values>;`
    pub(crate) fn closure_let(&mut self) {
        let (arg_shape, arg_elem) = (self.shape(), self.elem());
        let (ret_shape, ret_elem) = (self.shape(), self.elem());
        let (name, param) = (self.fresh("f"), self.fresh("a"));
        let param_var = Var {
            name: param.clone(),
            ty: Ty::tensor(&arg_shape, arg_elem),
            dom: Body::var_dom(arg_elem),
            mutable: false,
            locked: true,
        };
        let dom = if self.coin(0.4) && self.depth + 1 < super::body::MAX_DEPTH {
            // A block body: statements (traced branches and loops too),
            // assigning only its own variables, then the result.
            self.line(format!("let {name} = move |{param}: Tensor| {{"));
            self.indent_by(1);
            self.depth += 1;
            self.scope.push_closure();
            self.scope.declare(param_var);
            let n = 1 + self.below(3);
            let ex = self.with_exits(false, false, |b| {
                b.block(n);
                let ex = b.tensor(&ret_shape, ret_elem, 2);
                b.fit(ex, Body::var_dom(ret_elem))
            });
            self.line(&ex.code);
            self.scope.pop();
            self.depth -= 1;
            self.indent_by(-1);
            self.close("};");
            ex.dom
        } else {
            self.scope.push_closure();
            self.scope.declare(param_var);
            // Calls inside a closure's own body would need another closure's
            // argument; keep expression bodies to reads and ops.
            let calls = std::mem::replace(&mut self.no_calls, true);
            let ex = self.tensor(&ret_shape, ret_elem, 2);
            self.no_calls = calls;
            self.scope.pop();
            self.line(format!("let {name} = move |{param}: Tensor| {};", ex.code));
            ex.dom
        };
        self.scope.declare(Var {
            name,
            ty: Ty::Closure {
                arg: (arg_shape, arg_elem),
                ret: (ret_shape, ret_elem),
            },
            dom,
            mutable: false,
            locked: true,
        });
    }

    /// A call of a closure in scope returning `shape` and `elem`, if there
    /// is one (and calls are allowed here).
    pub(crate) fn closure_call(&mut self, shape: &[usize], elem: Elem) -> Option<Ex> {
        if self.no_calls {
            return None;
        }
        let fs: Vec<Var> = self
            .scope
            .visible()
            .into_iter()
            .filter(|v| matches!(&v.ty, Ty::Closure { ret, .. } if ret.0 == shape && ret.1 == elem))
            .collect();
        if fs.is_empty() {
            return None;
        }
        let f = self.pick(&fs);
        let Ty::Closure { arg, .. } = &f.ty else {
            return None;
        };
        self.no_calls = true;
        let a = self.tensor(&arg.0, arg.1, 1);
        self.no_calls = false;
        let a = self.fit(a, Body::var_dom(arg.1));
        Some(Ex::atom(
            format!("{}({})", f.name, a.code),
            Ty::tensor(shape, elem),
            f.dom,
        ))
    }

    /// The domain of a product `a.matmul(b)` over `k` terms of operands
    /// in `d`.
    pub(crate) fn matmul_dom(d: Dom, k: usize) -> Dom {
        Dom::new(d.grid * 2, d.mag * d.mag * k as f64)
    }
}
