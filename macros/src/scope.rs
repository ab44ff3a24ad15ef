//! Syntactic facts about a block that the rewrite needs: which outer
//! variables it assigns (the state a traced branch or loop carries) and
//! whether it leaves early (`return`, `?`, `break`, `continue`).

use std::collections::BTreeSet;

use proc_macro2::Span;
use syn::visit::Visit;
use syn::{Expr, Ident, Pat};

/// The variables a block assigns that are declared outside it, in order
/// of first assignment. Scoping follows Rust's: a name refers to a local of
/// the block only after the `let` that declares it and inside that `let`'s
/// block, so `acc = acc + 1.0; let acc = ..;` and a `let acc` in a nested
/// block both leave the assignment to the outer `acc`.
pub fn assigned_outer(block: &syn::Block) -> Vec<Ident> {
    let mut v = Assigned::default();
    v.visit_block(block);
    v.order
}

/// The same for an expression (an `else` branch).
pub fn assigned_outer_expr(e: &Expr) -> Vec<Ident> {
    let mut v = Assigned::default();
    v.visit_expr(e);
    v.order
}

#[derive(Default)]
struct Assigned {
    order: Vec<Ident>,
    seen: BTreeSet<String>,
    /// The names declared so far in each open scope, innermost last.
    scopes: Vec<BTreeSet<String>>,
}

impl Assigned {
    fn declared(&self, name: &str) -> bool {
        self.scopes.iter().any(|s| s.contains(name))
    }

    /// Runs `f` in a new scope.
    fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.push(BTreeSet::new());
        f(self);
        self.scopes.pop();
    }

    fn target(&mut self, e: &Expr) {
        match e {
            Expr::Path(p) => {
                if let Some(id) = p.path.get_ident() {
                    let name = id.to_string();
                    if !self.declared(&name) && self.seen.insert(name) {
                        self.order.push(id.clone());
                    }
                }
            }
            Expr::Field(f) => self.target(&f.base),
            Expr::Index(i) => self.target(&i.expr),
            Expr::Paren(p) => self.target(&p.expr),
            Expr::Tuple(t) => t.elems.iter().for_each(|e| self.target(e)),
            Expr::Array(a) => a.elems.iter().for_each(|e| self.target(e)),
            _ => {}
        }
    }

    /// Declares the names `p` binds in the innermost scope.
    fn bind(&mut self, p: &Pat) {
        match p {
            Pat::Ident(i) => {
                if let Some(s) = self.scopes.last_mut() {
                    s.insert(i.ident.to_string());
                }
                if let Some((_, sub)) = &i.subpat {
                    self.bind(sub);
                }
            }
            Pat::Tuple(t) => t.elems.iter().for_each(|p| self.bind(p)),
            Pat::TupleStruct(t) => t.elems.iter().for_each(|p| self.bind(p)),
            Pat::Struct(s) => s.fields.iter().for_each(|f| self.bind(&f.pat)),
            Pat::Slice(s) => s.elems.iter().for_each(|p| self.bind(p)),
            Pat::Reference(r) => self.bind(&r.pat),
            Pat::Type(t) => self.bind(&t.pat),
            Pat::Or(o) => o.cases.iter().for_each(|p| self.bind(p)),
            Pat::Paren(p) => self.bind(&p.pat),
            _ => {}
        }
    }
}

