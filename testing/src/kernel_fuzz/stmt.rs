//! Statements of a kernel body: `let`s, assignments (whole and indexed),
//! `if`/`else if`/`else` on tensor and Rust conditions (as statements or
//! values), `for` loops over ranges with Rust or tensor bounds (traced),
//! `while` loops on tensor conditions with a bounded count, `#[unroll]`
//! and iterator loops (Rust loops), and Rust variables.

use super::body::{Body, MAX_DEPTH, MAX_MUTABLE, MAX_WORK};
use super::rust_values::FLOAT_VAR;
use super::types::{Dom, Elem, Ex, Ty, Var};

/// The most variables a traced branch or loop may carry (the tuple arity
/// of `Carry`).
const MAX_CARRIED: usize = 8;

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
            0..=19 => self.let_tensor(false),
            20..=39 => self.assign(),
            40..=45 => self.index_assign(),
            46..=55 if nest => self.if_stmt(true),
            56..=61 if nest => self.if_stmt(false),
            62..=72 if nest => self.traced_for(),
            73..=79 if nest => self.traced_while(),
            80..=85 if nest => self.rust_for(),
            86..=88 if nest => self.collect_loop(),
            89..=93 => self.rust_let(),
            94..=99 => self.rust_update(),
            _ => self.let_tensor(false),
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
    fn new_name(&mut self, prefix: &str) -> String {
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

    fn assignable_tensors(&self) -> Vec<Var> {
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
    fn traced_index(&mut self) -> Option<String> {
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
        let target = super::expr::index_code(&v.name, shape.len(), ax, &item);
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
        let value = self.coin(0.3).then(|| (self.shape(), self.elem()));
        let name = value.as_ref().map(|_| self.new_name("v"));
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
            let head = match (&name, links) {
                (Some(n), 0) => format!("let {n} = if {}", cond.code),
                (None, 0) => format!("if {}", cond.code),
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
        self.braced(head, barrier, |b| {
            b.block(n);
            if let Some((shape, elem)) = value {
                let ex = b.tensor(shape, *elem, 3);
                let ex = b.fit(ex, Body::var_dom(*elem));
                b.line(ex.code);
            }
        });
    }

    /// A mutable tensor declared outside the next block (declared now if
    /// there is none), which that block assigns.
    fn carrier(&mut self) -> Var {
        let vars = self.assignable_tensors();
        if vars.is_empty() || self.coin(0.15) {
            self.let_tensor(true);
        }
        let vars = self.assignable_tensors();
        self.pick(&vars)
    }

    /// The body of a traced loop: statements that assign `carrier`
    /// (which they may not shadow), or others when they already assign
    /// outer variables.
    fn loop_body(&mut self, carrier: &Var, trips: usize, tail: Option<String>) {
        let n = 1 + self.below(4);
        self.protected.push(carrier.name.clone());
        self.work *= trips.max(1);
        self.block(n);
        if !self.scope.assigns_outer() || self.coin(0.3) {
            self.assign_to(carrier);
        }
        if let Some(t) = tail {
            self.line(t);
        }
        self.work /= trips.max(1);
        self.protected.pop();
    }

    /// `for i in lo..hi { .. }` (one XLA while), bounds from literals, Rust
    /// values, tensors in scope or an enclosing loop's index.
    fn traced_for(&mut self) {
        if self.work * 2 > MAX_WORK || self.scope.mutable_tensors() >= MAX_CARRIED {
            return self.let_tensor(false);
        }
        let carrier = self.carrier();
        let small: Vec<Var> = self
            .tensors()
            .into_iter()
            .filter(|v| v.ty == Ty::tensor(&[], Elem::S32) && v.dom.mag <= 6.0)
            .collect();
        let budget = (MAX_WORK / self.work).min(6);
        let (range, trips, mag) = match self.below(6) {
            0 => {
                let n = self.below(budget.min(4) + 1);
                (format!("0..{n}"), n, n as f64)
            }
            1 => {
                let lo = self.below(3);
                let hi = lo + self.below(budget.min(3) + 1);
                (format!("{lo}..={hi}"), hi + 1 - lo, hi as f64)
            }
            2 => {
                let n = self.usize_ex(budget.min(4), 1);
                let m = n.dom.mag;
                (format!("0..{}", n.operand()), m as usize, m)
            }
            3 | 4 if !small.is_empty() && budget >= 6 => {
                let t = self.pick(&small);
                let m = t.dom.mag;
                if self.coin(0.5) {
                    (format!("0..{}", t.name), m as usize, m)
                } else {
                    let lo = self.below(2);
                    (format!("{lo}..{}", t.name), m as usize, m)
                }
            }
            _ => {
                let hi = self.below(budget.min(4) + 1);
                (
                    format!("{}..{hi}", -(self.below(2) as i64)),
                    hi + 1,
                    hi as f64,
                )
            }
        };
        let pat = if self.coin(0.2) {
            "_".to_string()
        } else {
            self.fresh("i")
        };
        self.braced(&format!("for {pat} in {range}"), true, |b| {
            if pat != "_" {
                b.scope.declare(Var {
                    name: pat.clone(),
                    ty: Ty::tensor(&[], Elem::S32),
                    dom: Dom::new(0, mag.max(1.0)),
                    mutable: false,
                    locked: true,
                });
            }
            b.loop_body(&carrier, trips, None);
        });
        self.close("}");
    }

    /// `while c < limit [&& cond] { ..; c = c + 1; }` (one XLA while).
    fn traced_while(&mut self) {
        if self.work * 4 > MAX_WORK || self.scope.mutable_tensors() >= MAX_CARRIED - 1 {
            return self.let_tensor(false);
        }
        let carrier = self.carrier();
        let c = self.fresh("c");
        let (limit, trips) = match self.below(3) {
            0 => {
                let n = 1 + self.below(4);
                (n.to_string(), n)
            }
            1 => {
                let n = self.usize_ex(4, 1);
                (n.operand(), 4)
            }
            _ => {
                let small: Vec<Var> = self
                    .tensors()
                    .into_iter()
                    .filter(|v| v.ty == Ty::tensor(&[], Elem::S32) && v.dom.mag <= 4.0)
                    .collect();
                if small.is_empty() {
                    ("3".to_string(), 3)
                } else {
                    (self.pick(&small).name, 4)
                }
            }
        };
        self.line(format!("let mut {c} = Tensor::scalar(0.0, S32);"));
        let bound = if self.coin(0.5) {
            format!("{c} < {limit}")
        } else {
            format!("!({c} >= {limit})")
        };
        let cond = match self.below(3) {
            0 => bound,
            1 => format!("{bound} && {}", self.tensor_cond().operand()),
            _ => format!("{} && ({bound})", self.tensor_cond().operand()),
        };
        self.scope.declare(Var {
            name: c.clone(),
            ty: Ty::tensor(&[], Elem::S32),
            dom: Dom::new(0, 1024.0),
            mutable: true,
            locked: true,
        });
        self.braced(&format!("while {cond}"), true, |b| {
            b.protected.push(c.clone());
            b.loop_body(&carrier, trips, Some(format!("{c} = {c} + 1;")));
            b.scope.note_assign(&c);
            b.protected.pop();
        });
        self.close("}");
    }

    /// `#[unroll] for k in 0..n` or a loop over a Rust iterator: run while
    /// tracing.
    fn rust_for(&mut self) {
        let budget = MAX_WORK / self.work;
        if budget < 2 {
            return self.let_tensor(false);
        }
        let n = 1 + self.below(budget.min(3));
        let k = self.fresh("k");
        let (head, w) = if self.coin(0.6) {
            let bound = if self.coin(0.5) {
                format!("{n}usize")
            } else {
                self.usize_ex(n, 1).operand()
            };
            self.line("#[unroll]");
            (format!("for {k} in 0..{bound}"), None)
        } else {
            let consts = [0.5, -1.0, 2.0, 1.5, -0.25];
            let items: Vec<String> = consts[..n]
                .iter()
                .map(|c| super::types::float_lit(*c))
                .collect();
            let w = self.fresh("w");
            let head = format!(
                "for ({k}, &{w}) in [{}f32].iter().enumerate()",
                items.join("f32, ")
            );
            (head, Some(w))
        };
        self.braced(&head, false, |b| {
            b.scope.declare(Var {
                name: k.clone(),
                ty: Ty::Usize,
                dom: Dom::new(0, (n - 1) as f64),
                mutable: false,
                locked: true,
            });
            if let Some(w) = &w {
                b.scope.declare(Var {
                    name: w.clone(),
                    ty: Ty::Float,
                    dom: Dom::new(2, 2.0),
                    mutable: false,
                    locked: true,
                });
            }
            b.work *= n;
            let m = 1 + b.below(3);
            b.block(m);
            b.work /= n;
        });
        self.close("}");
    }

    /// `let mut parts = Vec::new(); for k in 0..n { parts.push(..) }` and
    /// their concatenation: a Rust loop that assigns nothing.
    fn collect_loop(&mut self) {
        let shapes: Vec<Vec<usize>> = self
            .shapes
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        if shapes.is_empty() {
            return self.let_tensor(false);
        }
        let shape = self.pick(&shapes);
        let elem = self.elem();
        let n = 1 + self.below(3);
        let (parts, k) = (self.fresh("parts"), self.fresh("k"));
        self.line(format!("let mut {parts} = Vec::new();"));
        let (_, dom) = self.braced(&format!("for {k} in 0..{n}usize"), false, |b| {
            b.scope.declare(Var {
                name: k.clone(),
                ty: Ty::Usize,
                dom: Dom::new(0, (n - 1) as f64),
                mutable: false,
                locked: true,
            });
            let ex = b.tensor(&shape, elem, 2);
            b.line(format!("{parts}.push({});", ex.code));
            ex.dom
        });
        self.close("}");
        let name = self.new_name("v");
        self.line(format!("let {name} = concat(&{parts}, 0);"));
        let mut out = shape.clone();
        out[0] *= n;
        self.scope.declare(Var {
            name,
            ty: Ty::tensor(&out, elem),
            dom,
            mutable: false,
            locked: false,
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
            .filter(|v| !matches!(v.ty, Ty::Tensor { .. }))
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
            _ if !shape.is_empty() => {
                let ax = self.below(shape.len());
                (format!("{x}.mean(&[{ax}])"), shape[ax])
            }
            _ => (format!("{x}.exp()"), 1),
        }
    }
}
