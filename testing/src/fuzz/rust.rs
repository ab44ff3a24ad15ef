//! A case printed as a Rust test that reproduces it with the public
//! `tessel_dsl` API: its arguments as literals, its program as the calls
//! [`build`](super::build) makes, and [`assert_agree`](super::assert_agree)
//! to compare the interpreter with the plugin.

use std::collections::BTreeSet;
use std::fmt::Write;

use tessel_dsl::{DType, HostTensor};

use super::program::{Binary, Block, Bound, Case, Cmp, Inst, Op, Reduce, Unary, MAX_TRIPS, V};

/// A float as a Rust `f64` expression that reads back bit for bit (NaNs
/// keep their sign, not their payload).
pub fn float(x: f64) -> String {
    if x.is_nan() {
        if x.is_sign_negative() {
            "-f64::NAN".into()
        } else {
            "f64::NAN".into()
        }
    } else if x.is_infinite() {
        if x > 0.0 {
            "f64::INFINITY".into()
        } else {
            "f64::NEG_INFINITY".into()
        }
    } else {
        format!("{x:?}")
    }
}

fn list<T: std::fmt::Display>(xs: &[T]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn dtype(d: DType) -> String {
    format!("DType::{d:?}")
}

/// `t` as a `tessel_testing::tensor(values, shape, dtype)` call.
pub fn tensor_literal(t: &HostTensor) -> String {
    let values: Vec<String> = t.to_f64_vec().into_iter().map(float).collect();
    format!(
        "tensor(&[{}], &{}, {})",
        values.join(", "),
        list(t.shape()),
        dtype(t.dtype())
    )
}

struct Printer {
    out: String,
    /// Names the program needs imported.
    imports: BTreeSet<&'static str>,
    /// Every value something reads (the others are bound as `_vN`).
    read: BTreeSet<V>,
}

fn v(x: V) -> String {
    format!("v{x}")
}

/// Values as a comma-separated list of their names.
fn values(xs: &[V]) -> String {
    xs.iter().map(|&x| v(x)).collect::<Vec<_>>().join(", ")
}

impl Printer {
    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{text}", "    ".repeat(depth));
    }

    fn bind(&self, x: V) -> String {
        if self.read.contains(&x) {
            v(x)
        } else {
            format!("_v{x}")
        }
    }

    /// The closure argument `name` that holds `params`, `_`-prefixed when
    /// none of them is read.
    fn arg_name(&self, name: &str, params: &[V]) -> String {
        match params.iter().any(|p| self.read.contains(p)) {
            true => name.to_string(),
            false => format!("_{name}"),
        }
    }

    /// Binds block parameters from closure argument `name` (`vec[i]`).
    fn unpack(&mut self, depth: usize, name: &str, params: &[V]) {
        for (i, &p) in params.iter().enumerate() {
            if self.read.contains(&p) {
                self.line(depth, &format!("let {} = {name}[{i}];", v(p)));
            }
        }
    }

    fn insts(&mut self, depth: usize, insts: &[Inst]) {
        for inst in insts {
            self.inst(depth, inst);
        }
    }

    fn block_tail(&mut self, depth: usize, b: &Block, prefix: &[String]) {
        self.insts(depth, &b.insts);
        let mut items: Vec<String> = prefix.to_vec();
        items.extend(b.results.iter().map(|&r| v(r)));
        self.line(depth, &format!("vec![{}]", items.join(", ")));
    }

    fn inst(&mut self, depth: usize, inst: &Inst) {
        let r = format!("r{}", inst.outs[0]);
        match &inst.op {
            Op::Fori { lo, hi, init, body } => {
                self.imports.insert("fori_loop");
                let hi = match hi {
                    Bound::Static(n) => n.to_string(),
                    Bound::Traced(x) => format!("{}.minimum({MAX_TRIPS})", v(*x)),
                };
                let c = format!("c{}", inst.outs[0]);
                let c_arg = self.arg_name(&c, &body.params[1..]);
                let i = self.bind(body.params[0]);
                let init = values(init);
                self.line(
                    depth,
                    &format!("let {r} = fori_loop({lo}, {hi}, vec![{init}], |{i}: Tensor, {c_arg}: Vec<Tensor>| {{"),
                );
                self.unpack(depth + 1, &c, &body.params[1..]);
                self.block_tail(depth + 1, body, &[]);
                self.line(depth, "});");
            }
            Op::Scan {
                init,
                xs,
                length,
                reverse,
                body,
            } => {
                self.imports.insert("scan_with");
                self.imports.insert("ScanOptions");
                let k = init.len();
                let (c, x) = (format!("c{}", inst.outs[0]), format!("x{}", inst.outs[0]));
                let (c_arg, x_arg) = (
                    self.arg_name(&c, &body.params[..k]),
                    self.arg_name(&x, &body.params[k..]),
                );
                self.line(depth, &format!("let {r} = {{"));
                self.line(
                    depth + 1,
                    &format!("let o = ScanOptions::new().length({length}).reverse({reverse});"),
                );
                self.line(
                    depth + 1,
                    &format!(
                        "let (mut c, ys) = scan_with(vec![{}], vec![{}], o, |{c_arg}: Vec<Tensor>, {x_arg}: Vec<Tensor>| {{",
                        values(init),
                        values(xs)
                    ),
                );
                self.unpack(depth + 2, &c, &body.params[..k]);
                self.unpack(depth + 2, &x, &body.params[k..]);
                self.insts(depth + 2, &body.insts);
                self.line(
                    depth + 2,
                    &format!(
                        "(vec![{}], vec![{}])",
                        values(&body.results[..k]),
                        values(&body.results[k..])
                    ),
                );
                self.line(depth + 1, "});");
                self.line(depth + 1, "c.extend(ys);");
                self.line(depth + 1, "c");
                self.line(depth, "};");
            }
            Op::While {
                limit,
                init,
                cond,
                body,
            } => {
                self.imports.insert("while_loop");
                let lim = format!("limit{}", inst.outs[0]);
                self.line(
                    depth,
                    &format!("let {lim} = {}.minimum({MAX_TRIPS});", v(*limit)),
                );
                let mut init: Vec<String> = init.iter().map(|&x| v(x)).collect();
                init.insert(0, "Tensor::scalar(0.0, DType::S32)".into());
                self.line(depth, &format!("let {r} = while_loop("));
                self.line(depth + 1, &format!("vec![{}],", init.join(", ")));
                let c = format!("c{}", inst.outs[0]);
                self.line(depth + 1, &format!("|{c}: Vec<Tensor>| {{"));
                self.unpack(depth + 2, &c, &cond.params);
                self.insts(depth + 2, &cond.insts);
                self.line(
                    depth + 2,
                    &format!("{c}[0].lt({lim}).and({})", v(cond.results[0])),
                );
                self.line(depth + 1, "},");
                self.line(depth + 1, &format!("|{c}: Vec<Tensor>| {{"));
                let next = format!("next{}", inst.outs[0]);
                self.line(depth + 2, &format!("let {next} = {c}[0] + 1;"));
                self.unpack(depth + 2, &c, &body.params);
                self.block_tail(depth + 2, body, &[next]);
                self.line(depth + 1, "},");
                self.line(depth, ");");
            }
            Op::Cond {
                pred,
                then,
                otherwise,
            } => {
                self.imports.insert("cond");
                self.line(depth, &format!("let {r} = cond("));
                self.line(depth + 1, &format!("{},", v(*pred)));
                for b in [then, otherwise] {
                    self.line(depth + 1, "|| {");
                    self.block_tail(depth + 2, b, &[]);
                    self.line(depth + 1, "},");
                }
                self.line(depth, ");");
            }
            op => {
                let e = self.expr(op);
                let name = self.bind(inst.outs[0]);
                self.line(depth, &format!("let {name} = {e};"));
                return;
            }
        }
        for (i, &o) in inst.outs.iter().enumerate() {
            if self.read.contains(&o) {
                self.line(depth, &format!("let {} = {r}[{i}];", v(o)));
            }
        }
    }

    fn expr(&mut self, op: &Op) -> String {
        match op {
            Op::Full { spec, value } => format!(
                "Tensor::full({}, {}, {})",
                shape(&spec.shape),
                float(*value),
                dtype(spec.dtype)
            ),
            Op::Iota { spec, dim } => format!(
                "Tensor::iota({}, {dim}, {})",
                shape(&spec.shape),
                dtype(spec.dtype)
            ),
            Op::Unary(u, x) => unary(*u, &v(*x)),
            Op::Binary(b, x, y) => binary(*b, &v(*x), &v(*y)),
            Op::Compare(c, x, y) => {
                let m = match c {
                    Cmp::Eq => "eq",
                    Cmp::Ne => "ne",
                    Cmp::Lt => "lt",
                    Cmp::Le => "le",
                    Cmp::Gt => "gt",
                    Cmp::Ge => "ge",
                };
                format!("{}.{m}({})", v(*x), v(*y))
            }
            Op::Select(p, x, y) => format!("{}.select({}, {})", v(*p), v(*x), v(*y)),
            Op::Clamp(x, lo, hi) => format!("{}.clamp({}, {})", v(*x), v(*lo), v(*hi)),
            Op::Cast(x, d) => format!("{}.cast({})", v(*x), dtype(*d)),
            Op::BroadcastInDim(x, sh, dims) => {
                format!("{}.broadcast_in_dim({}, &{})", v(*x), shape(sh), list(dims))
            }
            Op::Reshape(x, sh) => format!("{}.reshape(&{})", v(*x), list(sh)),
            Op::Transpose(x, perm) => format!("{}.transpose(&{})", v(*x), list(perm)),
            Op::Slice {
                x,
                start,
                limit,
                stride,
            } => format!(
                "{}.slice(&{}, &{}, &{})",
                v(*x),
                list(start),
                list(limit),
                list(stride)
            ),
            Op::Pad {
                x,
                value,
                low,
                high,
                interior,
            } => format!(
                "{x}.pad(Tensor::scalar({}, {x}.dtype()), &{}, &{}, &{})",
                float(*value),
                list(low),
                list(high),
                list(interior),
                x = v(*x)
            ),
            Op::Concat(xs, axis) => {
                self.imports.insert("concat");
                let xs: Vec<String> = xs.iter().map(|&x| v(x)).collect();
                format!("concat(&[{}], {axis})", xs.join(", "))
            }
            Op::Reduce(k, x, axes) => {
                let m = match k {
                    Reduce::Sum => "sum",
                    Reduce::Prod => "prod",
                    Reduce::Max => "max",
                    Reduce::Min => "min",
                    Reduce::All => "all",
                    Reduce::Any => "any",
                };
                format!("{}.{m}(&{})", v(*x), list(axes))
            }
            Op::Arg { x, axis, max } => {
                let m = if *max { "argmax" } else { "argmin" };
                format!("{}.{m}({axis})", v(*x))
            }
            Op::Sort {
                x,
                axis,
                descending,
                indices,
            } => {
                let m = if *indices { "argsort" } else { "sort" };
                format!("{}.{m}({axis}, {descending})", v(*x))
            }
            Op::DynamicSlice { x, starts, sizes } => {
                let s: Vec<String> = starts.iter().map(|&x| v(x)).collect();
                format!(
                    "{}.dynamic_slice(&[{}], &{})",
                    v(*x),
                    s.join(", "),
                    list(sizes)
                )
            }
            Op::DynamicUpdateSlice { x, update, starts } => {
                let s: Vec<String> = starts.iter().map(|&x| v(x)).collect();
                format!(
                    "{}.dynamic_update_slice({}, &[{}])",
                    v(*x),
                    v(*update),
                    s.join(", ")
                )
            }
            Op::Take { x, indices, axis } => format!("{}.take({}, {axis})", v(*x), v(*indices)),
            Op::IndexUpdate {
                x,
                axis,
                indices,
                updates,
                combine,
            } => {
                self.imports.insert("ops::ScatterCombine");
                format!(
                    "{}.index_update({axis}, {}, {}, ScatterCombine::{combine:?})",
                    v(*x),
                    v(*indices),
                    v(*updates)
                )
            }
            Op::Dot {
                lhs,
                rhs,
                dims,
                out,
            } => {
                self.imports.insert("DotDims");
                self.imports.insert("Precision");
                let out = out.map_or("None".to_string(), |d| format!("Some({})", dtype(d)));
                format!(
                    "{}.dot_general({}, DotDims {{ lhs_batch: vec!{}, rhs_batch: vec!{}, \
                     lhs_contract: vec!{}, rhs_contract: vec!{} }}, Some(Precision::Highest), {out})",
                    v(*lhs),
                    v(*rhs),
                    list(&dims.lhs_batch),
                    list(&dims.rhs_batch),
                    list(&dims.lhs_contract),
                    list(&dims.rhs_contract)
                )
            }
            Op::Fori { .. } | Op::Scan { .. } | Op::While { .. } | Op::Cond { .. } => {
                unreachable!("blocks are printed by `inst`")
            }
        }
    }
}

