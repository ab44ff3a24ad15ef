//! Statements of a kernel body: `let`s, assignments (whole and indexed),
//! `if`/`else if`/`else` on tensor and Rust conditions (as statements, or
//! as the value of a `let` or an assignment), `match` on Rust values,
//! early exits (`return`, `break`, `continue`), Rust variables, and the
//! kernel's results. Loops are in `loops.rs`.

use super::body::{Body, MAX_DEPTH, MAX_MUTABLE};
use super::rust_values::FLOAT_VAR;
use super::types::{Dom, Elem, Ex, Ty, Var};

/// The most variables a traced branch or loop may carry (the tuple arity
/// of `Carry`).
pub(crate) const MAX_CARRIED: usize = 8;

impl Body {
    /// Writes `n` statements.
    pub(crate) fn block(&mut self, n: usize) {
        for _ in 0..n {
            self.stmt();
        }
    }

    fn stmt(&mut self) {
        let nest = self.depth < MAX_DEPTH;
        match self.below(100) {
            0..=17 => self.let_tensor(false),
            18..=35 => self.assign(),
            36..=41 => self.index_assign(),
            42..=50 if nest => self.if_stmt(true),
            51..=56 if nest => self.if_stmt(false),
            57..=66 if nest => self.traced_for(),
            67..=72 if nest => self.traced_while(),
            73..=77 if nest => self.rust_for(),
            78..=80 if nest => self.rust_while(),
            81..=83 if nest => self.collect_loop(),
            84..=85 => self.closure_let(),
            86 if nest => self.match_stmt(),
            87..=88 => self.early_exit(),
            89 => {
                if self.coin(0.5) {
                    self.aggregate_let()
                } else {
                    self.aggregate_assign()
                }
            }
            90 if nest => self.tile_loop(),
            91..=94 => self.rust_let(),
            95..=99 => self.rust_update(),
            _ => self.let_tensor(false),
        }
    }

    /// `if <bool> { break; }` (or `continue`) in a Rust loop, or `if <bool>
    /// { return ..; }` outside traced bodies.
    pub(crate) fn early_exit(&mut self) {
        let cond = self.bool_ex(2).code;
        let exit = if self.can_break && self.coin(0.7) {
            let (label, cont) = if !self.labels.is_empty() && self.coin(0.4) {
                let (l, c) = self.pick(&self.labels.clone());
                (format!(" {l}"), c)
            } else {
                (String::new(), self.can_continue)
            };
            if cont && self.coin(0.4) {
                format!("continue{label};")
            } else {
                format!("break{label};")
            }
        } else if !self.scope.in_traced() && self.coin(0.5) {
            format!("return {};", self.ret_expr())
        } else {
            return self.let_tensor(false);
        };
        self.line(format!("if {cond} {{"));
        self.line(format!("    {exit}"));
        self.line("}");
    }

    /// `match <usize> { 0 => { .. } 1 | 2 => { .. } r => { .. } }`: Rust
    /// control flow whose last arm binds a name (now and then one in scope).
    fn match_stmt(&mut self) {
        let scrutinee = self.usize_ex(6, 2);
        self.line(format!("match {} {{", scrutinee.code));
        self.indent_by(1);
        let binding = self.new_name("r");
        for arm in ["0", "1 | 2", binding.as_str()] {
            let n = 1 + self.below(2);
            self.braced(&format!("{arm} =>"), false, |b| {
                if arm == binding {
                    b.scope.declare(Var {
                        name: binding.clone(),
                        ty: Ty::Usize,
                        dom: scrutinee.dom,
                        mutable: false,
                        locked: false,
                    });
                }
                b.block(n);
            });
            self.close("}");
        }
        self.indent_by(-1);
        self.close("}");
    }

