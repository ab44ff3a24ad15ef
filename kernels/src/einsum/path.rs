//! The order in which an einsum of several operands contracts them, two at
//! a time, chosen by cost as opt_einsum does: every order for a few
//! operands, a greedy choice for more.

use tessel::HostError;

use super::parse::{parse, show, Equation};

/// Up to this many operands every pairwise order is tried; past it the
/// order is greedy.
pub const OPTIMAL_UP_TO: usize = 6;

/// How an [`EinsumPath`] was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathStrategy {
    /// The order of least cost among all pairwise orders (at most
    /// [`OPTIMAL_UP_TO`] operands).
    Optimal,
    /// At each step, the pair whose contraction shrinks the operands the
    /// most (opt_einsum's greedy rule), ties broken by cost.
    Greedy,
}

/// The contraction order of an einsum, in opt_einsum's convention: step
/// `(i, j)` contracts the operands at positions `i < j` of the current
/// list, removes them and appends the result.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumPath {
    /// The pairwise contractions, in order (`n - 1` of them for `n`
    /// operands, none for one).
    pub steps: Vec<(usize, usize)>,
    /// How the order was chosen.
    pub strategy: PathStrategy,
    /// Multiply-adds of the path: per step, the product of the extents of
    /// every label its two operands carry.
    pub cost: f64,
    /// Multiply-adds of one summation over every label at once.
    pub naive_cost: f64,
    /// Elements of the largest intermediate result.
    pub largest_intermediate: f64,
    /// The steps as equations (`"ij,jk->ik"`, ellipsis axes as `...[k]`).
    pub equations: Vec<String>,
}

/// A set of labels (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Labels([u64; 4]);

impl Labels {
    pub fn of(labels: &[u8]) -> Labels {
        let mut s = Labels::default();
        for &l in labels {
            s.0[(l / 64) as usize] |= 1 << (l % 64);
        }
        s
    }
    pub fn union(self, o: Labels) -> Labels {
        Labels(std::array::from_fn(|i| self.0[i] | o.0[i]))
    }
    fn and(self, o: Labels) -> Labels {
        Labels(std::array::from_fn(|i| self.0[i] & o.0[i]))
    }
    pub fn contains(self, l: u8) -> bool {
        self.0[(l / 64) as usize] & (1 << (l % 64)) != 0
    }
    fn iter(self) -> impl Iterator<Item = u8> {
        (0..=255u8).filter(move |&l| self.contains(l))
    }
    fn size(self, extent: &[usize; 256]) -> f64 {
        self.iter().map(|l| extent[l as usize] as f64).product()
    }
}

/// One pairwise contraction of `ops[i]` and `ops[j]`: its cost, the
/// labels of its result, and the result's size.
fn contract(ops: &[Labels], i: usize, j: usize, output: Labels, e: &[usize; 256]) -> (f64, Labels) {
    let keep = ops
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != i && k != j)
        .fold(output, |acc, (_, &s)| acc.union(s));
    let both = ops[i].union(ops[j]);
    (both.size(e), both.and(keep))
}

/// The rest of `ops` with `i < j` replaced by `result` at the end.
fn after(ops: &[Labels], i: usize, j: usize, result: Labels) -> Vec<Labels> {
    let mut next: Vec<Labels> = ops
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != i && k != j)
        .map(|(_, &s)| s)
        .collect();
    next.push(result);
    next
}

/// A path found: its cost, its largest intermediate and its steps.
type Found = (f64, f64, Vec<(usize, usize)>);

/// The cheapest order (cost, then largest intermediate) of `ops`.
fn optimal(ops: &[Labels], output: Labels, e: &[usize; 256]) -> Found {
    if ops.len() < 2 {
        return (0.0, 0.0, Vec::new());
    }
    let mut best: Option<Found> = None;
    for j in 1..ops.len() {
        for i in 0..j {
            let (cost, result) = contract(ops, i, j, output, e);
            let (rest, largest, mut steps) = optimal(&after(ops, i, j, result), output, e);
            let (total, largest) = (cost + rest, largest.max(result.size(e)));
            if best.as_ref().is_none_or(|b| (total, largest) < (b.0, b.1)) {
                steps.insert(0, (i, j));
                best = Some((total, largest, steps));
            }
        }
    }
    best.unwrap_or((0.0, 0.0, Vec::new()))
}

