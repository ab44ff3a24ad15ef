//! The body rewrite: the Rust syntax that cannot be overloaded for tensors
//! becomes calls into `tessel::lang`, where the operand types decide between
//! plain Rust and tracing.
//!
//! | written | becomes |
//! |---|---|
//! | `a < b`, `a == b`, ... | `lang::lt(&a, &b)`, ... |
//! | `a && b`, `a \|\| b` | `lang::and(a, \|\| b)` (still short-circuits on `bool`) |
//! | `x[i] = v` | `lang::Target(&mut x).assign(i, v)` |
//! | `if c { .. } else { .. }` | a branch driver chosen by the type of `c` |
//! | `while c { .. }` | a loop driver chosen by the type of `c` |
//! | `x[i]` (a read) | `*x.__tessel_read(i)`: a tensor window by value, or `Index` on Rust values |
//! | `for p in src { .. }` assigning outer variables | a driver chosen by the type of `src`: a `LoopSource` (ranges, `blocks`, `grid`, ...) is one traced loop, any other iterator a Rust loop (`#[unroll]` always keeps a Rust loop) |

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{BinOp, Expr, Ident};

use crate::paths;
use crate::scope::{assigned_outer, assigned_outer_expr, early_exit, early_exit_expr};

/// Rewrites a kernel body in place, collecting errors.
pub struct Rewriter {
    pub errors: Vec<syn::Error>,
}

