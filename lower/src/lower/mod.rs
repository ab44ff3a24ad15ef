//! Lowering: a traced [`Graph`] to StableHLO MLIR text.
//!
//! Every op is printed in MLIR's generic form
//! (`%v3 = "stablehlo.add"(%v1, %v2) : (...) -> ... loc(...)`), which the
//! PJRT plugins parse whatever their StableHLO version. Each op carries the
//! user's source line as its location, so XLA's messages and dumps point
//! back into the kernel.

mod attrs;
mod collectives;
mod hints;
mod regions;
mod row_reductions;

pub use hints::{compile_hints, CompileHints};
pub use row_reductions::split_row_reductions;

pub(crate) use attrs::{binary_name, unary_name};

use std::fmt::Write;

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{Def, Graph, NodeId, Op, RegionId, ValueId};
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
    if nesting_depth(graph) <= SHALLOW {
        return Printer::new(graph).module();
    }
    // Printing recurses once per nested loop or branch: deep programs get a
    // thread with a stack to match (reserved, touched only as deep as used).
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("tessel-lower".into())
            .stack_size(DEEP_STACK)
            .spawn_scoped(scope, || Printer::new(graph).module())
            .ok()
            .and_then(|handle| handle.join().ok())
    })
    .unwrap_or_else(|| Printer::new(graph).module())
}

/// Deepest indentation printed; deeper lines start at this column.
const MAX_INDENT: usize = 32;
/// Nesting depth printed on the caller's stack.
const SHALLOW: usize = 64;
/// The stack of the printing thread for deeper programs.
const DEEP_STACK: usize = 1 << 30;

/// How deeply the graph's regions nest (0: no loops or branches).
pub fn nesting_depth(graph: &Graph) -> usize {
    let mut depth = vec![0usize; graph.regions.len()];
    for (id, region) in graph.regions.iter().enumerate() {
        // Regions are created after their parents, so a parent's depth is known.
        depth[id] = region
            .parent
            .and_then(|p| depth.get(p).copied())
            .map_or(0, |d| d + 1);
    }
    depth.into_iter().max().unwrap_or(0)
}

