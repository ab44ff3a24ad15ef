//! Random well-typed programs from a seed: the parameters and their data,
//! the bookkeeping of what each value may feed, and the driver. The ops
//! themselves are chosen in [`steps`](super::steps) and the loops and
//! branches built in [`blocks`](super::blocks).
//!
//! Every value a later op may read is bit-exact in the interpreter and on
//! the plugin (exactly rounded arithmetic, integer ops, comparisons,
//! moves), so it can feed discontinuous ops (comparisons, `floor`, casts
//! to integers, indices) without amplifying a rounding difference. Results
//! that are not exact (transcendental functions, float sums and dots, a
//! division by a constant) are outputs only, compared with a tolerance.

use tessel_dsl::{DType, HostTensor, TensorSpec};

use super::program::{Binary, Case, Inst, Op, Output, Program, V};
use super::types::infer;
use crate::Rng;

/// The dtypes of parameters and casts.
pub const DTYPES: [DType; 12] = [
    DType::F32,
    DType::S32,
    DType::Pred,
    DType::BF16,
    DType::F16,
    DType::F64,
    DType::S8,
    DType::U8,
    DType::U32,
    DType::S16,
    DType::U16,
    DType::U64,
];
/// Extents of parameters and new axes: 0, 1 and odd sizes.
pub const EXTENTS: [usize; 7] = [0, 1, 1, 2, 3, 5, 7];
/// Values with more elements are outputs only (they keep programs small).
pub const MAX_ELEMENTS: usize = 256;
/// Top-level steps of a program (with their loops and branches, about 21
/// instructions on average, a third of them nested). Compile time grows
/// with the instructions, loops costing the most.
pub const STEPS: usize = 6;
/// How deep loops and branches nest.
pub const MAX_DEPTH: usize = 2;

/// What the generator knows about a value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fact {
    /// Computed from constants only (XLA may fold it while compiling).
    pub konst: bool,
    /// A float cast of a pred, maybe moved (broadcast, sliced, ...).
    pub pred_cast: bool,
    /// A `dynamic_slice`, or a copy of one.
    pub dyn_slice: bool,
    /// A `sqrt`.
    pub sqrt: bool,
    /// May hold a NaN whose sign XLA leaves open: a float remainder by a
    /// constant (`inf % c` is +NaN when XLA folds the divisor in, -NaN on
    /// x86 otherwise), or anything computed from one. Only a sort shows
    /// the sign, so such values are not sorted.
    pub nan_sign_open: bool,
}

/// The program under construction.
pub(crate) struct Gen {
    /// The generator's random numbers.
    pub rng: Rng,
    /// The program so far (its `insts` are filled in at the end).
    pub p: Program,
    /// What is known of each value.
    pub facts: Vec<Fact>,
    /// Per open block (the program first): the values later ops may read.
    pub scopes: Vec<Vec<V>>,
    /// Per open block: the instructions emitted so far.
    pub code: Vec<Vec<Inst>>,
    /// Results that are not exact, with their number of terms.
    pub inexact: Vec<Output>,
}