/// A shape argument (`impl Into<Shape>`).
fn shape(s: &[usize]) -> String {
    if s.is_empty() {
        "Vec::<usize>::new()".into()
    } else {
        format!("vec!{}", list(s))
    }
}

fn unary(u: Unary, x: &str) -> String {
    let m = match u {
        Unary::Neg => return format!("-{x}"),
        Unary::Abs => "abs",
        Unary::Sqrt => "sqrt",
        Unary::Floor => "floor",
        Unary::Ceil => "ceil",
        Unary::Round => "round",
        Unary::Sign => "sign",
        Unary::Not => "logical_not",
        Unary::PopCount => "popcount",
        Unary::IsFinite => "is_finite",
        Unary::Exp => "exp",
        Unary::Log => "log",
        Unary::Log1p => "log1p",
        Unary::Expm1 => "expm1",
        Unary::Tanh => "tanh",
        Unary::Sigmoid => "sigmoid",
        Unary::Sin => "sin",
        Unary::Cos => "cos",
        Unary::Erf => "erf",
        Unary::Rsqrt => "rsqrt",
        Unary::Cbrt => "cbrt",
        Unary::Tan => "tan",
    };
    format!("{x}.{m}()")
}

fn binary(b: Binary, x: &str, y: &str) -> String {
    let m = match b {
        Binary::Add => return format!("{x} + {y}"),
        Binary::Sub => return format!("{x} - {y}"),
        Binary::Mul => return format!("{x} * {y}"),
        Binary::Div => return format!("{x} / {y}"),
        Binary::Rem => return format!("{x} % {y}"),
        Binary::Max => "maximum",
        Binary::Min => "minimum",
        Binary::And => "and",
        Binary::Or => "or",
        Binary::Xor => "xor",
        Binary::ShiftLeft => "shift_left",
        Binary::ShiftRightArithmetic => "shift_right_arithmetic",
        Binary::ShiftRightLogical => "shift_right_logical",
        Binary::Pow => "pow",
        Binary::Atan2 => "atan2",
    };
    format!("{x}.{m}({y})")
}