    /// The kernel's results from tensors in scope (some through inexact
    /// ops): one, a tuple, or a `vec!`.
    pub(crate) fn ret_expr(&mut self) -> String {
        let tensors = self.tensors();
        let mutable: Vec<Var> = tensors.iter().filter(|v| v.mutable).cloned().collect();
        let mut outs = Vec::new();
        for i in 0..self.ret_count {
            let v = if !mutable.is_empty() && self.coin(0.7) {
                self.pick(&mutable)
            } else {
                self.pick(&tensors)
            };
            let (code, terms) = self.output(&v);
            if self.ret_terms.len() <= i {
                self.ret_terms.push(0);
            }
            self.ret_terms[i] = self.ret_terms[i].max(terms);
            outs.push(code);
        }
        match (self.ret_count, self.ret_vec) {
            (1, _) => outs.remove(0),
            (_, true) => format!("vec![{}]", outs.join(", ")),
            _ => format!("({})", outs.join(", ")),
        }
    }

    /// An element type, mostly f32.
    pub(crate) fn elem(&mut self) -> Elem {
        match self.below(10) {
            0..=5 => Elem::F32,
            6..=8 => Elem::S32,
            _ => Elem::Pred,
        }
    }

    /// A name for a new variable: fresh, or now and then one in scope
    /// (shadowing it) unless it is protected.
    pub(crate) fn new_name(&mut self, prefix: &str) -> String {
        if self.coin(0.12) {
            let names: Vec<String> = self
                .scope
                .visible()
                .into_iter()
                .map(|v| v.name)
                .filter(|n| n.starts_with(['v', 'r']) && !self.protected.contains(n))
                .collect();
            if !names.is_empty() {
                return self.pick(&names);
            }
        }
        self.fresh(prefix)
    }

    /// `let [mut] v = <tensor>;`
    pub(crate) fn let_tensor(&mut self, force_mut: bool) {
        let mutable = force_mut || (self.scope.mutable_tensors() < MAX_MUTABLE && self.coin(0.6));
        let shape = self.shape();
        let elem = self.elem();
        let ex = self.tensor(&shape, elem, 3);
        let (ex, dom) = if mutable {
            let d = Body::var_dom(elem);
            (self.fit(ex, d), d)
        } else {
            let d = ex.dom;
            (ex, d)
        };
        let name = self.new_name("v");
        let kw = if mutable { "let mut" } else { "let" };
        self.line(format!("{kw} {name} = {};", ex.code));
        self.scope.declare(Var {
            name,
            ty: Ty::tensor(&shape, elem),
            dom,
            mutable,
            locked: false,
        });
    }

    pub(crate) fn assignable_tensors(&self) -> Vec<Var> {
        self.scope
            .assignable()
            .into_iter()
            .filter(|v| matches!(v.ty, Ty::Tensor { .. }))
            .collect()
    }

    /// `v = <tensor of v's type>;`
    fn assign(&mut self) {
        let vars = self.assignable_tensors();
        if vars.is_empty() {
            return self.let_tensor(false);
        }
        let v = self.pick(&vars);
        self.assign_to(&v);
    }

    /// Assigns a new value to the tensor `v`.
    pub(crate) fn assign_to(&mut self, v: &Var) {
        let Ty::Tensor { shape, elem } = v.ty.clone() else {
            return;
        };
        let ex = self.tensor(&shape, elem, 3);
        let ex = self.fit(ex, v.dom);
        self.line(format!("{} = {};", v.name, ex.code));
        self.scope.note_assign(&v.name);
    }

    /// A traced scalar index in scope, if any.
    pub(crate) fn traced_index(&mut self) -> Option<String> {
        let idx: Vec<String> = self
            .tensors()
            .into_iter()
            .filter(|v| v.ty == Ty::tensor(&[], Elem::S32))
            .map(|v| v.name)
            .collect();
        (!idx.is_empty()).then(|| self.pick(&idx))
    }

