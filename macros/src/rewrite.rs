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
//! | `for i in lo..hi { .. }` assigning outer variables | one traced loop (`#[unroll]` keeps a Rust loop) |

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{BinOp, Expr, Ident};

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

/// The block a traced `for` becomes: the driver opens the loop, the pattern
/// binds its index, the body runs once inside it, the driver closes it.
fn traced_loop(
    span: Span,
    driver: TokenStream,
    vars: &[Ident],
    pat: &syn::Pat,
    body: &syn::Block,
) -> TokenStream {
    let enter = step(span, vars, "__tessel_lp", "enter");
    let finish = step(span, vars, "__tessel_lp", "finish");
    quote_spanned! {span=>
        {
            let mut __tessel_lp = #driver;
            #enter
            #[allow(unused_variables)]
            let #pat = __tessel_lp.index();
            #body
            #finish
        }
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
        let f = match b.op {
            BinOp::Lt(_) => "cmp_lt",
            BinOp::Le(_) => "cmp_le",
            BinOp::Gt(_) => "cmp_gt",
            BinOp::Ge(_) => "cmp_ge",
            BinOp::Eq(_) => "cmp_eq",
            BinOp::Ne(_) => "cmp_ne",
            BinOp::And(_) | BinOp::Or(_) => {
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
                return Some(quote_spanned!(b.op.span()=> ::tessel::lang::#f(#l, || #r)));
            }
            _ => return None,
        };
        let f = Ident::new(f, b.op.span());
        let (l, r) = (&b.left, &b.right);
        Some(quote_spanned! {b.op.span()=>
            {
                #[allow(unused_imports)]
                use ::tessel::lang::ComparePlain as _;
                ::tessel::lang::Cmp(&(#l)).#f(&(#r))
            }
        })
    }

    fn rewrite_if(&mut self, e: &mut syn::ExprIf) -> TokenStream {
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
        if exit.is_some() {
            // Leaves early: only a Rust bool can decide it.
            let otherwise = e.else_branch.as_ref().map(|(_, x)| quote!(else #x));
            return quote_spanned!(span=> if ::tessel::lang::static_condition(#cond) #then #otherwise);
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
                let mut __tessel_br = ::tessel::lang::Condition::branch(&__tessel_c);
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
        if exit.is_some() || label.is_some() {
            return quote_spanned!(span=> #label while ::tessel::lang::static_condition(#cond) #body);
        }
        let enter_cond = step(span, &vars, "__tessel_wl", "enter_cond");
        let enter_body = step(span, &vars, "__tessel_wl", "enter_body");
        let leave_body = step(span, &vars, "__tessel_wl", "leave_body");
        quote_spanned! {span=>
            {
                let __tessel_probe = #cond;
                #[allow(unused_mut)]
                let mut __tessel_wl = ::tessel::lang::LoopCondition::driver(&__tessel_probe);
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
        let is_source = is_loop_source(&f.expr);
        if !matches!(&*f.expr, Expr::Range(_)) && !is_source {
            self.visit_expr_mut(&mut f.expr);
            self.visit_block_mut(&mut f.body);
            return None;
        }
        let vars = assigned_outer(&f.body);
        if vars.is_empty() {
            // Assigns nothing outside: nothing to trace, so it runs while tracing.
            self.visit_expr_mut(&mut f.expr);
            self.visit_block_mut(&mut f.body);
            return None;
        }
        let span = f.for_token.span;
        if let Some((s, what)) = early_exit(&f.body) {
            self.error(
                s,
                format!(
                    "`{what}` cannot leave a traced loop: `for` over a range that assigns outer variables becomes one \
                     XLA while. Write `#[unroll] for ...` to run the loop while tracing, or carry a flag and test it"
                ),
            );
        }
        if f.label.is_some() {
            self.error(
                span,
                "a traced `for` loop cannot have a label; write `#[unroll]` for a Rust loop",
            );
        }
        if is_source {
            self.visit_expr_mut(&mut f.expr);
            self.visit_block_mut(&mut f.body);
            let src = &f.expr;
            let driver = quote_spanned!(span=> ::tessel::lang::LoopSource::driver(#src));
            return Some(traced_loop(span, driver, &vars, &f.pat, &f.body));
        }
        let Expr::Range(range) = &*f.expr else {
            return None;
        };
        let range = range.clone();
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
        self.visit_block_mut(&mut f.body);
        let driver = quote_spanned!(span=> ::tessel::lang::RangeLoop::#ctor(#lo, #hi));
        Some(traced_loop(span, driver, &vars, &f.pat, &f.body))
    }
}

/// Whether `e` is a call of `blocks(..)`, `blocks_of(..)` or `grid(..)`
/// (by the function's last path segment), which drive traced loops.
fn is_loop_source(e: &Expr) -> bool {
    match e {
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) => p.path.segments.last().is_some_and(|s| {
                matches!(
                    s.ident.to_string().as_str(),
                    "blocks" | "blocks_of" | "grid"
                )
            }),
            _ => false,
        },
        Expr::Paren(p) => is_loop_source(&p.expr),
        _ => false,
    }
}

impl VisitMut for Rewriter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        let new: Option<TokenStream> = match e {
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
                self.visit_expr_mut(&mut ix.index);
                let (base, index, value) = (&ix.expr, &ix.index, &a.right);
                Some(quote_spanned! {a.eq_token.span=>
                    {
                        #[allow(unused_imports)]
                        use ::tessel::lang::AssignPlain as _;
                        ::tessel::lang::Target(&mut #base).assign(#index, #value)
                    }
                })
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