impl Gen {
    /// A random element of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.int(0, items.len() as i64 - 1) as usize]
    }

    /// A uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        self.rng.int(lo, hi)
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: i64) -> bool {
        self.rng.int(1, n) == 1
    }

    /// The depth of the block being built (0: the program's body).
    pub fn depth(&self) -> usize {
        self.scopes.len() - 1
    }

    /// The type of `v`.
    pub fn spec(&self, v: V) -> TensorSpec {
        self.p.specs[v].clone()
    }

    /// A new value of `spec` (a parameter of a block or of the program).
    pub fn fresh(&mut self, spec: TensorSpec) -> V {
        let v = self.p.fresh(spec);
        self.facts.push(Fact {
            konst: false,
            pred_cast: false,
            dyn_slice: false,
            sqrt: false,
            nan_sign_open: false,
        });
        v
    }

    /// Appends `op` to the current block and returns its results.
    pub fn emit_all(&mut self, op: Op) -> Vec<V> {
        let specs = {
            let all = &self.p.specs;
            infer(&op, &|v| all[v].clone())
                .unwrap_or_else(|e| panic!("the generator made an ill-typed {op:?}: {e}"))
        };
        let mut uses = op.operands();
        for b in op.blocks() {
            uses.extend(b.free_uses());
        }
        // Values XLA may fold whatever their operand: an argsort along an
        // axis of one element (zeros), a remainder by a constant (by 1 it
        // is 0), a reduction over no elements (its initial value), an
        // argmax or argmin along an empty axis (zeros), and an integer or
        // pred `and`, `or` or product with a constant (`x & 0`, `x | !0`
        // and `x * 0` are constants to its simplifier).
        let zeros = match &op {
            Op::Binary(Binary::And | Binary::Or | Binary::Mul, x, y)
                if !self.p.specs[*x].dtype.is_float() =>
            {
                self.facts[*x].konst || self.facts[*y].konst
            }
            Op::Sort {
                x,
                axis,
                indices: true,
                ..
            } => self.p.specs[*x].shape[*axis] == 1,
            Op::Binary(Binary::Rem, _, d) => self.facts[*d].konst,
            Op::Reduce(_, x, axes) => axes.iter().any(|&a| self.p.specs[*x].shape[a] == 0),
            Op::Arg { x, axis, .. } => self.p.specs[*x].shape[*axis] == 0,
            _ => false,
        };
        let konst = zeros || uses.iter().all(|&v| self.facts[v].konst);
        let nan_sign_open = match &op {
            Op::Binary(Binary::Rem, x, d) => {
                self.p.specs[*x].dtype.is_float() && self.facts[*d].konst
            }
            _ => false,
        } || uses.iter().any(|&v| self.facts[v].nan_sign_open)
            || op.blocks().iter().any(|b| self.block_has_open_nan_sign(b));
        let outs: Vec<V> = specs.into_iter().map(|s| self.fresh(s)).collect();
        for &v in &outs {
            self.facts[v].konst = konst;
            self.facts[v].nan_sign_open = nan_sign_open;
        }
        if let [out] = outs[..] {
            if let Some(x) = copy_of(&op, &self.p.specs[out], &self.p.specs) {
                self.facts[out].dyn_slice = self.facts[x].dyn_slice;
            }
            self.facts[out].dyn_slice |= matches!(op, Op::DynamicSlice { .. });
            self.facts[out].sqrt = matches!(op, Op::Unary(super::program::Unary::Sqrt, _));
            self.facts[out].pred_cast = match &op {
                Op::Cast(x, d) => d.is_float() && self.p.specs[*x].dtype.is_pred(),
                Op::BroadcastInDim(x, ..)
                | Op::Reshape(x, _)
                | Op::Transpose(x, _)
                | Op::Slice { x, .. }
                | Op::DynamicSlice { x, .. }
                | Op::Take { x, .. } => self.facts[*x].pred_cast,
                _ => false,
            };
        }
        self.code.last_mut().expect("a block is open").push(Inst {
            outs: outs.clone(),
            op,
        });
        outs
    }

    /// Whether a value `b` computes or returns may hold a NaN of open sign
    /// (see [`Fact::nan_sign_open`]).
    fn block_has_open_nan_sign(&self, b: &super::program::Block) -> bool {
        b.results
            .iter()
            .chain(b.insts.iter().flat_map(|i| &i.outs))
            .any(|&v| self.facts[v].nan_sign_open)
    }

    /// Appends a one-result `op` and returns its result.
    pub fn emit(&mut self, op: Op) -> V {
        self.emit_all(op)[0]
    }

    /// Makes `v` available to later ops of this block (if it is small).
    pub fn keep(&mut self, v: V) {
        if self.p.specs[v].num_elements() <= MAX_ELEMENTS {
            self.scopes.last_mut().expect("a block is open").push(v);
        }
    }

    /// Records `v` as an inexact output (at the top level only).
    pub fn output_inexact(&mut self, v: V, terms: usize) {
        debug_assert_eq!(self.depth(), 0);
        self.inexact.push(Output {
            value: v,
            terms: terms.max(1),
        });
    }

    /// Every value later ops may read, innermost block last.
    pub fn visible(&self) -> Vec<V> {
        self.scopes.iter().flatten().copied().collect()
    }

    /// The visible values `keep` accepts.
    pub fn visible_where(&self, f: impl Fn(&TensorSpec) -> bool) -> Vec<V> {
        self.visible()
            .into_iter()
            .filter(|&v| f(&self.p.specs[v]))
            .collect()
    }

    /// A random operand: in a block, one of the block's own values half of
    /// the time (so that carries flow through the body).
    pub fn any(&mut self) -> V {
        let own = self.scopes.last().expect("a block is open").clone();
        if self.depth() > 0 && !own.is_empty() && self.one_in(2) {
            return self.pick(&own);
        }
        let all = self.visible();
        self.pick(&all)
    }

    /// `Tensor::full(shape, value, dtype)`.
    pub fn full(&mut self, shape: Vec<usize>, value: f64, dtype: DType) -> V {
        let spec = TensorSpec::new(shape, dtype);
        self.emit(Op::Full { spec, value })
    }

    /// A small constant of `dtype` (nonzero when `nonzero`).
    pub fn small(&mut self, dtype: DType) -> f64 {
        match dtype {
            DType::Pred => 1.0,
            d if d.is_unsigned() => self.pick(&[0.0, 1.0, 2.0, 7.0, 200.0]),
            d if d.is_integer() => self.pick(&[-3.0, -1.0, 0.0, 2.0, 7.0]),
            _ => self.pick(&[-3.0, -1.0, 0.0, 0.5, 2.0, 7.0]),
        }
    }
}

