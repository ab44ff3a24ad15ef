//! A differential fuzzer of the host interpreter: random well-typed graphs
//! (elementwise ops, casts, broadcasts, transposes, slices, pads,
//! concatenations, reductions, sorts, dynamic slices and updates, gathers,
//! scatters, loops and conditionals over f32,
//! s32, pred and bf16 tensors with extents 0, 1 and odd sizes) from a fixed
//! seed, evaluated by the interpreter and run on the CPU plugin.
//!
//! Every tensor the generator keeps for later ops is bit-exact in both
//! (exactly rounded arithmetic, integer ops, comparisons, moves), so they
//! are compared exactly and may feed discontinuous ops (comparisons,
//! floor, casts to integers, indices). Results that are not exact
//! (transcendental functions, float sums) are outputs only, compared with
//! the harness's tolerance.

mod common;
mod interp_common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use interp_common::assert_same;
use tessel_dsl::interp::{evaluate, Checks};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{
    concat, cond, fori_loop, while_loop, DType, HostTensor, Tensor, TensorSpec, BF16, F32, PRED,
    S32,
};

const DTYPES: [DType; 4] = [F32, S32, PRED, BF16];
const EXTENTS: [usize; 6] = [0, 1, 1, 2, 3, 5];
const MAX_ELEMENTS: usize = 256;
const GRAPHS: u64 = 300;
const OPS: usize = 8;

/// Time spent in the interpreter, for the report at the end.
static INTERP_NANOS: AtomicU64 = AtomicU64::new(0);

/// The identity of a traced tensor (its handle's hash).
fn id(t: Tensor) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    h.finish()
}

fn pick<T: Copy>(rng: &mut Rng, items: &[T]) -> T {
    items[rng.int(0, items.len() as i64 - 1) as usize]
}

fn random_shape(rng: &mut Rng) -> Vec<usize> {
    let rank = rng.int(0, 3) as usize;
    (0..rank).map(|_| pick(rng, &EXTENTS)).collect()
}

/// Argument data: small values, with zeros, infinities, NaNs and integer
/// extremes now and then.
fn random_arg(rng: &mut Rng, spec: &TensorSpec) -> HostTensor {
    let d = spec.dtype;
    HostTensor::from_fn(spec.clone(), |_| {
        let special = rng.int(0, 19) == 0;
        match d {
            DType::Pred => (rng.next_u64() & 1) as f64,
            DType::S32 if special => pick(rng, &[f64::from(i32::MIN), f64::from(i32::MAX), 0.0]),
            DType::S32 => rng.int(-10, 10) as f64,
            _ if special => pick(
                rng,
                &[0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN],
            ),
            _ => (rng.uniform(-4.0, 4.0) * 8.0).round() / 8.0,
        }
    })
}

/// The graph under construction: tensors later ops may use (all exact) and
/// the outputs with the number of terms each accumulates (0: exact).
struct Gen {
    rng: Rng,
    pool: Vec<Tensor>,
    outs: Vec<(Tensor, usize)>,
    index: Tensor,
}

impl Gen {
    fn any(&mut self) -> Tensor {
        let i = self.rng.int(0, self.pool.len() as i64 - 1) as usize;
        self.pool[i]
    }

    /// A pool tensor of `x`'s shape and dtype (cast from one of its shape,
    /// or a constant, then `true`).
    fn partner(&mut self, x: Tensor) -> Tensor {
        self.partner_or_constant(x).0
    }

    fn partner_or_constant(&mut self, x: Tensor) -> (Tensor, bool) {
        let same: Vec<Tensor> = self
            .pool
            .iter()
            .copied()
            .filter(|t| t.shape() == x.shape())
            .collect();
        if same.is_empty() || self.rng.int(0, 4) == 0 {
            let v = match x.dtype() {
                DType::Pred => 1.0,
                DType::S32 => pick(&mut self.rng, &[-3.0, -1.0, 0.0, 2.0, 7.0]),
                _ => pick(&mut self.rng, &[-3.0, -1.0, 0.0, 0.5, 2.0, 7.0]),
            };
            return (Tensor::full(x.shape(), v, x.dtype()), true);
        }
        let t = pick(&mut self.rng, &same);
        if t.dtype() == BF16 && x.dtype() == F32 {
            // Not exact: see the bf16 to f32 cast in `step`.
            (Tensor::full(x.shape(), 2.0, F32), true)
        } else if t.dtype() == x.dtype() {
            (t, false)
        } else {
            (t.cast(x.dtype()), false)
        }
    }

