//! A loop-invariant tensor's gradient summed by one product after the
//! backward loop instead of one per iteration.
//!
//! The gradient of a weight `W` that every step of a loop reads (an RNN's
//! `h W`) is a sum over the iterations of one product each, `Σ_j h_jᵀ g_j`.
//! On a CPU each of those products is small (`[8, 256]ᵀ × [8, 256]` in the
//! scan benchmark) and costs mostly the packing of its operands. The
//! backward loop instead writes each iteration's two operands into a row of
//! a stacked buffer, and one product after the loop contracts the
//! iteration axis with the others: `Σ_j h_jᵀ g_j = Hᵀ G` over `[T·B, ·]`.

use crate::dtype::DType;
use crate::ir::{Def, DotDims, Op};
use crate::ops::control::WhileBuilder;
use crate::ops::Precision;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::tape;

/// The stacked operands of all hoisted products of one loop may take at
/// most this many bytes (beyond it the per-iteration products stay: they
/// are large enough to run well on their own, and the buffers would cost
/// memory JAX's scan does not spend).
const MAX_STACKED_BYTES: usize = 64 << 20;

/// A cotangent computed by one product per iteration: `convert?(transpose?(
/// dot_general(a, b)))`.
pub(super) struct Product {
    a: Tensor,
    b: Tensor,
    dims: DotDims,
    precision: Precision,
    dot_dtype: DType,
    perm: Option<Vec<usize>>,
    dtype: DType,
}

/// The product behind `g` (a value of the current trace), if it has that
/// form.
pub(super) fn product_behind(trace: u32, g: Tensor) -> Option<Product> {
    with_state(|s| {
        let node_of = |v: usize| match s.graph.values.get(v)?.def {
            Def::Result { node, index: 0 } => Some(&s.graph.nodes[node]),
            _ => None,
        };
        let dtype = s.graph.values.get(g.value)?.spec.dtype;
        let mut node = node_of(g.value)?;
        if matches!(node.op, Op::Convert) {
            node = node_of(node.operands[0])?;
        }
        let mut perm = None;
        if let Op::Transpose { perm: p } = &node.op {
            perm = Some(p.clone());
            node = node_of(node.operands[0])?;
        }
        let Op::DotGeneral { dims, precision } = &node.op else {
            return None;
        };
        Some(Product {
            a: tape::handle(trace, node.operands[0]),
            b: tape::handle(trace, node.operands[1]),
            dims: dims.clone(),
            precision: *precision,
            dot_dtype: s.graph.values[node.results[0]].spec.dtype,
            perm,
            dtype,
        })
    })
    .flatten()
    .filter(|p| g.trace == trace && p.a.trace == trace)
}

/// Whether products stacked over `n` iterations fit [`MAX_STACKED_BYTES`].
pub(super) fn fit<'a>(products: impl Iterator<Item = &'a Product>, n: usize) -> bool {
    let bytes: usize = products
        .flat_map(|p| [p.a.spec(), p.b.spec()])
        .map(|sp| sp.size_in_bytes())
        .fold(0usize, usize::saturating_add);
    bytes.saturating_mul(n) <= MAX_STACKED_BYTES
}

impl Product {
    /// Adds two carried buffers of `n` rows to the open backward loop `bb`
    /// and returns their next values, this iteration's operands written at
    /// row `j`.
    pub(super) fn stack(&self, bb: &mut WhileBuilder, n: usize, j: Tensor) -> Option<[Tensor; 2]> {
        let mut next = Vec::with_capacity(2);
        for x in [self.a, self.b] {
            let sp = x.spec();
            let mut shape = vec![n];
            shape.extend(&sp.shape);
            let buf = bb.add_carry(|| Tensor::zeros(shape, sp.dtype))?;
            let mut starts = vec![j];
            starts.extend((0..sp.rank()).map(|_| Tensor::scalar(0.0, DType::S32)));
            next.push(buf.dynamic_update_slice(x.expand_dims(0), &starts));
        }
        Some([next[0], next[1]])
    }

    /// The sum over the iterations of the product, from the stacked
    /// operands: the iteration axis (0) is contracted with the others.
    pub(super) fn total(&self, a: Tensor, b: Tensor) -> Tensor {
        let up = |axes: &[usize]| axes.iter().map(|&x| x + 1).collect::<Vec<_>>();
        let with_rows = |axes: &[usize]| [vec![0], up(axes)].concat();
        let dims = DotDims {
            lhs_batch: up(&self.dims.lhs_batch),
            rhs_batch: up(&self.dims.rhs_batch),
            lhs_contract: with_rows(&self.dims.lhs_contract),
            rhs_contract: with_rows(&self.dims.rhs_contract),
        };
        let r = a.dot_general(b, dims, Some(self.precision), Some(self.dot_dtype));
        let r = match &self.perm {
            Some(p) => r.transpose(p),
            None => r,
        };
        if r.dtype() == self.dtype {
            r
        } else {
            r.cast(self.dtype)
        }
    }
}
