//! Loops of a kernel body: `for` over ranges with Rust or tensor bounds
//! and `while` on tensor conditions with a bounded count (each one XLA
//! while, assigning a variable declared outside), `#[unroll]` and iterator
//! loops and `while` on a Rust condition (Rust loops run while tracing,
//! now and then left early with `break` or `continue`), and a loop that
//! collects tensors into a `Vec` for `concat`.

use super::body::{Body, MAX_WORK};
use super::stmt::MAX_CARRIED;
use super::types::{Dom, Elem, Ty, Var};

impl Body {
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
        self.with_exits(false, false, |b| b.block(n));
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
    pub(crate) fn traced_for(&mut self) {
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
    pub(crate) fn traced_while(&mut self) {
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
    pub(crate) fn rust_for(&mut self) {
        let budget = MAX_WORK / self.work;
        if budget < 2 {
            return self.let_tensor(false);
        }
        let n = 1 + self.below(budget.min(3));
        let k = self.fresh("k");
        let label = self.label();
        let (head, w) = if self.coin(0.6) {
            let bound = if self.coin(0.5) {
                format!("{n}usize")
            } else {
                self.usize_ex(n, 1).operand()
            };
            self.line("#[unroll]");
            (format!("{label}for {k} in 0..{bound}"), None)
        } else {
            let consts = [0.5, -1.0, 2.0, 1.5, -0.25];
            let items: Vec<String> = consts[..n]
                .iter()
                .map(|c| super::types::float_lit(*c))
                .collect();
            let w = self.fresh("w");
            let head = format!(
                "{label}for ({k}, &{w}) in [{}f32].iter().enumerate()",
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
            b.with_exits(true, true, |b| {
                b.labeled(&label, true, |b| b.exits_around(m))
            });
            b.work /= n;
        });
        self.close("}");
    }

    /// Now and then a label for a Rust loop (`'l7: `), else nothing.
    fn label(&mut self) -> String {
        if self.coin(0.3) {
            format!("{}: ", self.fresh("'l"))
        } else {
            String::new()
        }
    }

    /// Runs `f` with the loop label `label` (as [`Body::label`] wrote it)
    /// available to `break` (and `continue` when `cont`).
    fn labeled(&mut self, label: &str, cont: bool, f: impl FnOnce(&mut Body)) {
        let name = label.trim_end_matches(": ").to_string();
        if !name.is_empty() {
            self.labels.push((name, cont));
        }
        f(self);
        if !label.is_empty() {
            self.labels.pop();
        }
    }

    /// `m` statements of a Rust loop's body, now and then with a `break`
    /// or `continue` before or after them.
    fn exits_around(&mut self, m: usize) {
        if self.coin(0.15) {
            self.early_exit();
        }
        self.block(m);
        if self.coin(0.15) {
            self.early_exit();
        }
    }

    /// `let mut m = 0usize; while m < n { ..; m += 1; }`: a Rust loop.
    pub(crate) fn rust_while(&mut self) {
        let budget = MAX_WORK / self.work;
        if budget < 2 {
            return self.let_tensor(false);
        }
        let n = 1 + self.below(budget.min(3));
        let m = self.fresh("m");
        let bound = if self.coin(0.5) {
            n.to_string()
        } else {
            self.usize_ex(n, 1).operand()
        };
        self.line(format!("let mut {m} = 0usize;"));
        self.scope.declare(Var {
            name: m.clone(),
            ty: Ty::Usize,
            dom: Dom::new(0, n as f64),
            mutable: true,
            locked: true,
        });
        let cond = if self.coin(0.3) {
            format!("{m} < {bound} && {}", self.bool_ex(1).operand())
        } else {
            format!("{m} < {bound}")
        };
        let label = self.label();
        self.braced(&format!("{label}while {cond}"), false, |b| {
            b.work *= n;
            let k = 1 + b.below(3);
            b.with_exits(true, false, |b| {
                b.labeled(&label, false, |b| b.exits_around(k))
            });
            b.line(format!("{m} += 1;"));
            b.scope.note_assign(&m);
            b.work /= n;
        });
        self.close("}");
    }

    /// `let mut parts = Vec::new(); for k in 0..n { parts.push(..) }` and
    /// their concatenation: a Rust loop that assigns nothing.
    pub(crate) fn collect_loop(&mut self) {
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
}
