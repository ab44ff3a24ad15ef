//! The interpreter never panics: traced graphs that use every op, mutated
//! at random (operands, attributes, result types, regions), evaluate to a
//! result or a typed error. Shapes stay small: a graph that asks for more
//! memory than the machine has fails as any Rust allocation does.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::*;
use tessel_dsl::interp::{evaluate, Checks};
use tessel_dsl::ir::{DotDims, GatherDims, Graph, Op, ScatterDims};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{cond, fori_loop, DType, HostTensor, Tensor, TensorSpec, F32, S32};

/// A kernel that uses every op (the loop and branch give nested regions).
fn every_op(a: &[Tensor]) -> Vec<Tensor> {
    let (x, i) = (a[0], a[1]);
    let y = (x * 2.0 + 1.0).exp().maximum(x);
    let z = x
        .transpose(&[1, 0])
        .reshape(&[3, 2])
        .slice(&[0, 0], &[3, 2], &[2, 1]);
    let w = x.dynamic_slice(&[i, i], &[1, 2]);
    let u = x.dynamic_update_slice(w * 3.0, &[i, i]);
    let p = x.pad(Tensor::scalar(0.0, F32), &[1, -1], &[0, 2], &[1, 0]);
    let c = tessel_dsl::concat(&[x, u], 0);
    let r = c.sum(&[0]) + c.max(&[0]);
    let am = x.argmax(1);
    let idx = Tensor::iota([2], 0, S32);
    let g = x.take(idx, 1);
    let s = x.index_update(0, idx, u, ScatterCombine::Add);
    let m = x.matmul(x.transpose(&[1, 0]));
    let (sv, si) = x.sort_with(Tensor::iota([2, 3], 1, S32), 1, true);
    let (tv, ti) = x.top_k(2);
    let l = fori_loop(0, 3, x, |k, acc| acc + k.cast(F32));
    let b = cond(i.gt(0), || y.select_like(), || x * 0.25);
    let q = tessel_dsl::optimization_barrier(x.gt(0.0).select(x, -x).clamp(-1.0, 1.0));
    vec![
        y,
        z,
        w,
        u,
        p,
        r,
        am,
        g,
        s,
        m,
        sv,
        si,
        tv,
        ti,
        l,
        b,
        q,
        x.cast(DType::S8).popcount(),
    ]
}

trait SelectLike {
    fn select_like(self) -> Tensor;
}

impl SelectLike for Tensor {
    fn select_like(self) -> Tensor {
        self.lt(0.0).select(self, self * 0.5)
    }
}