    fn keep(&mut self, t: Tensor) {
        if t.spec().num_elements() <= MAX_ELEMENTS {
            self.pool.push(t);
            self.outs.push((t, 0));
        }
    }

    /// An elementwise op of `x` (and a partner), and whether it is exact.
    fn elementwise(&mut self, x: Tensor) -> (Tensor, bool) {
        let (y, constant) = self.partner_or_constant(x);
        let r = self.rng.int(0, 9);
        if x.dtype().is_float() && r == 3 && constant {
            // XLA divides by a constant as a product with its reciprocal.
            return (x / y, false);
        }
        let t = match x.dtype() {
            DType::Pred => match r % 4 {
                0 => x.and(y),
                1 => x.or(y),
                2 => x.xor(y),
                _ => x.logical_not(),
            },
            DType::S32 => match r {
                0 => x + y,
                1 => x - y,
                2 => x * y,
                // Never by zero: XLA folds an integer division or remainder
                // of known zeros (`(a - a) % (a - a)`) on the host, where it
                // traps and kills the process. The interpreter's x / 0 and
                // x % 0 are tested against the plugin with runtime zeros.
                3 => x / y.or(1),
                4 => x % y.or(1),
                5 => x.maximum(y),
                6 => x.shift_right_arithmetic(y),
                7 => x.shift_left(y).xor(y),
                8 => -x.abs(),
                _ => x.popcount().minimum(y),
            },
            _ => match r {
                0 => x + y,
                1 => x - y,
                2 => x * y,
                3 => x / y,
                4 => x % y,
                5 => x.maximum(y),
                6 => x.minimum(y),
                7 => x.abs().sqrt(),
                8 => (x * 1.5).round(),
                _ => x.floor() - x.ceil(),
            },
        };
        (t, true)
    }

    /// Results that are not exact: outputs only.
    fn inexact(&mut self, x: Tensor) {
        if x.dtype() == PRED {
            return;
        }
        let f = if x.dtype() == S32 { x.cast(F32) } else { x };
        let (t, terms) = match self.rng.int(0, 4) {
            0 => (f.tanh(), 1),
            1 => (f.sin(), 1),
            2 => ((f.abs() + 1.0).log(), 1),
            3 => ((f * 0.5).exp(), 1),
            _ if f.rank() > 0 => {
                let axis = self.rng.int(0, f.rank() as i64 - 1) as usize;
                (f.abs().sum(&[axis as isize]), f.shape()[axis].max(1))
            }
            _ => (f.sigmoid(), 1),
        };
        self.outs.push((t, terms));
    }

