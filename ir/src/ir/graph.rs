//! The traced program: values, nodes (ops) and regions, as a flat arena.
//!
//! A [`Graph`] is what tracing produces and lowering consumes. Region 0 is the
//! function body (`@main`); `while` and `if` ops own nested regions.

use std::sync::Arc;

use crate::error::Location;
use crate::ir::check::{check_outputs, CheckSite};
use crate::ir::tree::TreeDef;
use crate::ir::{GraphShardings, Op};
use crate::shape::TensorSpec;

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;
/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;
/// Index of a region in [`Graph::regions`].
pub type RegionId = usize;

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Def {
    /// An argument of a region (for region 0: a kernel parameter).
    Arg {
        /// The region.
        region: RegionId,
        /// Position among the region's arguments.
        index: usize,
    },
    /// Result `index` of a node.
    Result {
        /// The node.
        node: NodeId,
        /// Position among the node's results.
        index: usize,
    },
    /// A value made by an op that failed to trace; never lowered.
    Poisoned,
}

/// One SSA value.
#[derive(Clone, Debug)]
pub struct Value {
    /// Its type.
    pub spec: TensorSpec,
    /// The region it is defined in.
    pub region: RegionId,
    /// How it is defined.
    pub def: Def,
}

/// One op application.
#[derive(Clone, Debug)]
pub struct Node {
    /// The op and its static attributes.
    pub op: Op,
    /// Operand values (all visible in the node's region).
    pub operands: Vec<ValueId>,
    /// Result values.
    pub results: Vec<ValueId>,
    /// Nested regions (while: cond, body; if: then, else).
    pub regions: Vec<RegionId>,
    /// The user's source line.
    pub location: Location,
}

/// How a region sees values defined outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// The function body.
    Func,
    /// A loop region: outer values are threaded through as extra block
    /// arguments (explicit capture).
    Explicit,
    /// A branch region: outer values are used directly (implicit capture).
    Implicit,
}

/// A block of nodes with arguments and results.
#[derive(Clone, Debug)]
pub struct Region {
    /// The enclosing region (`None` for the function body).
    pub parent: Option<RegionId>,
    /// Capture mode.
    pub kind: RegionKind,
    /// Block arguments.
    pub args: Vec<ValueId>,
    /// Nodes, in order.
    pub nodes: Vec<NodeId>,
    /// Values returned by the region's terminator.
    pub results: Vec<ValueId>,
    /// For explicit regions: (value in the parent region, block argument here).
    pub captures: Vec<(ValueId, ValueId)>,
}

/// A traced kernel: the input of lowering.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The kernel's name.
    pub name: String,
    /// Parameter names, one per argument of `@main`.
    pub param_names: Vec<String>,
    /// Every value.
    pub values: Vec<Value>,
    /// Every node.
    pub nodes: Vec<Node>,
    /// Every region; region 0 is the function body.
    pub regions: Vec<Region>,
    /// Donated parameters: (parameter index, result index) pairs whose
    /// buffers XLA may reuse for that result.
    pub aliases: Vec<(usize, usize)>,
    /// The shardings of `@main`'s arguments and results, for a program run
    /// over a device mesh (`None`: one device).
    pub shardings: Option<GraphShardings>,
    /// How many devices run the program as replicas, each on its own
    /// (local) arguments: 1, or the mesh size of a `shard_map` kernel, whose
    /// collectives name replica groups.
    pub replicas: usize,
    /// The program's checks, reported by its last results (see
    /// [`CheckSite`]); empty for a program without checks, whose results
    /// are all the body's.
    pub checks: Vec<CheckSite>,
    /// The structure of what the kernel body returned (a tensor, a tuple, a
    /// `#[derive(Tree)]` struct, ...), over its body results; `None` for a
    /// graph not built by tracing.
    pub output_tree: Option<Arc<TreeDef>>,
}