impl<'ast> Visit<'ast> for Assigned {
    fn visit_block(&mut self, b: &'ast syn::Block) {
        self.scoped(|v| syn::visit::visit_block(v, b));
    }

    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        // The value is evaluated before the place is assigned.
        self.visit_expr(&a.right);
        self.visit_expr(&a.left);
        self.target(&a.left);
    }

    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        use syn::BinOp::*;
        syn::visit::visit_expr_binary(self, b);
        if matches!(
            b.op,
            AddAssign(_)
                | SubAssign(_)
                | MulAssign(_)
                | DivAssign(_)
                | RemAssign(_)
                | BitXorAssign(_)
                | BitAndAssign(_)
                | BitOrAssign(_)
                | ShlAssign(_)
                | ShrAssign(_)
        ) {
            self.target(&b.left);
        }
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        // `let x = x + 1;` reads the outer `x`: the pattern binds after the
        // initializer (and its `else`).
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
        }
        self.bind(&l.pat);
    }

    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.scoped(|v| {
            v.bind(&f.pat);
            v.visit_block(&f.body);
        });
    }

    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.scoped(|v| {
            c.inputs.iter().for_each(|p| v.bind(p));
            v.visit_expr(&c.body);
        });
    }

    fn visit_arm(&mut self, a: &'ast syn::Arm) {
        self.scoped(|v| {
            v.bind(&a.pat);
            if let Some((_, guard)) = &a.guard {
                v.visit_expr(guard);
            }
            v.visit_expr(&a.body);
        });
    }

    fn visit_expr_if(&mut self, i: &'ast syn::ExprIf) {
        // `if let` binds in the then-branch only.
        self.scoped(|v| {
            v.visit_expr(&i.cond);
            v.visit_block(&i.then_branch);
        });
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
    }

    fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
        self.scoped(|v| {
            v.visit_expr(&w.cond);
            v.visit_block(&w.body);
        });
    }

    fn visit_expr_let(&mut self, l: &'ast syn::ExprLet) {
        self.visit_expr(&l.expr);
        self.bind(&l.pat);
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

/// Where a block leaves early, if it does: the first `return`, `?`,
/// `.await`, or `break`/`continue` that does not stay inside a loop (or
/// labeled block) of its own.
pub fn early_exit(block: &syn::Block) -> Option<(Span, &'static str)> {
    let mut v = Exit::default();
    v.visit_block(block);
    v.found
}

/// The same for an expression.
pub fn early_exit_expr(e: &Expr) -> Option<(Span, &'static str)> {
    let mut v = Exit::default();
    v.visit_expr(e);
    v.found
}

#[derive(Default)]
struct Exit {
    found: Option<(Span, &'static str)>,
    loop_depth: usize,
    /// The labels of the loops and blocks entered inside the analyzed code:
    /// a `break 'a` to one of them stays inside.
    labels: Vec<String>,
}

impl Exit {
    fn hit(&mut self, span: Span, what: &'static str) {
        if self.found.is_none() {
            self.found = Some((span, what));
        }
    }

    /// Whether a `break`/`continue` (to `label`, if any) leaves the code.
    fn leaves(&self, label: Option<&syn::Lifetime>) -> bool {
        match label {
            Some(l) => !self.labels.contains(&l.ident.to_string()),
            None => self.loop_depth == 0,
        }
    }

    /// Visits the body of a loop (or labeled block, `is_loop` false).
    fn inside(&mut self, label: Option<&syn::Label>, is_loop: bool, body: &syn::Block) {
        if let Some(l) = label {
            self.labels.push(l.name.ident.to_string());
        }
        self.loop_depth += usize::from(is_loop);
        self.visit_block(body);
        self.loop_depth -= usize::from(is_loop);
        if label.is_some() {
            self.labels.pop();
        }
    }
}

impl<'ast> Visit<'ast> for Exit {
    fn visit_expr_return(&mut self, r: &'ast syn::ExprReturn) {
        self.hit(r.return_token.span, "return");
    }
    fn visit_expr_try(&mut self, t: &'ast syn::ExprTry) {
        self.hit(t.question_token.span, "?");
        syn::visit::visit_expr_try(self, t);
    }
    fn visit_expr_await(&mut self, a: &'ast syn::ExprAwait) {
        self.hit(a.await_token.span, ".await");
    }
    fn visit_expr_break(&mut self, b: &'ast syn::ExprBreak) {
        if self.leaves(b.label.as_ref()) {
            self.hit(b.break_token.span, "break");
        }
        syn::visit::visit_expr_break(self, b);
    }
    fn visit_expr_continue(&mut self, c: &'ast syn::ExprContinue) {
        if self.leaves(c.label.as_ref()) {
            self.hit(c.continue_token.span, "continue");
        }
    }
    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.inside(f.label.as_ref(), true, &f.body);
    }
    fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
        self.visit_expr(&w.cond);
        self.inside(w.label.as_ref(), true, &w.body);
    }
    fn visit_expr_loop(&mut self, l: &'ast syn::ExprLoop) {
        self.inside(l.label.as_ref(), true, &l.body);
    }
    fn visit_expr_block(&mut self, b: &'ast syn::ExprBlock) {
        self.inside(b.label.as_ref(), false, &b.block);
    }
    fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {}
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}