    /// `v[index] = <tensor>;` on a window of `v`.
    fn index_assign(&mut self) {
        let vars: Vec<Var> = self
            .assignable_tensors()
            .into_iter()
            .filter(|v| !matches!(&v.ty, Ty::Tensor { shape, .. } if shape.is_empty()))
            .collect();
        if vars.is_empty() {
            return self.assign();
        }
        let v = self.pick(&vars);
        let Ty::Tensor { shape, elem } = v.ty.clone() else {
            return;
        };
        let traced = self.traced_index();
        let ax = self.below(shape.len());
        let n = shape[ax];
        let mut window = shape.clone();
        let item = match self.below(3) {
            0 if traced.is_some() => {
                window.remove(ax);
                traced.unwrap_or_default()
            }
            1 if n > 1 => {
                let len = 1 + self.below(n - 1);
                window[ax] = len;
                match traced {
                    Some(i) if self.coin(0.5) => format!("ds({i}, {len})"),
                    _ => {
                        let lo = self.below(n - len + 1);
                        format!("{lo}..{}", lo + len)
                    }
                }
            }
            _ => {
                window.remove(ax);
                let k = self.below(n) as i64;
                if self.coin(0.2) {
                    (k - n as i64).to_string()
                } else {
                    k.to_string()
                }
            }
        };
        let value_shape = if self.coin(0.2) { Vec::new() } else { window };
        let ex = self.tensor(&value_shape, elem, 2);
        let ex = self.fit(ex, v.dom);
        let target = super::reads::index_code(&v.name, shape.len(), ax, &item);
        self.line(format!("{target} = {};", ex.code));
        self.scope.note_assign(&v.name);
    }

    /// An `if` (with `else if`s and an `else` now and then), as a
    /// statement or as the value of a `let`; the first condition is a
    /// tensor when `traced`, later ones either.
    fn if_stmt(&mut self, traced: bool) {
        if traced && self.scope.mutable_tensors() > MAX_CARRIED - 1 {
            return self.let_tensor(false);
        }
        // The value: none, a new variable's, or an assigned variable's.
        let mut value = self.coin(0.3).then(|| (self.shape(), self.elem()));
        let mut name = value.as_ref().map(|_| self.new_name("v"));
        let mut assigned = None;
        let targets = self.assignable_tensors();
        if value.is_some() && !targets.is_empty() && self.coin(0.3) {
            let v = self.pick(&targets);
            if let Ty::Tensor { shape, elem } = &v.ty {
                value = Some((shape.clone(), *elem));
            }
            name = None;
            assigned = Some(v);
        }
        let mut barrier = false;
        let mut links = 0;
        loop {
            let cond_traced = if links == 0 { traced } else { self.coin(0.5) };
            let cond = if cond_traced {
                self.tensor_cond()
            } else {
                self.bool_ex(2)
            };
            barrier |= cond_traced;
            let head = match (&name, &assigned, links) {
                (Some(n), _, 0) => format!("let {n} = if {}", cond.code),
                (_, Some(v), 0) => format!("{} = if {}", v.name, cond.code),
                (None, _, 0) => format!("if {}", cond.code),
                _ => format!("}} else if {}", cond.code),
            };
            self.branch(&head, barrier, value.as_ref());
            links += 1;
            if links < 3 && self.coin(0.25) {
                continue;
            }
            if value.is_some() || self.coin(0.6) {
                self.branch("} else", barrier, value.as_ref());
            }
            break;
        }
        if let Some(v) = assigned {
            self.close("};");
            self.scope.note_assign(&v.name);
            return;
        }
        match (name, value) {
            (Some(name), Some((shape, elem))) => {
                self.close("};");
                self.scope.declare(Var {
                    name,
                    ty: Ty::tensor(&shape, elem),
                    dom: Body::var_dom(elem),
                    mutable: false,
                    locked: false,
                });
            }
            _ => self.close("}"),
        }
    }