impl Graph {
    /// Marks the parameters named in `donate` as donated, each to the first
    /// result of the same type not yet taken. Returns the names that found
    /// no such result or are not parameters.
    pub fn donate(&mut self, donate: &[&str]) -> Vec<String> {
        let mut outs = self.output_specs();
        outs.truncate(self.num_body_outputs());
        let ins = self.input_specs();
        let mut missing = Vec::new();
        for name in donate {
            let params: Vec<usize> = (0..self.param_names.len())
                .filter(|&i| within(&self.param_names[i], name))
                .collect();
            if params.is_empty() {
                missing.push((*name).to_string());
            }
            for p in params {
                let free = (0..outs.len())
                    .find(|&o| outs[o] == ins[p] && !self.aliases.iter().any(|&(_, t)| t == o));
                match free {
                    Some(o) => self.aliases.push((p, o)),
                    None => missing.push((*name).to_string()),
                }
            }
        }
        missing
    }

    /// Marks the parameters at `indices` as donated, each to the first
    /// body result of the same type not yet taken. Returns the indices that
    /// found no such result or are past the parameters.
    pub fn donate_indices(&mut self, indices: &[usize]) -> Vec<usize> {
        let mut outs = self.output_specs();
        outs.truncate(self.num_body_outputs());
        let ins = self.input_specs();
        let mut missing = Vec::new();
        for &p in indices {
            let Some(spec) = ins.get(p) else {
                missing.push(p);
                continue;
            };
            let free = (0..outs.len())
                .find(|&o| outs[o] == *spec && !self.aliases.iter().any(|&(_, t)| t == o));
            match free {
                Some(o) if !self.aliases.iter().any(|&(q, _)| q == p) => self.aliases.push((p, o)),
                Some(_) => {}
                None => missing.push(p),
            }
        }
        missing
    }

    /// An empty graph whose body takes parameters of the given types.
    pub fn new(name: &str, params: &[(String, TensorSpec)]) -> Graph {
        let mut g = Graph {
            name: name.to_string(),
            param_names: params.iter().map(|(n, _)| n.clone()).collect(),
            values: Vec::new(),
            nodes: Vec::new(),
            regions: vec![Region {
                parent: None,
                kind: RegionKind::Func,
                args: Vec::new(),
                nodes: Vec::new(),
                results: Vec::new(),
                captures: Vec::new(),
            }],
            aliases: Vec::new(),
            shardings: None,
            replicas: 1,
            checks: Vec::new(),
            output_tree: None,
        };
        for (_, spec) in params {
            g.add_arg(0, spec.clone());
        }
        g
    }

    /// Adds a block argument of `spec` to `region`.
    pub fn add_arg(&mut self, region: RegionId, spec: TensorSpec) -> ValueId {
        let id = self.values.len();
        let index = self.regions[region].args.len();
        self.values.push(Value {
            spec,
            region,
            def: Def::Arg { region, index },
        });
        self.regions[region].args.push(id);
        id
    }

    /// Adds a value that stands for the result of a failed op.
    pub fn add_poisoned(&mut self, region: RegionId, spec: TensorSpec) -> ValueId {
        let id = self.values.len();
        self.values.push(Value {
            spec,
            region,
            def: Def::Poisoned,
        });
        id
    }

    /// Opens a new region under `parent`.
    pub fn add_region(&mut self, parent: RegionId, kind: RegionKind) -> RegionId {
        self.regions.push(Region {
            parent: Some(parent),
            kind,
            args: Vec::new(),
            nodes: Vec::new(),
            results: Vec::new(),
            captures: Vec::new(),
        });
        self.regions.len() - 1
    }

    /// Appends a node to `region`, creating its result values.
    pub fn add_node(
        &mut self,
        region: RegionId,
        op: Op,
        operands: Vec<ValueId>,
        result_specs: Vec<TensorSpec>,
        regions: Vec<RegionId>,
        location: Location,
    ) -> Vec<ValueId> {
        let node = self.nodes.len();
        let mut results = Vec::with_capacity(result_specs.len());
        for (index, spec) in result_specs.into_iter().enumerate() {
            results.push(self.values.len());
            self.values.push(Value {
                spec,
                region,
                def: Def::Result { node, index },
            });
        }
        self.nodes.push(Node {
            op,
            operands,
            results: results.clone(),
            regions,
            location,
        });
        self.regions[region].nodes.push(node);
        results
    }

