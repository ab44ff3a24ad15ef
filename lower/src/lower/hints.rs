//! Compile hints: facts about a program that a backend uses to choose its
//! compile options, computed from the graph while lowering (never by reading
//! the program text back).

use std::collections::HashSet;

use crate::dtype::DType;
use crate::ir::{Graph, Op};

/// What a backend may want to know about a lowered program.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, lower::compile_hints, trace, TensorSpec, BF16, F32, S32, S8};
/// let specs = [("a".into(), TensorSpec::new([4, 8], BF16)), ("b".into(), TensorSpec::new([8, 2], BF16))];
/// let g = trace("mm", &specs, KernelConfig::default(), |a| a[0].matmul_acc(a[1], F32))?;
/// assert!(compile_hints(&g).bf16_dots_keep_f32);
/// let specs = [("a".into(), TensorSpec::new([4, 8], S8)), ("b".into(), TensorSpec::new([8, 2], S8))];
/// let g = trace("mm", &specs, KernelConfig::default(), |a| a[0].matmul_acc(a[1], S32))?;
/// assert!(compile_hints(&g).int8_dots);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileHints {
    /// The program has at least one bf16 × bf16 dot, every such dot has
    /// an f32 result that no op narrows straight back to bf16 or f16, and
    /// no dot has f16 operands.
    ///
    /// On CPU such programs hand their dots to XNNPACK (whose bf16 GEMM uses
    /// the AVX512-BF16 instructions where the processor has them). XNNPACK
    /// rounds a bf16 *output* toward zero, and XLA folds `convert(dot)` into
    /// a bf16-output dot, so a program that narrows a bf16 dot's result
    /// keeps XLA's own emitter, which rounds once, to nearest. The options
    /// apply to every dot of the program, and how the libraries round an
    /// f16 dot was not measured, so a program with one keeps the emitter.
    pub bf16_dots_keep_f32: bool,
    /// The program has at least one dot of 8-bit integer operands (s8 or
    /// u8) with an s32 result, and no dot of 16-bit float operands other
    /// than those [`bf16_dots_keep_f32`](Self::bf16_dots_keep_f32) allows.
    ///
    /// XLA's own emitter runs such a dot as a scalar loop (558 ms for a
    /// 2048³ s8 product on a 2-core machine); on CPU these programs hand
    /// their dots to YNNPACK, whose integer GEMM took 10 ms. Integer sums
    /// are exact either way. A 16-bit float dot would then go to YNNPACK
    /// too, whose rounding of a narrow output is not XLA's, hence the
    /// second condition.
    pub int8_dots: bool,
    /// The program has at least one bf16 × bf16 dot, whatever its result's
    /// dtype, and no dot of f16 operands.
    ///
    /// On CPU processors with AMX-BF16 these programs hand their dots to
    /// YNNPACK, whose AMX GEMM rounds a bf16 output to nearest (measured:
    /// as many results above as below the correctly rounded ones, and more
    /// of them exact than XLA's emitter gives).
    pub bf16_dots: bool,
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
    let mut int8 = false;
    let mut f16 = false;
    for node in &graph.nodes {
        if !matches!(node.op, Op::DotGeneral { .. }) || node.operands.len() != 2 {
            continue;
        }
        let operands: Vec<DType> = node.operands.iter().map(|&v| dtype(v)).collect();
        let result = node.results.first().map(|&r| (r, dtype(r)));
        if operands.iter().all(|d| matches!(d, DType::S8 | DType::U8)) {
            int8 |= result.is_some_and(|(_, d)| d == DType::S32);
            continue;
        }
        f16 |= operands.contains(&DType::F16);
        if !operands.iter().all(|&d| d == DType::BF16) {
            continue;
        }
        any = true;
        let keeps = result.is_some_and(|(r, d)| d == DType::F32 && !narrowed.contains(&r));
        all_keep &= keeps;
    }
    let bf16_dots_keep_f32 = any && all_keep && !f16;
    CompileHints {
        bf16_dots_keep_f32,
        // A dot's operands share one dtype, so the 16-bit float dots are
        // the f16 ones and the bf16 ones (`any`).
        int8_dots: int8 && !f16 && (!any || all_keep),
        bf16_dots: any && !f16,
    }
}