    /// One branch: statements, then the value if the `if` has one.
    fn branch(&mut self, head: &str, barrier: bool, value: Option<&(Vec<usize>, Elem)>) {
        let n = 1 + self.below(3);
        let (brk, cont) = if barrier {
            (false, false)
        } else {
            (self.can_break, self.can_continue)
        };
        self.braced(head, barrier, |b| {
            b.with_exits(brk, cont, |b| b.block(n));
            if let Some((shape, elem)) = value {
                let ex = b.tensor(shape, *elem, 3);
                let ex = b.fit(ex, Body::var_dom(*elem));
                b.line(ex.code);
            }
        });
    }

    /// `let [mut] r: f32 = ..;` (or a `usize` or `bool`).
    fn rust_let(&mut self) {
        let mutable = self.coin(0.5);
        let (ty, ex, kw) = match self.below(3) {
            0 => {
                let e = self.float_ex(2);
                (Ty::Float, self.float_fit(e), "f32")
            }
            1 => (Ty::Usize, self.usize_ex(6, 2), "usize"),
            _ => (Ty::Bool, self.bool_ex(2), "bool"),
        };
        let name = self.new_name("r");
        let m = if mutable { "mut " } else { "" };
        self.line(format!("let {m}{name}: {kw} = {};", ex.code));
        let dom = match ty {
            Ty::Float if mutable => FLOAT_VAR,
            Ty::Usize if mutable => Dom::new(0, 6.0),
            _ => ex.dom,
        };
        self.scope.declare(Var {
            name,
            ty,
            dom,
            mutable,
            locked: false,
        });
    }

    /// An assignment to a Rust variable (plain or compound).
    fn rust_update(&mut self) {
        let vars: Vec<Var> = self
            .scope
            .assignable()
            .into_iter()
            .filter(|v| matches!(v.ty, Ty::Float | Ty::Usize | Ty::Bool))
            .collect();
        if vars.is_empty() {
            return self.rust_let();
        }
        let v = self.pick(&vars);
        let text = match v.ty {
            Ty::Float if self.coin(0.3) => format!("{} *= -1.0;", v.name),
            Ty::Float => {
                let e = self.float_ex(2);
                format!("{} = {};", v.name, self.float_fit(e).code)
            }
            Ty::Usize if self.coin(0.3) => format!("{} /= 2;", v.name),
            Ty::Usize => format!("{} = {};", v.name, self.usize_ex(6, 2).code),
            _ if self.coin(0.3) => format!("{} &= {};", v.name, self.bool_ex(1).operand()),
            _ => format!("{} = {};", v.name, self.bool_ex(2).code),
        };
        self.line(text);
        self.scope.note_assign(&v.name);
    }

    /// An output expression of the tensor `v` and the number of terms its
    /// inexact ops accumulate (0: exact).
    pub(crate) fn output(&mut self, v: &Var) -> (String, usize) {
        let Ty::Tensor { shape, elem } = &v.ty else {
            return (v.name.clone(), 0);
        };
        if *elem != Elem::F32 || self.coin(0.6) {
            return (v.name.clone(), 0);
        }
        let x = Ex::atom(v.name.clone(), v.ty.clone(), v.dom);
        let x = self.fit(x, super::types::F32_VAR).operand();
        match self.below(6) {
            0 => (format!("{x}.exp()"), 1),
            1 => (format!("{x}.tanh()"), 1),
            2 => (format!("{x}.sigmoid()"), 1),
            3 => (format!("({x}.abs() + 1.0).log()"), 1),
            4 => (format!("{x}.abs().sqrt()"), 1),
            5 if self.coin(0.5) => (format!("{x} / ({x}.abs() + 0.5)"), 1),
            _ if !shape.is_empty() => {
                let ax = self.below(shape.len());
                (format!("{x}.mean(&[{ax}])"), shape[ax])
            }
            _ => (format!("{x}.exp()"), 1),
        }
    }
}