/// The operand `op` copies unchanged into a result of type `out`, if it
/// is such a move (XLA drops those, so the result shares its buffer).
fn copy_of(op: &Op, out: &TensorSpec, specs: &[TensorSpec]) -> Option<V> {
    let x = match op {
        Op::Cast(x, _)
        | Op::BroadcastInDim(x, ..)
        | Op::Reshape(x, _)
        | Op::Transpose(x, _)
        | Op::Slice { x, .. }
        | Op::Pad { x, .. }
        | Op::DynamicSlice { x, .. } => *x,
        Op::Concat(xs, _) if xs.len() == 1 => xs[0],
        _ => return None,
    };
    (specs[x] == *out).then_some(x)
}

/// Argument data: small values, with zeros, infinities, NaNs and integer
/// extremes now and then.
pub fn random_arg(rng: &mut Rng, spec: &TensorSpec) -> HostTensor {
    let d = spec.dtype;
    HostTensor::from_fn(spec.clone(), |_| {
        let special = rng.int(0, 19) == 0;
        let pick = |rng: &mut Rng, xs: &[f64]| xs[rng.int(0, xs.len() as i64 - 1) as usize];
        match d {
            DType::Pred => (rng.next_u64() & 1) as f64,
            DType::S32 if special => pick(rng, &[f64::from(i32::MIN), f64::from(i32::MAX), 0.0]),
            DType::S8 if special => pick(rng, &[-128.0, 127.0, 0.0]),
            DType::U8 if special => pick(rng, &[255.0, 128.0, 0.0]),
            DType::S16 if special => pick(rng, &[-32768.0, 32767.0, 0.0]),
            DType::U16 if special => pick(rng, &[65535.0, 32768.0, 0.0]),
            DType::U32 if special => pick(rng, &[f64::from(u32::MAX), 2f64.powi(31), 0.0]),
            // Exact as f64: the comparisons read values back as f64.
            DType::U64 if special => pick(rng, &[2f64.powi(53), 2f64.powi(40), 0.0]),
            _ if d.is_unsigned() => rng.int(0, 20) as f64,
            _ if d.is_integer() => rng.int(-10, 10) as f64,
            _ if special => pick(
                rng,
                &[0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN],
            ),
            _ => (rng.uniform(-4.0, 4.0) * 8.0).round() / 8.0,
        }
    })
}

