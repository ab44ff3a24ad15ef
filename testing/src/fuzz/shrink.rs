//! Shrinking a failing case: edits that keep the failure are kept, until
//! none helps or the budget is spent. In order: keep the first output that
//! differs (after making every value an output), replace instructions by
//! parameters holding their values, inline branches, shorten loops, drop
//! instructions inside blocks, shrink parameters' shapes, and set argument
//! elements to 0 or 1. Candidates lose their unused instructions, unless
//! the case fails only with them.

use std::time::{Duration, Instant};

use tessel_dsl::{HostTensor, TensorSpec};

use super::check::{check, failing_outputs, interpret, Verdict};
use super::generate::all_outputs;
use super::program::{Block, Bound, Case, Inst, Op, Program, V};
use super::types::retype;

/// How much effort a shrink may spend.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Candidate cases evaluated (each may compile a kernel).
    pub tries: usize,
    /// Wall time.
    pub time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            tries: 600,
            time: Duration::from_secs(120),
        }
    }
}

/// A shrunk case and what still differs.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest failing case found (values renumbered from 0).
    pub case: Case,
    /// Its verdict's message.
    pub message: String,
    /// Candidates evaluated.
    pub tries: usize,
}

/// Instructions that replace one, and renames (old value, new value) to
/// apply after.
type Edit = (Vec<Inst>, Vec<(V, V)>);

/// Whether a candidate still fails, and its message if so.
pub type Fails<'a> = &'a dyn Fn(&Case) -> Option<String>;

struct Shrinker<'a> {
    best: Case,
    message: String,
    tries: usize,
    budget: Budget,
    start: Instant,
    fails: Fails<'a>,
    /// Whether candidates lose their unused instructions before they are
    /// tried (see [`Shrinker::choose_pruning`]).
    prune: bool,
}

impl<'a> Shrinker<'a> {
    fn new(case: &Case, message: &str, budget: Budget, fails: Fails<'a>) -> Self {
        Shrinker {
            best: case.clone(),
            message: message.to_string(),
            tries: 0,
            budget,
            start: Instant::now(),
            fails,
            prune: true,
        }
    }

    /// Prunes every candidate if the case pruned of its unused instructions
    /// still fails (and keeps that form), and no candidate otherwise: such a
    /// failure needs code nothing reads (a gradient traced through a loop
    /// body that computes from a capture and drops the result), and pruning
    /// every candidate would undo each edit's progress.
    fn choose_pruning(&mut self) {
        let mut c = self.best.clone();
        c.program.prune(Some(&mut c.args));
        if c.program != self.best.program {
            self.prune = self.attempt(c);
        }
    }

    fn spent(&self) -> bool {
        self.tries >= self.budget.tries || self.start.elapsed() >= self.budget.time
    }

    /// Keeps `c` if it still fails.
    fn attempt(&mut self, mut c: Case) -> bool {
        if self.spent() {
            return false;
        }
        if self.prune {
            c.program.prune(Some(&mut c.args));
        }
        if retype(&mut c.program).is_err() {
            return false;
        }
        self.tries += 1;
        match (self.fails)(&c) {
            Some(m) => {
                self.best = c;
                self.message = m;
                true
            }
            None => false,
        }
    }

    /// Keeps only one output, the first that fails alone.
    fn one_output(&mut self) {
        for i in 0..self.best.program.outputs.len() {
            let mut c = self.best.clone();
            c.program.outputs = vec![c.program.outputs[i]];
            if self.attempt(c) {
                return;
            }
        }
    }

    /// Keeps only the first output that differs.
    fn first_output(&mut self) {
        let mut c = self.best.clone();
        c.program = all_outputs(&c.program);
        if let Some(&i) = failing_outputs(&c).first() {
            c.program.outputs = vec![c.program.outputs[i]];
            if self.attempt(c) {
                return;
            }
        }
        if let Some(&i) = failing_outputs(&self.best).first() {
            let mut c = self.best.clone();
            c.program.outputs = vec![c.program.outputs[i]];
            self.attempt(c);
        }
    }

    /// Replaces top-level instructions by parameters holding their values.
    fn insts_as_params(&mut self) -> bool {
        let mut progress = false;
        let mut i = self.best.program.insts.len();
        while i > 0 {
            i -= 1;
            let Some(inst) = self.best.program.insts.get(i).cloned() else {
                continue;
            };
            let outs: Vec<V> = self.best.program.outputs.iter().map(|o| o.value).collect();
            if inst.outs.iter().any(|v| outs.contains(v)) {
                continue;
            }
            let Ok(values) = interpret(&self.best, &inst.outs) else {
                continue;
            };
            let mut c = self.best.clone();
            c.program.insts.remove(i);
            for (&o, value) in inst.outs.iter().zip(values) {
                let spec = c.program.spec(o).clone();
                let p = c.program.fresh(spec);
                c.program.params.push(p);
                c.args.push(value);
                rename(&mut c.program, o, p);
            }
            progress |= self.attempt(c);
        }
        progress
    }