    /// Whether `ancestor` is `region` or encloses it.
    pub fn encloses(&self, ancestor: RegionId, mut region: RegionId) -> bool {
        loop {
            if region == ancestor {
                return true;
            }
            match self.regions[region].parent {
                Some(p) => region = p,
                None => return false,
            }
        }
    }

    /// The parameter types of `@main`.
    pub fn input_specs(&self) -> Vec<TensorSpec> {
        self.regions[0]
            .args
            .iter()
            .map(|&v| self.values[v].spec.clone())
            .collect()
    }

    /// The result types of `@main`.
    pub fn output_specs(&self) -> Vec<TensorSpec> {
        self.regions[0]
            .results
            .iter()
            .map(|&v| self.values[v].spec.clone())
            .collect()
    }

    /// How many of `@main`'s results the body returned: all of them but
    /// the checks' (see [`CheckSite`]).
    pub fn num_body_outputs(&self) -> usize {
        self.regions[0].results.len() - check_outputs(&self.checks)
    }

    /// Number of ops, counting those in nested regions.
    pub fn num_ops(&self) -> usize {
        self.nodes.len()
    }

    /// Which nodes `@main`'s results depend on: a node is live when one of
    /// its results feeds a live node, a live node's nested region (its
    /// results, or an outer value its nodes read) or `@main`'s results.
    /// Every op of the op set is free of side effects, so a node that is not
    /// live can be left out of the program (a `vmap`'s one-example trace,
    /// the forward values a gradient does not read).
    ///
    /// Each region's nodes are walked last to first (the order a region
    /// lists them is one its values are defined in, even after a rewrite
    /// inserts nodes), and a live node's regions are walked before the nodes
    /// above it, since their nodes may read values defined there. The walk
    /// keeps its own stack, so deep nesting needs no deep call stack.
    pub fn live_nodes(&self) -> Vec<bool> {
        let mut used = vec![false; self.values.len()];
        let mut live = vec![false; self.nodes.len()];
        // Ids out of range (a malformed graph) are skipped: whoever reads
        // the graph next reports them.
        let mark = |used: &mut Vec<bool>, v: ValueId| {
            if let Some(u) = used.get_mut(v) {
                *u = true;
            }
        };
        let Some(body) = self.regions.first() else {
            return live;
        };
        for &v in &body.results {
            mark(&mut used, v);
        }
        // (region, how many of its nodes, from the front, are left to walk);
        // a region already on the stack is not entered again (a malformed
        // graph may nest a region inside itself).
        let mut stack = vec![(0usize, body.nodes.len())];
        let mut walking = vec![false; self.regions.len()];
        walking[0] = true;
        while let Some(top) = stack.last_mut() {
            let (region, left) = *top;
            if left == 0 {
                walking[region] = false;
                stack.pop();
                continue;
            }
            top.1 -= 1;
            let id = self.regions[region].nodes[left - 1];
            let Some(node) = self.nodes.get(id) else {
                continue;
            };
            if !node
                .results
                .iter()
                .any(|&r| used.get(r).copied().unwrap_or(false))
            {
                continue;
            }
            live[id] = true;
            for &v in &node.operands {
                mark(&mut used, v);
            }
            for &r in &node.regions {
                let Some(inner) = self.regions.get(r) else {
                    continue;
                };
                for &v in &inner.results {
                    mark(&mut used, v);
                }
                for &(outer, _) in &inner.captures {
                    mark(&mut used, outer);
                }
                if !std::mem::replace(&mut walking[r], true) {
                    stack.push((r, inner.nodes.len()));
                }
            }
        }
        live
    }
}

/// Whether the parameter `param` is `name` or a leaf of the tree parameter
/// `name` (`state` covers `state.layers.0.wq`).
fn within(param: &str, name: &str) -> bool {
    param
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}