/// Mutated graphs per run (INTERP_ROBUST_ROUNDS overrides).
fn rounds() -> u64 {
    std::env::var("INTERP_ROBUST_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

fn small(rng: &mut Rng) -> usize {
    rng.int(0, 4) as usize
}

fn smalls(rng: &mut Rng) -> Vec<usize> {
    (0..rng.int(0, 3)).map(|_| small(rng)).collect()
}

fn int(rng: &mut Rng) -> i64 {
    pick(rng, &[0, 1, -1, 2, 3, -5, i64::MAX, i64::MIN])
}

fn pick<T: Copy>(rng: &mut Rng, items: &[T]) -> T {
    items[rng.int(0, items.len() as i64 - 1) as usize]
}

/// One random change to `g`.
fn mutate(g: &mut Graph, rng: &mut Rng) {
    let n = rng.int(0, g.nodes.len() as i64 - 1) as usize;
    let values = g.values.len() as i64;
    let node = &mut g.nodes[n];
    match rng.int(0, 5) {
        0 if !node.operands.is_empty() => {
            let k = rng.int(0, node.operands.len() as i64 - 1) as usize;
            node.operands[k] = rng.int(0, values + 2) as usize;
        }
        1 => {
            if rng.int(0, 1) == 0 {
                node.operands.pop();
            } else {
                node.operands.push(rng.int(0, values - 1) as usize);
            }
        }
        2 => node.regions = smalls(rng),
        3 => {
            if let Some(&v) = node.results.first() {
                let spec = &mut g.values[v].spec;
                spec.shape = smalls(rng);
                if rng.int(0, 3) == 0 {
                    spec.dtype = pick(rng, &DType::ALL);
                }
            }
        }
        _ => {
            node.op = match node.op.clone() {
                Op::Slice { .. } => Op::Slice {
                    start: smalls(rng),
                    limit: smalls(rng),
                    strides: smalls(rng),
                },
                Op::DynamicSlice { .. } => Op::DynamicSlice { sizes: smalls(rng) },
                Op::Transpose { .. } => Op::Transpose { perm: smalls(rng) },
                Op::BroadcastInDim { .. } => Op::BroadcastInDim { dims: smalls(rng) },
                Op::Pad { .. } => Op::Pad {
                    low: vec![int(rng), int(rng)],
                    high: vec![int(rng), int(rng)],
                    interior: vec![int(rng), int(rng)],
                },
                Op::Reduce {
                    kind, split_rows, ..
                } => Op::Reduce {
                    kind,
                    dims: smalls(rng),
                    split_rows,
                },
                Op::ArgReduce { max, .. } => Op::ArgReduce {
                    max,
                    dim: small(rng),
                },
                Op::Concatenate { .. } => Op::Concatenate { dim: small(rng) },
                Op::Iota { .. } => Op::Iota { dim: small(rng) },
                Op::Sort { descending, .. } => Op::Sort {
                    dim: small(rng),
                    descending,
                },
                Op::TopK { .. } => Op::TopK { k: small(rng) },
                Op::Constant { data } => Op::Constant {
                    data: data.into_iter().take(small(rng)).collect(),
                },
                Op::Gather { .. } => Op::Gather {
                    dims: GatherDims {
                        offset_dims: smalls(rng),
                        collapsed_slice_dims: smalls(rng),
                        start_index_map: smalls(rng),
                        index_vector_dim: small(rng),
                    },
                    slice_sizes: smalls(rng),
                },
                Op::Scatter { combine, .. } => Op::Scatter {
                    dims: ScatterDims {
                        update_window_dims: smalls(rng),
                        inserted_window_dims: smalls(rng),
                        scatter_dims_to_operand_dims: smalls(rng),
                        index_vector_dim: small(rng),
                    },
                    combine,
                },
                Op::DotGeneral { precision, .. } => Op::DotGeneral {
                    dims: DotDims {
                        lhs_batch: smalls(rng),
                        rhs_batch: smalls(rng),
                        lhs_contract: smalls(rng),
                        rhs_contract: smalls(rng),
                    },
                    precision,
                },
                _ => match rng.int(0, 5) {
                    0 => Op::Reshape,
                    1 => Op::Select,
                    2 => Op::Clamp,
                    3 => Op::Convert,
                    4 => Op::If,
                    _ => Op::OptimizationBarrier,
                },
            };
        }
    }
}

#[test]
fn mutated_graphs_give_results_or_errors_never_panics() {
    let specs = [TensorSpec::new([2, 3], F32), TensorSpec::scalar(S32)];
    let g = Kernel::new("every_op", every_op).trace(&specs).unwrap();
    let x = HostTensor::from_vec(vec![0.5f32, -1.0, 2.0, 3.0, -0.25, 1.5], [2, 3]).unwrap();
    let args = [x, s32(1)];
    let base = evaluate(&g, &args, Checks::default()).expect("the unmutated graph evaluates");
    assert_eq!(base.outputs.len(), 18);
    // A mutated loop may never end.
    let checks = Checks {
        max_loop_iterations: Some(1000),
        ..Checks::default()
    };
    let mut rng = Rng::new(77);
    let rounds = rounds();
    let (mut ok, mut errors) = (0, 0);
    for round in 0..rounds {
        let mut m = g.clone();
        for _ in 0..rng.int(1, 3) {
            mutate(&mut m, &mut rng);
        }
        match catch_unwind(AssertUnwindSafe(|| evaluate(&m, &args, checks))) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => errors += 1,
            Err(_) => panic!("round {round}: the interpreter panicked on a mutated graph"),
        }
    }
    eprintln!("{ok} evaluated, {errors} errors");
    assert!(
        errors > rounds / 3 && ok > rounds / 30,
        "{ok} evaluated, {errors} errors"
    );
}

/// Results far beyond memory (an outer product of two 2^23-vectors, 512
/// TiB as the interpreter holds them): an error naming the op, not an
/// abort of the process.
#[test]
fn results_beyond_memory_are_errors() {
    use tessel_dsl::runtime::Device;
    let n = 1usize << 23;
    let k = Kernel::new("outer", |a: &[Tensor]| {
        a[0].expand_dims(1) * a[1].expand_dims(0)
    });
    let v = HostTensor::zeros(TensorSpec::new([n], F32));
    let e = k.run(&Device::interpreter(), &[&v, &v]).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("could not be allocated"), "{m}");
    assert!(m.contains("outer"), "{m}");
}