    /// Inlines branches, shortens loops and drops block instructions.
    fn blocks(&mut self) -> bool {
        let mut progress = false;
        for i in 0..self.best.program.insts.len() {
            let Some(inst) = self.best.program.insts.get(i).cloned() else {
                break;
            };
            let mut candidates: Vec<Edit> = Vec::new();
            match &inst.op {
                Op::Cond {
                    then, otherwise, ..
                } => {
                    for b in [then, otherwise] {
                        candidates.push(inline(&inst, b));
                    }
                }
                Op::Fori { lo, hi, init, body } => {
                    let trips: Vec<i32> = match hi {
                        Bound::Static(n) => (*lo..*n).collect(),
                        Bound::Traced(_) => (*lo..=*lo + 1).collect(),
                    };
                    for n in trips {
                        let op = Op::Fori {
                            lo: *lo,
                            hi: Bound::Static(n),
                            init: init.clone(),
                            body: body.clone(),
                        };
                        let outs = inst.outs.clone();
                        candidates.push((vec![Inst { outs, op }], Vec::new()));
                    }
                }
                _ => {}
            }
            for (bi, b) in inst.op.blocks().iter().enumerate() {
                for j in 0..b.insts.len() {
                    for with in self.replacements(b, j) {
                        let mut edited = inst.clone();
                        let blk = &mut edited.op.blocks_mut()[bi];
                        let old = blk.insts[j].outs[0];
                        blk.insts.remove(j);
                        blk.map_uses(&mut |x| {
                            if *x == old {
                                *x = with;
                            }
                        });
                        candidates.push((vec![edited], Vec::new()));
                    }
                }
            }
            for (replacement, renames) in candidates {
                let mut c = self.best.clone();
                if c.program.insts.get(i) != Some(&inst) {
                    break;
                }
                c.program.insts.splice(i..=i, replacement);
                for (old, new) in renames {
                    rename(&mut c.program, old, new);
                }
                if self.attempt(c) {
                    progress = true;
                    break;
                }
            }
        }
        progress
    }

    /// Values that could stand for the single result of instruction `j`
    /// of block `b`: the block's parameters and the program's of its type.
    fn replacements(&self, b: &Block, j: usize) -> Vec<V> {
        let p = &self.best.program;
        let [out] = b.insts[j].outs[..] else {
            return Vec::new();
        };
        b.params
            .iter()
            .chain(&p.params)
            .copied()
            .filter(|&v| p.specs[v] == p.specs[out])
            .take(2)
            .collect()
    }

    /// Shrinks each axis of each parameter (its argument keeps the first
    /// elements).
    fn shapes(&mut self) -> bool {
        let mut progress = false;
        for k in 0..self.best.program.params.len() {
            let rank = self.best.args[k].shape().len();
            for axis in 0..rank {
                let e = self.best.args[k].shape()[axis];
                let mut sizes = vec![0, 1, e / 2, e - e.min(1)];
                sizes.sort_unstable();
                sizes.dedup();
                for n in sizes.into_iter().filter(|&n| n < e) {
                    let mut c = self.best.clone();
                    let Some(&p) = c.program.params.get(k) else {
                        break;
                    };
                    let mut shape = c.args[k].shape().to_vec();
                    shape[axis] = n;
                    c.args[k] = cut(&c.args[k], &shape);
                    c.program.specs[p] = TensorSpec::new(shape, c.args[k].dtype());
                    if self.attempt(c) {
                        progress = true;
                        break;
                    }
                }
            }
        }
        progress
    }

    /// Sets argument elements to 0, else to 1.
    fn values(&mut self) -> bool {
        let mut progress = false;
        for k in 0..self.best.args.len() {
            let n = self.best.args[k].num_elements();
            for j in 0..n {
                for target in [0.0, 1.0] {
                    let Some(a) = self.best.args.get(k) else {
                        return progress;
                    };
                    let mut vals = a.to_f64_vec();
                    if vals[j] == target {
                        break;
                    }
                    vals[j] = target;
                    let mut c = self.best.clone();
                    c.args[k] = HostTensor::from_fn(a.spec().clone(), |i| vals[i]);
                    if self.attempt(c) {
                        progress = true;
                        break;
                    }
                }
            }
        }
        progress
    }
}

