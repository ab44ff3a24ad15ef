//! Compile hints: facts about a program that a backend uses to choose its
//! compile options, computed from the graph while lowering (never by reading
//! the program text back).

use std::collections::HashSet;

use crate::dtype::DType;
use crate::ir::{Graph, Op};

/// What a backend may want to know about a lowered program.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, lower::compile_hints, trace, TensorSpec, BF16, F32};
/// let specs = [("a".into(), TensorSpec::new([4, 8], BF16)), ("b".into(), TensorSpec::new([8, 2], BF16))];
/// let g = trace("mm", &specs, KernelConfig::default(), |a| a[0].matmul_acc(a[1], F32))?;
/// assert!(compile_hints(&g).bf16_dots_keep_f32);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileHints {
    /// The program has at least one bf16 × bf16 dot, and every such dot has
    /// an f32 result that no op narrows straight back to bf16 or f16.
    ///
    /// On CPU such programs hand their dots to XNNPACK (whose bf16 GEMM uses
    /// the AVX512-BF16 instructions where the processor has them). XNNPACK
    /// rounds a bf16 *output* toward zero, and XLA folds `convert(dot)` into
    /// a bf16-output dot, so a program that narrows a bf16 dot's result
    /// keeps XLA's own emitter, which rounds once, to nearest.
    pub bf16_dots_keep_f32: bool,
}

/// The hints of `graph`.
pub fn compile_hints(graph: &Graph) -> CompileHints {
    let dtype = |v: usize| graph.values[v].spec.dtype;
    let narrowed: HashSet<usize> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Convert))
        .filter(|n| {
            n.results
                .first()
                .is_some_and(|&r| matches!(dtype(r), DType::BF16 | DType::F16))
        })
        .filter_map(|n| n.operands.first().copied())
        .collect();
    let mut any = false;
    let mut all_keep = true;
    for node in &graph.nodes {
        if !matches!(node.op, Op::DotGeneral { .. }) {
            continue;
        }
        let bf16_operands =
            node.operands.len() == 2 && node.operands.iter().all(|&v| dtype(v) == DType::BF16);
        if !bf16_operands {
            continue;
        }
        any = true;
        let keeps = node
            .results
            .first()
            .is_some_and(|&r| dtype(r) == DType::F32 && !narrowed.contains(&r));
        all_keep &= keeps;
    }
    CompileHints {
        bf16_dots_keep_f32: any && all_keep,
    }
}