    fn step(&mut self) {
        let x = self.any();
        let shape = x.shape();
        let rank = shape.len();
        match self.rng.int(0, 14) {
            0..=2 => match self.elementwise(x) {
                (t, true) => self.keep(t),
                (t, false) => self.outs.push((t, 1)),
            },
            3 => {
                let y = self.partner(x);
                let p = if x.dtype() == PRED {
                    x.eq(y)
                } else {
                    pick(&mut self.rng, &[x.lt(y), x.ge(y), x.ne(y)])
                };
                let z = self.partner(x);
                self.keep(p);
                self.keep(p.select(y, z));
            }
            4 => {
                let to = pick(&mut self.rng, &DTYPES);
                if x.dtype() == BF16 && to == F32 {
                    // XLA may skip the rounding to bf16 of the op that made
                    // `x` (excess precision): within one bf16 ulp, which
                    // is 2^16 f32 ulps (the harness allows 4 per term).
                    self.outs.push((x.cast(F32), 1 << 14));
                } else {
                    self.keep(x.cast(to));
                }
            }
            5 => {
                let at = self.rng.int(0, rank as i64) as usize;
                let mut out = shape.clone();
                out.insert(at, pick(&mut self.rng, &EXTENTS));
                let dims: Vec<usize> = (0..rank).map(|a| if a < at { a } else { a + 1 }).collect();
                self.keep(x.broadcast_in_dim(out, &dims));
            }
            6 if rank > 0 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.rotate_left(self.rng.int(0, rank as i64 - 1) as usize);
                let mut start = Vec::new();
                let mut limit = Vec::new();
                let mut stride = Vec::new();
                for &e in &shape {
                    let s = self.rng.int(0, e as i64) as usize;
                    start.push(s);
                    limit.push(self.rng.int(s as i64, e as i64) as usize);
                    stride.push(self.rng.int(1, 3) as usize);
                }
                self.keep(x.transpose(&perm));
                self.keep(x.slice(&start, &limit, &stride));
            }
            7 if rank > 0 => {
                let axis = self.rng.int(0, rank as i64 - 1) as isize;
                let r = match x.dtype() {
                    DType::Pred => pick(&mut self.rng, &[x.all(&[axis]), x.any(&[axis])]),
                    DType::S32 => pick(
                        &mut self.rng,
                        &[x.sum(&[axis]), x.max(&[axis]), x.min(&[axis])],
                    ),
                    _ => pick(&mut self.rng, &[x.max(&[axis]), x.min(&[axis])]),
                };
                self.keep(r);
                if x.dtype() != PRED {
                    self.keep(x.argmax(axis));
                }
            }
            8 if rank > 0 => {
                let sizes: Vec<usize> = shape
                    .iter()
                    .map(|&e| self.rng.int(0, e as i64) as usize)
                    .collect();
                let starts: Vec<Tensor> =
                    (0..rank).map(|a| self.index * (a as i32 + 1) - 2).collect();
                let w = x.dynamic_slice(&starts, &sizes);
                let back: Vec<Tensor> = starts.iter().map(|&s| s + 1).collect();
                let u = match self.elementwise(w) {
                    (u, true) => u,
                    (_, false) => w,
                };
                self.keep(w);
                self.keep(x.dynamic_update_slice(u, &back));
            }
            9 if rank > 0 => {
                let axis = self.rng.int(0, rank as i64 - 1) as usize;
                let ints: Vec<Tensor> = self
                    .pool
                    .iter()
                    .copied()
                    .filter(|t| t.dtype() == S32 && t.rank() <= 2 && t.spec().num_elements() <= 16)
                    .collect();
                if shape[axis] > 0 && !ints.is_empty() {
                    let idx = pick(&mut self.rng, &ints);
                    self.keep(x.take(idx, axis as isize));
                    if id(idx) == id(x) {
                        // XLA scatters in place into a buffer it also reads
                        // the indices from, so an update can move a later
                        // index; the interpreter reads the indices as given.
                        return;
                    }
                    // The same indices scatter a window of updates back.
                    let mut upd: Vec<usize> = shape[..axis].to_vec();
                    upd.extend(idx.shape());
                    upd.extend(&shape[axis + 1..]);
                    let u = if x.dtype() == PRED || upd.is_empty() {
                        Tensor::full(upd, 1.0, x.dtype())
                    } else {
                        let last = upd.len() - 1;
                        Tensor::iota(upd, last, x.dtype()) - 3
                    };
                    let combine = if x.dtype() == PRED {
                        ScatterCombine::Set
                    } else {
                        pick(
                            &mut self.rng,
                            &[
                                ScatterCombine::Set,
                                ScatterCombine::Add,
                                ScatterCombine::Max,
                                ScatterCombine::Min,
                                ScatterCombine::Mul,
                            ],
                        )
                    };
                    self.keep(x.index_update(axis as isize, idx, u, combine));
                }
            }
            10 => {
                let y = self.partner(x);
                let trips = self.rng.int(0, 3) as i32;
                let r = match x.dtype() {
                    DType::Pred => fori_loop(0, trips, x, |_, c| c.xor(y)),
                    DType::S32 => fori_loop(0, trips, x, |i, c| c * 3 + y - i),
                    _ => fori_loop(0, trips, x, |_, c| (c * 0.5 + y).floor()),
                };
                self.keep(r);
                let bound = self.index.clamp(-2, 4);
                let (n, w) = while_loop(
                    (Tensor::scalar(0.0, S32), x),
                    |(i, _)| i.lt(bound),
                    |(i, c)| {
                        (
                            i + 1,
                            if c.dtype() == PRED {
                                c.logical_not()
                            } else {
                                c.maximum(y)
                            },
                        )
                    },
                );
                self.keep(n);
                self.keep(w);
            }
            11 => {
                let y = self.partner(x);
                let p = self.index.gt(pick(&mut self.rng, &[-1, 0, 3]));
                let r = cond(p, || self.elementwise_fixed(x, y), || y);
                self.keep(r);
            }
            12 => {
                let y = self.partner(x);
                if rank > 0 {
                    let axis = self.rng.int(0, rank as i64 - 1) as isize;
                    self.keep(concat(&[x, y, x], axis));
                }
                let (mut low, mut high, mut interior) = (Vec::new(), Vec::new(), Vec::new());
                for &e in &shape {
                    let (l, h, i) = (self.rng.int(-1, 2), self.rng.int(-1, 2), self.rng.int(0, 2));
                    let dilated = if e == 0 {
                        0
                    } else {
                        e as i64 + (e as i64 - 1) * i
                    };
                    let ok = dilated + l + h >= 0;
                    low.push(if ok { l } else { 0 });
                    high.push(if ok { h } else { 0 });
                    interior.push(if ok { i } else { 0 });
                }
                let v = if x.dtype() == PRED { 1.0 } else { -7.0 };
                self.keep(x.pad(Tensor::scalar(v, x.dtype()), &low, &high, &interior));
            }
            13 if rank > 0 && x.dtype() != PRED => {
                let axis = self.rng.int(0, rank as i64 - 1) as isize;
                let descending = self.rng.int(0, 1) == 1;
                self.keep(x.sort(axis, descending));
                self.keep(x.argsort(axis, descending));
            }
            _ => self.inexact(x),
        }
    }

    /// An exact op of `x` and `y` that does not draw from the generator
    /// (branches are traced in a fixed order).
    fn elementwise_fixed(&self, x: Tensor, y: Tensor) -> Tensor {
        match x.dtype() {
            DType::Pred => x.or(y),
            DType::S32 => x - y * 2,
            _ => x.maximum(y) * 2.0,
        }
    }
}