fn random_shape(rng: &mut Rng) -> Vec<usize> {
    let rank = rng.int(0, 3) as usize;
    (0..rank)
        .map(|_| EXTENTS[rng.int(0, EXTENTS.len() as i64 - 1) as usize])
        .collect()
}

/// The program of `seed` and its arguments: two to four parameters (the
/// first two of one shape) and an s32 scalar that indexes, bounds loops
/// and picks branches, then a few (`STEPS`) random steps.
pub fn generate(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let shared = random_shape(&mut rng);
    let n = rng.int(2, 4) as usize;
    let mut specs: Vec<TensorSpec> = (0..n)
        .map(|i| {
            let shape = if i < 2 {
                shared.clone()
            } else {
                random_shape(&mut rng)
            };
            let d = DTYPES[rng.int(0, DTYPES.len() as i64 - 1) as usize];
            TensorSpec::new(shape, d)
        })
        .collect();
    specs.push(TensorSpec::scalar(DType::S32));
    let mut args: Vec<HostTensor> = specs.iter().map(|s| random_arg(&mut rng, s)).collect();
    args[n] = HostTensor::scalar(rng.int(-4, 6) as i32);
    let mut g = Gen {
        rng: Rng::new(seed ^ 0x5eed),
        p: Program {
            params: Vec::new(),
            insts: Vec::new(),
            outputs: Vec::new(),
            specs: Vec::new(),
        },
        facts: Vec::new(),
        scopes: vec![Vec::new()],
        code: vec![Vec::new()],
        inexact: Vec::new(),
    };
    for s in specs {
        let v = g.fresh(s);
        g.p.params.push(v);
        g.keep(v);
    }
    for _ in 0..STEPS {
        g.step();
    }
    let mut p = g.p;
    p.insts = g.code.pop().expect("the body");
    p.outputs = choose_outputs(&p, &mut g.rng, g.scopes[0].clone());
    p.outputs.extend(g.inexact);
    if p.outputs.is_empty() {
        p.outputs.push(Output {
            value: p.params[0],
            terms: 0,
        });
    }
    Case {
        seed,
        program: p,
        args,
    }
}

/// The exact values the program returns: those no later instruction
/// reads, and a quarter of the others. Fewer outputs let XLA fuse more,
/// and each fusion costs compile time; [`all_outputs`] puts the others
/// back where that helps (shrinking).
fn choose_outputs(p: &Program, rng: &mut Rng, kept: Vec<V>) -> Vec<Output> {
    let used: Vec<V> = p.insts.iter().flat_map(|i| i.free_uses()).collect();
    kept.into_iter()
        .filter(|v| !p.params.contains(v))
        .filter(|v| !used.contains(v) || rng.int(0, 3) == 0)
        .map(|value| Output { value, terms: 0 })
        .collect()
}

/// `p` returning every value its body defines that is small enough to
/// compare (exact values bit for bit, the inexact outputs as before), in
/// program order.
pub fn all_outputs(p: &Program) -> Program {
    let mut q = p.clone();
    let mut outs = Vec::new();
    for inst in &p.insts {
        for &v in &inst.outs {
            let terms = p
                .outputs
                .iter()
                .find(|o| o.value == v)
                .map_or(0, |o| o.terms);
            if terms > 0 || p.specs[v].num_elements() <= MAX_ELEMENTS {
                outs.push(Output { value: v, terms });
            }
        }
    }
    q.outputs = outs;
    q
}
