//! Lowering: a traced [`Graph`] to StableHLO MLIR text.
//!
//! Every op is printed in MLIR's generic form
//! (`%v3 = "stablehlo.add"(%v1, %v2) : (...) -> ... loc(...)`), which the
//! PJRT plugins parse whatever their StableHLO version. Each op carries the
//! user's source line as its location, so XLA's messages and dumps point
//! back into the kernel.

mod attrs;
mod hints;
mod regions;

pub use hints::{compile_hints, CompileHints};

use std::fmt::Write;

use crate::ir::{Def, Graph, NodeId, RegionId, ValueId};
use crate::shape::TensorSpec;

/// Lowers a graph to a StableHLO module whose entry point is `@main`.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, lower::lower, trace, TensorSpec, F32};
/// let g = trace("double", &[("x".into(), TensorSpec::new([4], F32))], KernelConfig::default(), |a| a[0] * 2.0)?;
/// let text = lower(&g);
/// assert!(text.contains("func.func public @main(%v0: tensor<4xf32>"));
/// assert!(text.contains("stablehlo.multiply"));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn lower(graph: &Graph) -> String {
    Printer::new(graph).module()
}

/// Prints one graph; owns the SSA names.
pub(crate) struct Printer<'g> {
    pub(crate) g: &'g Graph,
    names: Vec<String>,
    out: String,
    pub(crate) temp: usize,
}

impl<'g> Printer<'g> {
    fn new(g: &'g Graph) -> Self {
        let mut names = vec![String::new(); g.values.len()];
        for (id, v) in g.values.iter().enumerate() {
            names[id] = match &v.def {
                Def::Result { node, index } => {
                    let n = &g.nodes[*node];
                    if n.results.len() > 1 {
                        format!("%v{}#{}", n.results[0], index)
                    } else {
                        format!("%v{id}")
                    }
                }
                _ => format!("%v{id}"),
            };
        }
        Printer {
            g,
            names,
            out: String::new(),
            temp: 0,
        }
    }

    pub(crate) fn name(&self, v: ValueId) -> &str {
        &self.names[v]
    }

    pub(crate) fn ty(&self, v: ValueId) -> String {
        self.g.values[v].spec.mlir_type()
    }

    pub(crate) fn fresh(&mut self) -> String {
        self.temp += 1;
        format!("%t{}", self.temp)
    }