/// Prints one graph; owns the SSA names.
pub(crate) struct Printer<'g> {
    pub(crate) g: &'g Graph,
    /// Which nodes the results depend on; the others are not printed.
    live: Vec<bool>,
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
            live: g.live_nodes(),
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

    /// Writes the indentation of a line `indent` levels deep (capped, so
    /// deeply nested programs do not grow quadratically in white space).
    pub(crate) fn indent(&mut self, indent: usize) {
        for _ in 0..indent.min(MAX_INDENT) {
            self.out.push_str("  ");
        }
    }

    pub(crate) fn line(&mut self, indent: usize, text: &str) {
        self.indent(indent);
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
        let replicas = g.replicas.max(1);
        self.line(0, &format!("module @{sym} attributes {{mhlo.num_partitions = {partitions} : i32, mhlo.num_replicas = {replicas} : i32}} {{"));
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
            if self.live[n] {
                self.node(n, indent);
            }
        }
    }

    /// Writes a nested region of the graph in place:
    /// `{ ^bb0(args): body; stablehlo.return results }`, each line written
    /// once (never copied into its parent), so lowering is linear in the
    /// program's size whatever its nesting depth.
    fn nested_region_into(&mut self, region: RegionId, indent: usize) {
        let g = self.g;
        let r = &g.regions[region];
        self.out.push_str("{\n");
        if !r.args.is_empty() {
            let args: Vec<String> = r
                .args
                .iter()
                .map(|&v| format!("{}: {}", self.name(v), self.ty(v)))
                .collect();
            self.line(indent + 1, &format!("^bb0({}):", args.join(", ")));
        }
        self.region_body(region, indent + 2);
        let names: Vec<&str> = r.results.iter().map(|&v| self.name(v)).collect();
        let tys: Vec<String> = r.results.iter().map(|&v| self.ty(v)).collect();
        let ret = format!(
            "\"stablehlo.return\"({}) : ({}) -> ()",
            names.join(", "),
            tys.join(", ")
        );
        self.line(indent + 2, &ret);
        self.indent(indent);
        self.out.push('}');
    }

    fn node(&mut self, id: NodeId, indent: usize) {
        let g = self.g;
        let node = &g.nodes[id];
        if let Op::Clamp = node.op {
            self.clamp(id, indent);
            return;
        }
        let separate = match node.op {
            Op::Scatter { .. } => self.separate_indices(id, indent),
            _ => None,
        };
        let (name, attrs, regions) = attrs::op_parts(self, id, indent);
        let mut operands: Vec<&str> = node.operands.iter().map(|&v| self.name(v)).collect();
        let mut in_tys: Vec<String> = node.operands.iter().map(|&v| self.ty(v)).collect();
        if let Some((indices, ty)) = &separate {
            operands[1] = indices;
            in_tys[1] = ty.clone();
        }
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
        let head = format!("{lhs}\"{name}\"({})", operands.join(", "));
        self.indent(indent);
        self.out.push_str(&head);
        if !regions.is_empty() {
            self.out.push_str(" (");
            for (i, region) in regions.into_iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                match region {
                    RegionText::Text(text) => self.out.push_str(&text),
                    RegionText::Graph(r) => self.nested_region_into(r, indent),
                }
            }
            self.out.push(')');
        }
        let mut text = String::new();
        if !attrs.is_empty() {
            let _ = write!(text, " {{{attrs}}}");
        }
        let op_name = name.rsplit('.').next().unwrap_or(&name);
        let _ = write!(
            text,
            " : ({}) -> {outs} {}",
            in_tys.join(", "),
            location(op_name, &node.location)
        );
        self.out.push_str(&text);
        self.out.push('\n');
    }

    /// The indices of scatter `id` converted to another integer type, when
    /// they could share the operand's buffer (same element type and count):
    /// the name and type of the converted indices, written before the
    /// scatter.
    ///
    /// The CPU plugin's XLA updates a scatter's operand in place and reads
    /// the indices from the same buffer when they are one value (also after
    /// its simplifier made them one: a reshape of the operand, a sort along
    /// an axis of 1), so indices the scatter has already overwritten are
    /// read: `x.index_update(1, x, u, Mul)` for `x = [[0, 0, 0, 5, 0, 1, 0]]`
    /// and `u` all zeros but a 3 at position 3 gave a 0 at position 3, which
    /// no index names (JAX 0.12's XLA gives the right `[[0, 0, 0, 5, 0, 3,
    /// 0]]`). A conversion is a new buffer the scatter cannot write. Indices
    /// inside the operand keep their values, and indices outside it stay
    /// outside (s64 and u64 swap, which turns a negative index into one
    /// above 2^63 and back).
    fn separate_indices(&mut self, id: NodeId, indent: usize) -> Option<(String, String)> {
        let g = self.g;
        let node = &g.nodes[id];
        let (operand, indices) = (node.operands[0], node.operands[1]);
        let (o, i) = (&g.values[operand].spec, &g.values[indices].spec);
        if o.dtype != i.dtype || o.num_elements() != i.num_elements() {
            return None;
        }
        let to = match i.dtype {
            DType::S32 | DType::U32 | DType::U64 => DType::S64,
            DType::S64 => DType::U64,
            _ => DType::S32,
        };
        let to_ty = TensorSpec::new(i.shape.clone(), to).mlir_type();
        let out = self.fresh();
        let text = format!(
            "{out} = \"stablehlo.convert\"({}) : ({}) -> {to_ty} {}",
            self.name(indices),
            self.ty(indices),
            location("scatter", &node.location)
        );
        self.line(indent, &text);
        Some((out, to_ty))
    }

    /// `clamp(lo, x, hi)` as `minimum(maximum(x, lo), hi)`, the op's
    /// definition. XLA's simplifier treats `stablehlo.clamp` as if
    /// `lo <= hi` always held (it folds `maximum(clamp(lo, x, hi), lo)` to
    /// the clamp, which is `hi` when `lo > hi`), so the op itself is never
    /// emitted: the pair gives the defined result for every bound.
    fn clamp(&mut self, id: NodeId, indent: usize) {
        let node = &self.g.nodes[id];
        let [lo, x, hi] = [0, 1, 2].map(|i| self.name(node.operands[i]).to_string());
        let ty = self.ty(node.results[0]);
        let loc = location("clamp", &node.location);
        let raised = self.fresh();
        let out = self.name(node.results[0]).to_string();
        let ops = [
            (&raised, "maximum", &x, &lo),
            (&out, "minimum", &raised, &hi),
        ];
        for (result, op, a, b) in ops {
            let text =
                format!("{result} = \"stablehlo.{op}\"({a}, {b}) : ({ty}, {ty}) -> {ty} {loc}");
            self.line(indent, &text);
        }
    }
}

/// The MLIR location of an op from the user's source: `loc("op"(file:line:col))`.
fn location(op: &str, loc: &Location) -> String {
    format!(
        "loc({}({}:{}:{}))",
        quote(op),
        quote(&loc.file),
        loc.line,
        loc.column
    )
}

/// A region of an op as lowering prints it: small fixed regions (reduction
/// combiners, comparators) as text, the graph's own regions (loop and branch
/// bodies) by id, written in place.
pub(crate) enum RegionText {
    /// Already printed.
    Text(String),
    /// A region of the graph.
    Graph(RegionId),
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