fn tuple(vars: &[Ident]) -> TokenStream {
    quote!((#(#vars,)*))
}

fn refs(vars: &[Ident]) -> TokenStream {
    quote!((#(&#vars,)*))
}

fn union(mut a: Vec<Ident>, b: Vec<Ident>) -> Vec<Ident> {
    for i in b {
        if !a.iter().any(|x| x == &i) {
            a.push(i);
        }
    }
    a
}

/// `(a, b,) = value;`, or just `value;` when there is no state. The
/// assignment may be overwritten before it is read (a body that assigns a
/// carried variable first), which is not the user's doing: no warning.
fn assign_state(span: Span, vars: &[Ident], value: TokenStream) -> TokenStream {
    if vars.is_empty() {
        quote_spanned!(span=> #value;)
    } else {
        let t = tuple(vars);
        quote_spanned!(span=> #[allow(unused_assignments)] let () = { #t = #value; };)
    }
}

/// `(a, b,) = DRIVER.METHOD((a, b,));` (or the bare call when there is no state).
fn step(span: Span, vars: &[Ident], driver: &str, method: &str) -> TokenStream {
    let (d, m) = (Ident::new(driver, span), Ident::new(method, span));
    let state = tuple(vars);
    assign_state(span, vars, quote_spanned!(span=> #d.#m(#state)))
}

/// The block every `for` that assigns outer variables becomes: the type
/// of the source picks the driver (`TracedFor` for a `LoopSource`, which
/// yields its index once inside one XLA while; `RustFor` for any other
/// iterator, which yields every item), and the loop is written once.
fn for_loop(
    span: Span,
    source: TokenStream,
    vars: &[Ident],
    pat: &syn::Pat,
    body: &syn::Block,
) -> TokenStream {
    let state = tuple(vars);
    let enter = assign_state(span, vars, quote_spanned!(span=> __tessel_s));
    let finish = step(span, vars, "__tessel_lp", "end_body");
    let dsl = paths::dsl(span);
    quote_spanned! {span=>
        {
            #[allow(unused_imports)]
            use #dsl::{RustFor as _, TracedFor as _};
            let mut __tessel_lp = (&#dsl::ForSource::new(#source)).driver();
            loop {
                let (__tessel_s, __tessel_i) = __tessel_lp.next(#state);
                #enter
                #[allow(unused_variables)]
                let ::core::option::Option::Some(#pat) = __tessel_i else {
                    break;
                };
                #body
                #finish
            }
        }
    }
}

/// `+=`, `-=`, ...: the left side is a place.
fn is_compound_assign(op: &BinOp) -> bool {
    matches!(
        op,
        BinOp::AddAssign(_)
            | BinOp::SubAssign(_)
            | BinOp::MulAssign(_)
            | BinOp::DivAssign(_)
            | BinOp::RemAssign(_)
            | BinOp::BitXorAssign(_)
            | BinOp::BitAndAssign(_)
            | BinOp::BitOrAssign(_)
            | BinOp::ShlAssign(_)
            | BinOp::ShrAssign(_)
    )
}

/// A number literal, possibly negated (`2`, `0.5`, `-1.0`).
fn is_number(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => matches!(l.lit, syn::Lit::Int(_) | syn::Lit::Float(_)),
        Expr::Unary(u) => matches!(u.op, syn::UnOp::Neg(_)) && is_number(&u.expr),
        Expr::Paren(p) => is_number(&p.expr),
        _ => false,
    }
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

impl Rewriter {
    fn error(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, msg));
    }

    fn rewrite_compare(&mut self, b: &syn::ExprBinary) -> Option<TokenStream> {
        let dsl = paths::dsl(b.op.span());
        // A number literal on the left goes to the right, the comparison
        // mirrored (`0.0 < x` is `x > 0.0`): a tensor on the left then finds
        // `Cmp`'s inherent methods, whose result is a tensor whatever the
        // literal's type, so a method called on it compiles (with the
        // literal on the left its type, f32 or f64, was still open there).
        let mirror = is_number(&b.left) && !is_number(&b.right);
        let f = match (b.op, mirror) {
            (BinOp::Lt(_), false) | (BinOp::Gt(_), true) => "cmp_lt",
            (BinOp::Le(_), false) | (BinOp::Ge(_), true) => "cmp_le",
            (BinOp::Gt(_), false) | (BinOp::Lt(_), true) => "cmp_gt",
            (BinOp::Ge(_), false) | (BinOp::Le(_), true) => "cmp_ge",
            (BinOp::Eq(_), _) => "cmp_eq",
            (BinOp::Ne(_), _) => "cmp_ne",
            (BinOp::And(_) | BinOp::Or(_), _) => {
                if early_exit_expr(&b.right).is_some() {
                    return None;
                }
                let f = Ident::new(
                    if matches!(b.op, BinOp::And(_)) {
                        "and"
                    } else {
                        "or"
                    },
                    b.op.span(),
                );
                let (l, r) = (&b.left, &b.right);
                return Some(quote_spanned!(b.op.span()=> #dsl::#f(#l, || #r)));
            }
            _ => return None,
        };
        let (l, r) = if mirror {
            (&b.right, &b.left)
        } else {
            (&b.left, &b.right)
        };
        let f = Ident::new(f, b.op.span());
        Some(quote_spanned! {b.op.span()=>
            {
                #[allow(unused_imports)]
                use #dsl::ComparePlain as _;
                #dsl::Cmp(&(#l)).#f(&(#r))
            }
        })
    }

    fn rewrite_if(&mut self, e: &mut syn::ExprIf) -> TokenStream {
        if binds_pattern(&e.cond) {
            // `if let` matches a Rust value against a pattern: a decision
            // made while tracing, kept as written.
            self.visit_expr_mut(&mut e.cond);
            self.visit_block_mut(&mut e.then_branch);
            if let Some((_, x)) = e.else_branch.as_mut() {
                self.visit_expr_mut(x);
            }
            return quote!(#e);
        }
        let vars = union(
            assigned_outer(&e.then_branch),
            e.else_branch
                .as_ref()
                .map(|(_, x)| assigned_outer_expr(x))
                .unwrap_or_default(),
        );
        let exit = early_exit(&e.then_branch)
            .or_else(|| e.else_branch.as_ref().and_then(|(_, x)| early_exit_expr(x)));
        self.visit_expr_mut(&mut e.cond);
        self.visit_block_mut(&mut e.then_branch);
        if let Some((_, x)) = e.else_branch.as_mut() {
            self.visit_expr_mut(x);
        }
        let cond = &e.cond;
        let then = &e.then_branch;
        let span = e.if_token.span;
        let dsl = paths::dsl(span);
        if exit.is_some() {
            // Leaves early: only a Rust bool can decide it.
            let otherwise = e.else_branch.as_ref().map(|(_, x)| quote!(else #x));
            return quote_spanned!(span=> if #dsl::static_condition(#cond) #then #otherwise);
        }
        let otherwise = match &e.else_branch {
            Some((_, x)) => quote!(#x),
            None => quote!({}),
        };
        let state = tuple(&vars);
        let saved = refs(&vars);
        let restore = assign_state(
            span,
            &vars,
            quote_spanned!(span=> __tessel_br.leave_then(#state, &__tessel_tv, __tessel_saved)),
        );
        let merge = if vars.is_empty() {
            quote!()
        } else {
            assign_state(span, &vars, quote_spanned!(span=> __tessel_s))
        };
        quote_spanned! {span=>
            {
                let __tessel_c = #cond;
                #[allow(unused_mut)]
                let mut __tessel_br = #dsl::Condition::branch(&__tessel_c);
                let __tessel_saved = __tessel_br.save(#saved);
                #[allow(unused_braces)]
                let __tessel_tv = if __tessel_br.enter_then() {
                    ::core::option::Option::Some(#then)
                } else {
                    ::core::option::Option::None
                };
                #restore
                #[allow(unused_braces)]
                let __tessel_ev = if __tessel_br.enter_else() {
                    ::core::option::Option::Some(#otherwise)
                } else {
                    ::core::option::Option::None
                };
                let (__tessel_s, __tessel_v) = __tessel_br.finish(#state, __tessel_tv, __tessel_ev);
                #merge
                __tessel_v
            }
        }
    }

    fn rewrite_while(&mut self, w: &mut syn::ExprWhile) -> TokenStream {
        let vars = assigned_outer(&w.body);
        let exit = early_exit(&w.body);
        self.visit_expr_mut(&mut w.cond);
        self.visit_block_mut(&mut w.body);
        let (cond, body, label) = (&w.cond, &w.body, &w.label);
        let span = w.while_token.span;
        let dsl = paths::dsl(span);
        if exit.is_some() || label.is_some() {
            return quote_spanned!(span=> #label while #dsl::static_condition(#cond) #body);
        }
        let enter_cond = step(span, &vars, "__tessel_wl", "enter_cond");
        let enter_body = step(span, &vars, "__tessel_wl", "enter_body");
        let leave_body = step(span, &vars, "__tessel_wl", "leave_body");
        quote_spanned! {span=>
            {
                let __tessel_probe = #cond;
                #[allow(unused_mut)]
                let mut __tessel_wl = #dsl::LoopCondition::driver(&__tessel_probe);
                let mut __tessel_first = ::core::option::Option::Some(__tessel_probe);
                loop {
                    #enter_cond
                    let __tessel_c = match __tessel_first.take() {
                        ::core::option::Option::Some(c) if __tessel_wl.reuse_probe() => c,
                        _ => #cond,
                    };
                    if !__tessel_wl.test(__tessel_c) {
                        break;
                    }
                    #enter_body
                    #body
                    #leave_body
                    if __tessel_wl.done() {
                        break;
                    }
                }
            }
        }
    }

    fn rewrite_for(&mut self, f: &mut syn::ExprForLoop) -> Option<TokenStream> {
        if has_attr(&f.attrs, "unroll") {
            f.attrs.retain(|a| !a.path().is_ident("unroll"));
            self.visit_expr_mut(&mut f.expr);
            self.visit_block_mut(&mut f.body);
            return None;
        }
        let vars = assigned_outer(&f.body);
        if vars.is_empty() {
            // Assigns nothing outside: nothing to carry, so it runs while tracing.
            self.visit_expr_mut(&mut f.expr);
            self.visit_block_mut(&mut f.body);
            return None;
        }
        let span = f.for_token.span;
        let exit = early_exit(&f.body);
        let source = match &*f.expr {
            Expr::Range(range) => {
                // The range syntax always drives a traced loop.
                if let Some((s, what)) = exit {
                    self.error(
                        s,
                        format!(
                            "`{what}` cannot leave a traced loop: `for` over a range that assigns outer variables \
                             becomes one XLA while. Write `#[unroll] for ...` to run the loop while tracing, or carry \
                             a flag and test it"
                        ),
                    );
                }
                if f.label.is_some() {
                    self.error(
                        span,
                        "a traced `for` loop cannot have a label; write `#[unroll]` for a Rust loop",
                    );
                }
                self.range_source(&range.clone())?
            }
            _ => {
                self.visit_expr_mut(&mut f.expr);
                let src = &f.expr;
                if exit.is_some() || f.label.is_some() {
                    // Leaves early: a Rust loop, unless the source's type
                    // drives a traced loop (then a compile error).
                    self.visit_block_mut(&mut f.body);
                    let (label, pat, body) = (&f.label, &f.pat, &f.body);
                    let dsl = paths::dsl(src.span());
                    let iter = quote_spanned! {src.span()=>
                        {
                            #[allow(unused_imports)]
                            use #dsl::{RustForEarly as _, TracedForEarly as _};
                            (&#dsl::ForSource::new(#src)).rust_iter()
                        }
                    };
                    return Some(quote_spanned!(span=> #label for #pat in #iter #body));
                }
                quote!(#src)
            }
        };
        self.visit_block_mut(&mut f.body);
        Some(for_loop(span, source, &vars, &f.pat, &f.body))
    }

    /// `::tessel::lang::RangeLoop::new(lo, hi)` for the range syntax
    /// `lo..hi` (or `new_inclusive` for `lo..=hi`).
    fn range_source(&mut self, range: &syn::ExprRange) -> Option<TokenStream> {
        let lo = match &range.start {
            Some(s) => {
                let mut s = (**s).clone();
                self.visit_expr_mut(&mut s);
                quote!(#s)
            }
            None => quote!(0),
        };
        let Some(end) = &range.end else {
            self.error(
                range.span(),
                "a traced `for` loop needs an end: write `lo..hi`, or `#[unroll]` for a Rust loop",
            );
            return None;
        };
        let mut hi = (**end).clone();
        self.visit_expr_mut(&mut hi);
        let ctor = match range.limits {
            syn::RangeLimits::HalfOpen(_) => quote!(new),
            syn::RangeLimits::Closed(_) => quote!(new_inclusive),
        };
        let dsl = paths::dsl(range.span());
        Some(quote_spanned!(range.span()=> #dsl::RangeLoop::#ctor(#lo, #hi)))
    }
}

impl VisitMut for Rewriter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        let new: Option<TokenStream> = match e {
            Expr::Binary(b) if is_compound_assign(&b.op) => {
                self.visit_place_mut(&mut b.left);
                self.visit_expr_mut(&mut b.right);
                None
            }
            Expr::Binary(b) => {
                self.visit_expr_mut(&mut b.left);
                self.visit_expr_mut(&mut b.right);
                self.rewrite_compare(b)
            }
            Expr::Assign(a) if matches!(&*a.left, Expr::Index(_)) => {
                self.visit_expr_mut(&mut a.right);
                let Expr::Index(ix) = &mut *a.left else {
                    return;
                };
                self.visit_place_mut(&mut ix.expr);
                self.visit_expr_mut(&mut ix.index);
                let (base, index, value) = (&ix.expr, &ix.index, &a.right);
                let dsl = paths::dsl(a.eq_token.span);
                // As Rust evaluates `x[i] = v`: the value, then the index,
                // then the place; so both may read `x` (`x[i] = x[j] * 2.0`).
                Some(quote_spanned! {a.eq_token.span=>
                    {
                        let __tessel_value = #value;
                        let __tessel_index = #index;
                        #[allow(unused_imports)]
                        use #dsl::AssignPlain as _;
                        #dsl::Target(&mut #base).assign(__tessel_index, __tessel_value)
                    }
                })
            }
            Expr::Assign(a) => {
                self.visit_place_mut(&mut a.left);
                self.visit_expr_mut(&mut a.right);
                None
            }
            Expr::Reference(r) if r.mutability.is_some() => {
                self.visit_place_mut(&mut r.expr);
                None
            }
            Expr::Index(ix) => {
                // A read: `x[i]` becomes `*x.__tessel_read(i)`: a tensor
                // read by value (nothing allocated; an inherent method, found
                // first) or any other value through `Index` (`IndexPlain`),
                // auto-dereferenced as Rust's indexing is.
                self.visit_expr_mut(&mut ix.expr);
                self.visit_expr_mut(&mut ix.index);
                let (base, index) = (&ix.expr, &ix.index);
                let span = ix.bracket_token.span.join();
                Some(quote_spanned!(span=> (*(#base).__tessel_read(#index))))
            }
            Expr::If(i) => Some(self.rewrite_if(i)),
            Expr::While(w) => Some(self.rewrite_while(w)),
            Expr::ForLoop(f) => self.rewrite_for(f),
            Expr::Async(a) => {
                self.error(
                    a.async_token.span,
                    "a kernel body cannot contain `async` blocks: it is traced synchronously",
                );
                None
            }
            Expr::Unsafe(u) => {
                self.error(
                    u.unsafe_token.span,
                    "a kernel body cannot contain `unsafe` blocks: tensor ops are safe; do raw work outside the kernel",
                );
                None
            }
            _ => {
                syn::visit_mut::visit_expr_mut(self, e);
                None
            }
        };
        if let Some(tokens) = new {
            match syn::parse2::<Expr>(tokens) {
                Ok(x) => *e = x,
                Err(err) => self.errors.push(err),
            }
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

impl Rewriter {
    /// Rewrites a kernel body: its statements, and a `use` of the plain
    /// indexing read (`tessel::lang::IndexPlain`) at its top,
    /// so that `x[i]` on a non-tensor reads through `Index` as a place.
    pub fn rewrite_body(&mut self, body: &mut syn::Block) {
        self.visit_block_mut(body);
        let dsl = paths::dsl_here();
        let prelude: syn::Stmt = syn::parse_quote! {
            #[allow(unused_imports)]
            use #dsl::IndexPlain as _;
        };
        body.stmts.insert(0, prelude);
    }

    /// Visits a place that is assigned or borrowed mutably (`x[i]`,
    /// `v[i].field`, `(x[i])`): its indexing stays Rust's `IndexMut`, while
    /// the index expressions inside are visited as reads.
    fn visit_place_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::Index(ix) => {
                self.visit_place_mut(&mut ix.expr);
                self.visit_expr_mut(&mut ix.index);
            }
            Expr::Field(f) => self.visit_place_mut(&mut f.base),
            Expr::Paren(p) => self.visit_place_mut(&mut p.expr),
            _ => self.visit_expr_mut(e),
        }
    }
}

/// Whether an `if` condition binds a pattern (`if let`, or a chain with one).
fn binds_pattern(cond: &Expr) -> bool {
    match cond {
        Expr::Let(_) => true,
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => {
            binds_pattern(&b.left) || binds_pattern(&b.right)
        }
        Expr::Paren(p) => binds_pattern(&p.expr),
        _ => false,
    }
}