/// Every value `insts` (and their blocks) read.
fn reads(insts: &[Inst], out: &mut BTreeSet<V>) {
    for inst in insts {
        out.extend(inst.op.operands());
        for b in inst.op.blocks() {
            out.extend(&b.results);
            reads(&b.insts, out);
        }
    }
}

/// `case` as a `#[test]` function named `name`, with `note` as its doc
/// comment (one line): the interpreter and the plugin must agree
/// ([`assert_agree`](super::assert_agree)).
pub fn to_rust(case: &Case, name: &str, note: &str) -> String {
    let terms: Vec<usize> = case.program.outputs.iter().map(|o| o.terms).collect();
    let extra = format!("&{}", list(&terms));
    test_source(case, name, note, ["assert_agree", "assert_agree"], &extra)
}

/// `case` as a `#[test]` function named `name`, with `note` as its doc
/// comment: its gradients must agree with central differences
/// ([`assert_grad`](super::grad::assert_grad), with the case's seed).
pub fn to_rust_grad(case: &Case, name: &str, note: &str) -> String {
    let extra = case.seed.to_string();
    test_source(case, name, note, ["grad", "grad::assert_grad"], &extra)
}

/// The test: imports (`tessel_testing::fuzz::{import}`), the arguments,
/// then `call(&args, extra, |a| body)`.
fn test_source(
    case: &Case,
    name: &str,
    note: &str,
    [import, call]: [&str; 2],
    extra: &str,
) -> String {
    let p = &case.program;
    let mut read = BTreeSet::new();
    reads(&p.insts, &mut read);
    read.extend(p.outputs.iter().map(|o| o.value));
    let mut pr = Printer {
        out: String::new(),
        imports: BTreeSet::new(),
        read,
    };
    for (i, &x) in p.params.iter().enumerate() {
        if pr.read.contains(&x) {
            pr.line(2, &format!("let {} = a[{i}];", v(x)));
        }
    }
    pr.insts(2, &p.insts);
    let outs: Vec<String> = p.outputs.iter().map(|o| v(o.value)).collect();
    pr.line(2, &format!("vec![{}]", outs.join(", ")));
    let body = std::mem::take(&mut pr.out);
    let mut names: Vec<&str> = vec!["DType", "Tensor"];
    names.extend(pr.imports.iter().filter(|n| !n.contains("::")));
    names.sort_by_key(|n| (n.chars().next().is_some_and(char::is_uppercase), *n));
    let mut s = String::new();
    let _ = writeln!(s, "/// {note}");
    let _ = writeln!(s, "#[test]");
    let _ = writeln!(s, "fn {name}() {{");
    if pr.imports.contains("ops::ScatterCombine") {
        let _ = writeln!(s, "    use tessel_dsl::ops::ScatterCombine;");
    }
    let _ = writeln!(s, "    use tessel_dsl::{{{}}};", names.join(", "));
    let _ = writeln!(s, "    use tessel_testing::{{fuzz::{import}, tensor}};");
    let _ = writeln!(s, "    let args = [");
    for a in &case.args {
        let _ = writeln!(s, "        {},", tensor_literal(a));
    }
    let _ = writeln!(s, "    ];");
    let _ = writeln!(s, "    {call}(&args, {extra}, |a: &[Tensor]| {{");
    s.push_str(&body);
    let _ = writeln!(s, "    }});");
    let _ = writeln!(s, "}}");
    s
}