/// The first elements of `t` along each axis: a tensor of `shape`.
fn cut(t: &HostTensor, shape: &[usize]) -> HostTensor {
    let old = t.shape().to_vec();
    let vals = t.to_f64_vec();
    HostTensor::from_fn(TensorSpec::new(shape.to_vec(), t.dtype()), |mut i| {
        let mut flat = 0;
        let mut stride = 1;
        for a in (0..shape.len()).rev() {
            let idx = i % shape[a];
            i /= shape[a];
            flat += idx * stride;
            stride *= old[a];
        }
        vals[flat]
    })
}

/// Replaces every read of `old` in `p` by `new`.
fn rename(p: &mut Program, old: V, new: V) {
    let mut f = |x: &mut V| {
        if *x == old {
            *x = new;
        }
    };
    for inst in &mut p.insts {
        inst.map_uses(&mut f);
    }
    for o in &mut p.outputs {
        f(&mut o.value);
    }
}

/// The instructions of branch `b` of `cond`, spliced in its place, and the
/// renames that make the branch's results stand for the conditional's.
fn inline(cond: &Inst, b: &Block) -> (Vec<Inst>, Vec<(V, V)>) {
    let renames = cond
        .outs
        .iter()
        .copied()
        .zip(b.results.iter().copied())
        .collect();
    (b.insts.clone(), renames)
}

/// `p` with its values numbered 0, 1, ... in the order they are defined.
pub fn renumber(p: &Program) -> Program {
    let mut map = vec![usize::MAX; p.specs.len()];
    let mut specs = Vec::new();
    let mut def = |v: V, map: &mut Vec<usize>| {
        map[v] = specs.len();
        specs.push(p.specs[v].clone());
    };
    for &v in &p.params {
        def(v, &mut map);
    }
    fn walk(insts: &[Inst], map: &mut Vec<usize>, def: &mut dyn FnMut(V, &mut Vec<usize>)) {
        for inst in insts {
            for b in inst.op.blocks() {
                for &v in &b.params {
                    def(v, map);
                }
                walk(&b.insts, map, def);
            }
            for &v in &inst.outs {
                def(v, map);
            }
        }
    }
    walk(&p.insts, &mut map, &mut def);
    let mut q = p.clone();
    let f = |x: &mut V| *x = map[*x];
    fn apply(insts: &mut [Inst], f: &dyn Fn(&mut V)) {
        for inst in insts {
            inst.outs.iter_mut().for_each(f);
            inst.op.map_operands(&mut |x| f(x));
            for b in inst.op.blocks_mut() {
                b.params.iter_mut().for_each(f);
                b.results.iter_mut().for_each(f);
                apply(&mut b.insts, f);
            }
        }
    }
    apply(&mut q.insts, &f);
    q.params.iter_mut().for_each(f);
    for o in &mut q.outputs {
        f(&mut o.value);
    }
    q.specs = specs;
    q
}

/// Shrinks `case`, on which the interpreter and the plugin differ, within
/// `budget`.
pub fn shrink(case: &Case, message: &str, budget: Budget) -> Shrunk {
    let fails = |c: &Case| match check(c) {
        Verdict::Mismatch(m) => Some(m),
        _ => None,
    };
    let mut s = Shrinker::new(case, message, budget, &fails);
    s.choose_pruning();
    s.first_output();
    finish(s)
}

/// Shrinks `case`, which fails as `fails` tells (its message if it does),
/// within `budget`: the same edits as [`shrink`], keeping one output that
/// fails alone first.
pub fn shrink_with(case: &Case, message: &str, budget: Budget, fails: Fails<'_>) -> Shrunk {
    let mut s = Shrinker::new(case, message, budget, fails);
    s.choose_pruning();
    s.one_output();
    finish(s)
}

/// The edits after the first output is chosen, until none helps.
fn finish(mut s: Shrinker<'_>) -> Shrunk {
    loop {
        let mut progress = s.insts_as_params();
        progress |= s.blocks();
        progress |= s.shapes();
        if !progress || s.spent() {
            break;
        }
    }
    s.values();
    // The tidy form (pruned where candidates were, values renumbered)
    // replaces the case only if it fails too.
    let mut tidy = s.best.clone();
    if s.prune {
        tidy.program.prune(Some(&mut tidy.args));
    }
    tidy.program = renumber(&tidy.program);
    let (case, message) = match (s.fails)(&tidy) {
        Some(m) => (tidy, m),
        None => (s.best, s.message),
    };
    Shrunk {
        case,
        message,
        tries: s.tries + 1,
    }
}