/// The graph of `seed`, traced over `args` of `specs` (the last is an s32 scalar).
fn body(seed: u64, terms: &RefCell<Vec<usize>>) -> impl Fn(&[Tensor]) -> Vec<Tensor> + '_ {
    move |a: &[Tensor]| {
        let n = a.len();
        let mut g = Gen {
            rng: Rng::new(seed ^ 0x5eed),
            pool: a[..n - 1].to_vec(),
            outs: Vec::new(),
            index: a[n - 1],
        };
        for _ in 0..OPS {
            g.step();
        }
        if g.outs.is_empty() {
            g.outs.push((a[0], 0));
        }
        *terms.borrow_mut() = g.outs.iter().map(|o| o.1).collect();
        g.outs.into_iter().map(|o| o.0).collect()
    }
}

/// Builds graph `seed`, evaluates it both ways and compares (`show`: print
/// its StableHLO first).
fn check_seed(seed: u64, show: bool) {
    if std::env::var_os("INTERP_FUZZ_TRACE").is_some() {
        eprintln!("seed {seed}");
    }
    let mut rng = Rng::new(seed);
    let s1 = random_shape(&mut rng);
    let mut specs = vec![
        TensorSpec::new(s1.clone(), pick(&mut rng, &DTYPES)),
        TensorSpec::new(s1, pick(&mut rng, &DTYPES)),
        TensorSpec::new(random_shape(&mut rng), pick(&mut rng, &DTYPES)),
    ];
    specs.push(TensorSpec::scalar(S32));
    let mut args: Vec<HostTensor> = specs.iter().map(|s| random_arg(&mut rng, s)).collect();
    args[3] = HostTensor::scalar(rng.int(-4, 6) as i32);
    let terms = RefCell::new(Vec::new());
    let k = Kernel::new(format!("fuzz_{seed}"), body(seed, &terms));
    let g = k
        .trace(&specs)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    if show {
        eprintln!("{}", tessel_dsl::lower::lower(&g));
    }
    let t = std::time::Instant::now();
    let e = evaluate(&g, &args, Checks::default()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    INTERP_NANOS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    let refs: Vec<&HostTensor> = args.iter().collect();
    let xla = k
        .run(&device(), &refs)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let terms = terms.borrow();
    assert_eq!(e.outputs.len(), xla.len());
    for (i, (a, b)) in e.outputs.iter().zip(&xla).enumerate() {
        assert_same(
            a,
            b,
            terms[i],
            &format!("seed {seed}, output {i}, args {args:?}"),
        );
    }
}

#[test]
fn random_graphs_agree_with_the_cpu_plugin() {
    // INTERP_FUZZ_SEED=n runs graph n alone and prints its StableHLO.
    if let Some(seed) = std::env::var("INTERP_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return check_seed(seed, true);
    }
    let t = std::time::Instant::now();
    // Two workers: most of the time is XLA compiling each graph.
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2u64)
            .map(|w| scope.spawn(move || (w..GRAPHS).step_by(2).for_each(|s| check_seed(s, false))))
            .collect();
        for worker in workers {
            if let Err(e) = worker.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
    let interp = std::time::Duration::from_nanos(INTERP_NANOS.load(Ordering::Relaxed));
    eprintln!(
        "{GRAPHS} graphs in {:?} ({interp:?} interpreting)",
        t.elapsed()
    );
}
