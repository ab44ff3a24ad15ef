//! Regions the lowering writes itself: reduction and scatter combiners,
//! sort comparators, the argmax/argmin selector.

use crate::ir::Comparison;
use crate::lower::attrs::compare_attrs;
use crate::lower::{scalar_type, Printer};
use crate::shape::TensorSpec;

fn pad(indent: usize) -> String {
    "  ".repeat(indent)
}

/// `{ ^bb0(%a: T, %b: T): %r = combiner(%a, %b); return %r }`.
pub(crate) fn combiner_region(
    p: &mut Printer,
    combiner: &str,
    scalar: &str,
    indent: usize,
) -> String {
    let (a, b, r) = (p.fresh(), p.fresh(), p.fresh());
    let i1 = pad(indent + 1);
    let i2 = pad(indent + 2);
    format!(
        "{{\n{i1}^bb0({a}: {scalar}, {b}: {scalar}):\n{i2}{r} = \"{combiner}\"({a}, {b}) : ({scalar}, {scalar}) -> {scalar}\n{i2}\"stablehlo.return\"({r}) : ({scalar}) -> ()\n{}}}",
        pad(indent)
    )
}

/// A scatter update region: `combiner(old, new)`, or `new` when `None`.
pub(crate) fn scatter_region(
    p: &mut Printer,
    combiner: Option<&str>,
    scalar: &str,
    indent: usize,
) -> String {
    match combiner {
        Some(c) => combiner_region(p, c, scalar, indent),
        None => {
            let (a, b) = (p.fresh(), p.fresh());
            format!(
                "{{\n{}^bb0({a}: {scalar}, {b}: {scalar}):\n{}\"stablehlo.return\"({b}) : ({scalar}) -> ()\n{}}}",
                pad(indent + 1),
                pad(indent + 2),
                pad(indent)
            )
        }
    }
}

fn compare_type_total(spec: &TensorSpec) -> &'static str {
    if spec.dtype.is_float() {
        "TOTALORDER"
    } else {
        spec.dtype.comparison_type()
    }
}

/// A sort comparator on the first operand: `a < b` (or `a > b` descending).
pub(crate) fn sort_region(
    p: &mut Printer,
    specs: &[TensorSpec],
    descending: bool,
    indent: usize,
) -> String {
    let mut args = Vec::new();
    let mut first = (String::new(), String::new());
    for (i, s) in specs.iter().enumerate() {
        let st = scalar_type(s);
        let (a, b) = (p.fresh(), p.fresh());
        if i == 0 {
            first = (a.clone(), b.clone());
        }
        args.push(format!("{a}: {st}, {b}: {st}"));
    }
    let st = scalar_type(&specs[0]);
    let r = p.fresh();
    let dir = if descending {
        Comparison::Gt
    } else {
        Comparison::Lt
    };
    let attrs = compare_attrs(dir, compare_type_total(&specs[0]));
    format!(
        "{{\n{}^bb0({}):\n{i2}{r} = \"stablehlo.compare\"({}, {}) {{{attrs}}} : ({st}, {st}) -> tensor<i1>\n{i2}\"stablehlo.return\"({r}) : (tensor<i1>) -> ()\n{}}}",
        pad(indent + 1),
        args.join(", "),
        first.0,
        first.1,
        pad(indent),
        i2 = pad(indent + 2),
    )
}

/// The (value, index) selector of argmax / argmin: the extreme value wins,
/// ties go to the smaller index, NaN counts as the extreme (the first NaN wins).
pub(crate) fn arg_reduce_region(
    p: &mut Printer,
    max: bool,
    spec: &TensorSpec,
    indent: usize,
) -> String {
    let st = scalar_type(spec);
    let it = "tensor<i32>";
    let (a, ai, b, bi) = (p.fresh(), p.fresh(), p.fresh(), p.fresh());
    let (better, eq, lt_i, tie) = (p.fresh(), p.fresh(), p.fresh(), p.fresh());
    let (v, i) = (p.fresh(), p.fresh());
    let ct = spec.dtype.comparison_type();
    let dir = if max { Comparison::Gt } else { Comparison::Lt };
    let i2 = pad(indent + 2);
    let mut lines = vec![
        format!(
            "{better} = \"stablehlo.compare\"({a}, {b}) {{{}}} : ({st}, {st}) -> tensor<i1>",
            compare_attrs(dir, ct)
        ),
        format!(
            "{eq} = \"stablehlo.compare\"({a}, {b}) {{{}}} : ({st}, {st}) -> tensor<i1>",
            compare_attrs(Comparison::Eq, ct)
        ),
        format!(
            "{lt_i} = \"stablehlo.compare\"({ai}, {bi}) {{{}}} : ({it}, {it}) -> tensor<i1>",
            compare_attrs(Comparison::Lt, "SIGNED")
        ),
        format!("{tie} = \"stablehlo.and\"({eq}, {lt_i}) : (tensor<i1>, tensor<i1>) -> tensor<i1>"),
    ];
    let mut take_src = p.fresh();
    lines.push(format!(
        "{take_src} = \"stablehlo.or\"({better}, {tie}) : (tensor<i1>, tensor<i1>) -> tensor<i1>"
    ));
    if spec.dtype.is_float() {
        // A NaN `a` wins unless `b` is a NaN with a smaller index, so the
        // selector stays commutative (XLA may combine in any order).
        let (nan, nan_b, ok_b, either) = (p.fresh(), p.fresh(), p.fresh(), p.fresh());
        let (nan_wins, t2) = (p.fresh(), p.fresh());
        let ne = compare_attrs(Comparison::Ne, ct);
        lines.push(format!(
            "{nan} = \"stablehlo.compare\"({a}, {a}) {{{ne}}} : ({st}, {st}) -> tensor<i1>"
        ));
        lines.push(format!(
            "{nan_b} = \"stablehlo.compare\"({b}, {b}) {{{ne}}} : ({st}, {st}) -> tensor<i1>"
        ));
        lines.push(format!(
            "{ok_b} = \"stablehlo.not\"({nan_b}) : (tensor<i1>) -> tensor<i1>"
        ));
        lines.push(format!(
            "{either} = \"stablehlo.or\"({ok_b}, {lt_i}) : (tensor<i1>, tensor<i1>) -> tensor<i1>"
        ));
        lines.push(format!(
            "{nan_wins} = \"stablehlo.and\"({nan}, {either}) : (tensor<i1>, tensor<i1>) -> tensor<i1>"
        ));
        lines.push(format!(
            "{t2} = \"stablehlo.or\"({take_src}, {nan_wins}) : (tensor<i1>, tensor<i1>) -> tensor<i1>"
        ));
        take_src = t2;
    }
    let take = take_src;
    lines.push(format!(
        "{v} = \"stablehlo.select\"({take}, {a}, {b}) : (tensor<i1>, {st}, {st}) -> {st}"
    ));
    lines.push(format!(
        "{i} = \"stablehlo.select\"({take}, {ai}, {bi}) : (tensor<i1>, {it}, {it}) -> {it}"
    ));
    lines.push(format!(
        "\"stablehlo.return\"({v}, {i}) : ({st}, {it}) -> ()"
    ));
    let body: String = lines.iter().map(|l| format!("{i2}{l}\n")).collect();
    format!(
        "{{\n{}^bb0({a}: {st}, {ai}: {it}, {b}: {st}, {bi}: {it}):\n{body}{}}}",
        pad(indent + 1),
        pad(indent)
    )
}