    pub(crate) fn line(&mut self, indent: usize, text: &str) {
        for _ in 0..indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn module(mut self) -> String {
        let g = self.g;
        let sym: String = g
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let partitions = g.shardings.as_ref().map_or(1, |s| s.partitions);
        self.line(0, &format!("module @{sym} attributes {{mhlo.num_partitions = {partitions} : i32, mhlo.num_replicas = 1 : i32}} {{"));
        let sharding = |list: Option<&Vec<String>>, i: usize| {
            list.and_then(|l| l.get(i))
                .map(|s| format!("mhlo.sharding = {}", quote(s)))
        };
        let params: Vec<String> = g.regions[0]
            .args
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let pname = g.param_names.get(i).cloned().unwrap_or_default();
                let attrs: Vec<String> = g
                    .aliases
                    .iter()
                    .find(|&&(p, _)| p == i)
                    .map(|&(_, o)| format!("tf.aliasing_output = {o} : i32"))
                    .into_iter()
                    .chain(sharding(g.shardings.as_ref().map(|s| &s.inputs), i))
                    .collect();
                let attrs = if attrs.is_empty() {
                    String::new()
                } else {
                    format!(" {{{}}}", attrs.join(", "))
                };
                format!(
                    "{}: {}{attrs} loc({})",
                    self.name(v),
                    self.ty(v),
                    quote(&pname)
                )
            })
            .collect();
        let results: Vec<String> = g.regions[0]
            .results
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ty = self.ty(v);
                match sharding(g.shardings.as_ref().map(|s| &s.outputs), i) {
                    Some(attr) => format!("{ty} {{{attr}}}"),
                    None => ty,
                }
            })
            .collect();
        self.line(
            1,
            &format!(
                "func.func public @main({}) -> ({}) {{",
                params.join(", "),
                results.join(", ")
            ),
        );
        self.region_body(0, 2);
        let rs = &g.regions[0].results;
        if rs.is_empty() {
            self.line(2, "func.return");
        } else {
            let names: Vec<&str> = rs.iter().map(|&v| self.name(v)).collect();
            let tys: Vec<String> = rs.iter().map(|&v| self.ty(v)).collect();
            let text = format!("func.return {} : {}", names.join(", "), tys.join(", "));
            self.line(2, &text);
        }
        self.line(1, "}");
        self.line(0, "}");
        self.out
    }

    /// Prints the nodes of a region (not its block header or terminator).
    pub(crate) fn region_body(&mut self, region: RegionId, indent: usize) {
        let nodes = self.g.regions[region].nodes.clone();
        for n in nodes {
            self.node(n, indent);
        }
    }

    /// Prints a nested region: `{ ^bb0(args): body; stablehlo.return results }`.
    pub(crate) fn nested_region(&mut self, region: RegionId, indent: usize) -> String {
        let g = self.g;
        let r = &g.regions[region];
        let saved = std::mem::take(&mut self.out);
        if !r.args.is_empty() {
            let args: Vec<String> = r
                .args
                .iter()
                .map(|&v| format!("{}: {}", self.name(v), self.ty(v)))
                .collect();
            self.line(indent, &format!("^bb0({}):", args.join(", ")));
        }
        self.region_body(region, indent + 1);
        let names: Vec<&str> = r.results.iter().map(|&v| self.name(v)).collect();
        let tys: Vec<String> = r.results.iter().map(|&v| self.ty(v)).collect();
        let ret = format!(
            "\"stablehlo.return\"({}) : ({}) -> ()",
            names.join(", "),
            tys.join(", ")
        );
        self.line(indent + 1, &ret);
        std::mem::replace(&mut self.out, saved)
    }

    fn node(&mut self, id: NodeId, indent: usize) {
        let g = self.g;
        let node = &g.nodes[id];
        let (name, attrs, regions) = attrs::op_parts(self, id, indent);
        let operands: Vec<&str> = node.operands.iter().map(|&v| self.name(v)).collect();
        let in_tys: Vec<String> = node.operands.iter().map(|&v| self.ty(v)).collect();
        let out_tys: Vec<String> = node.results.iter().map(|&v| self.ty(v)).collect();
        let lhs = match node.results.len() {
            0 => String::new(),
            1 => format!("{} = ", self.name(node.results[0])),
            n => format!("%v{}:{n} = ", node.results[0]),
        };
        let outs = if out_tys.len() == 1 {
            out_tys[0].clone()
        } else {
            format!("({})", out_tys.join(", "))
        };
        let mut text = format!("{lhs}\"{name}\"({})", operands.join(", "));
        if !regions.is_empty() {
            text.push_str(" (");
            text.push_str(&regions.join(", "));
            text.push(')');
        }
        if !attrs.is_empty() {
            let _ = write!(text, " {{{attrs}}}");
        }
        let loc = &node.location;
        let op_name = name.rsplit('.').next().unwrap_or(&name);
        let _ = write!(
            text,
            " : ({}) -> {outs} loc({}({}:{}:{}))",
            in_tys.join(", "),
            quote(op_name),
            quote(&loc.file),
            loc.line,
            loc.column
        );
        self.line(indent, &text);
    }
}

/// An MLIR string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(q, "\\{:02X}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// The scalar type of a spec's element type, as `tensor<f32>`.
pub(crate) fn scalar_type(spec: &TensorSpec) -> String {
    TensorSpec::scalar(spec.dtype).mlir_type()
}

pub(crate) use regions::combiner_region;