/// opt_einsum's greedy order: each step takes the pair whose result is
/// smallest against its two operands, ties broken by cost.
fn greedy(ops: &[Labels], output: Labels, e: &[usize; 256]) -> Found {
    let mut ops = ops.to_vec();
    let (mut total, mut largest, mut steps) = (0.0, 0.0f64, Vec::new());
    while ops.len() > 1 {
        let mut pick: Option<(f64, f64, usize, usize, Labels)> = None;
        for j in 1..ops.len() {
            for i in 0..j {
                let (cost, result) = contract(&ops, i, j, output, e);
                let gain = result.size(e) - ops[i].size(e) - ops[j].size(e);
                if pick.is_none_or(|p| (gain, cost) < (p.0, p.1)) {
                    pick = Some((gain, cost, i, j, result));
                }
            }
        }
        let Some((_, cost, i, j, result)) = pick else {
            break;
        };
        total += cost;
        largest = largest.max(result.size(e));
        steps.push((i, j));
        ops = after(&ops, i, j, result);
    }
    (total, largest, steps)
}

/// The operands' label sets as the path sees them: each operand's labels
/// once, without those only it carries that the output drops (they are
/// summed before any contraction).
pub(super) fn operand_sets(eq: &Equation) -> Vec<Labels> {
    let output = Labels::of(&eq.output);
    (0..eq.inputs.len())
        .map(|k| {
            let others = eq
                .inputs
                .iter()
                .enumerate()
                .filter(|&(o, _)| o != k)
                .fold(output, |acc, (_, l)| acc.union(Labels::of(l)));
            Labels::of(&eq.inputs[k]).and(others)
        })
        .collect()
}

/// The path of a parsed equation.
/// The pairwise order of a parsed equation (what a kernel traces), with
/// its cost, largest intermediate and how it was chosen.
pub(super) fn order(eq: &Equation) -> (Found, PathStrategy) {
    let ops = operand_sets(eq);
    let output = Labels::of(&eq.output);
    if ops.len() <= OPTIMAL_UP_TO {
        (optimal(&ops, output, &eq.extent), PathStrategy::Optimal)
    } else {
        (greedy(&ops, output, &eq.extent), PathStrategy::Greedy)
    }
}

/// The path of a parsed equation, as [`einsum_path`] reports it: the
/// order and each step written as an equation.
fn plan(eq: &Equation) -> EinsumPath {
    let ((cost, largest, steps), strategy) = order(eq);
    let ops = operand_sets(eq);
    let output = Labels::of(&eq.output);
    let all = eq
        .inputs
        .iter()
        .fold(Labels::default(), |acc, l| acc.union(Labels::of(l)));
    let text = |s: Labels| s.iter().map(show).collect::<String>();
    let mut current = ops;
    let mut equations = Vec::new();
    for &(i, j) in &steps {
        let (_, result) = contract(&current, i, j, output, &eq.extent);
        equations.push(format!(
            "{},{}->{}",
            text(current[i]),
            text(current[j]),
            text(result)
        ));
        current = after(&current, i, j, result);
    }
    EinsumPath {
        steps,
        strategy,
        cost,
        naive_cost: all.size(&eq.extent),
        largest_intermediate: largest,
        equations,
    }
}

/// The order [`einsum_n`](fn@super::einsum_n) contracts operands of these
/// shapes in, and what it costs (opt_einsum's `contract_path`, JAX's
/// `jnp.einsum_path`). The same rules as the kernel: a malformed equation
/// is an error here too.
///
/// ```
/// use tessel_kernels::einsum::{einsum_path, PathStrategy};
/// // A chain of three matrices: (a·b)·c is cheaper than a·(b·c) here.
/// let p = einsum_path("ij,jk,kl->il", &[&[2, 100], &[100, 3], &[3, 50]])?;
/// assert_eq!(p.steps, [(0, 1), (0, 1)]);
/// assert_eq!(p.equations, ["ij,jk->ik", "kl,ik->il"]);
/// assert_eq!(p.cost, 2.0 * 100.0 * 3.0 + 2.0 * 3.0 * 50.0);
/// assert_eq!(p.strategy, PathStrategy::Optimal);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn einsum_path(equation: &str, shapes: &[&[usize]]) -> tessel::Result<EinsumPath> {
    let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
    let eq = parse(equation, &shapes).map_err(|message| HostError::InvalidInput {
        what: "einsum equation",
        message: format!("{equation:?}: {message}"),
    })?;
    Ok(plan(&eq))
}
