//! Checks across `vmap`: a check written in the function (or added by the
//! automatic check families) checks every example. The function's region
//! code becomes, over the batch, one code per example; the region keeps the
//! code of the first example that failed, and each reported value that
//! differs between examples is that example's.

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::RegionId;
use crate::ops::check::{take, RegionChecks};
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

use super::batcher::Batcher;
use super::emit;

/// Row `lane` (an `s32[]` tensor) of `t` along axis 0, without that axis.
fn row(t: Tensor, lane: Tensor, loc: &Location) -> Tensor {
    let shape = t.shape();
    let mut starts = vec![lane];
    starts.extend((1..shape.len()).map(|_| emit::scalar(0.0, DType::S32, loc)));
    let mut sizes = shape.clone();
    sizes[0] = 1;
    let spec = crate::shape::TensorSpec::new(sizes.clone(), t.dtype());
    let mut operands = vec![t];
    operands.extend(starts);
    let one = emit::op1(
        "vmap",
        &operands,
        crate::ir::Op::DynamicSlice { sizes },
        spec,
        loc,
    );
    emit::reshape(one, shape[1..].to_vec(), loc)
}

/// Replaces the checks of `region` recorded by the function's trace with
/// their batched counterparts.
pub(super) fn batch_checks(b: &Batcher, region: RegionId, loc: &Location) {
    let Some(rc) = take(region) else {
        return;
    };
    let codes = b.get(rc.code.value);
    if !codes.batched {
        with_state(|s| s.checks.put(region, rc));
        return;
    }
    // A check's own ops get no automatic checks.
    let was_busy = with_state(|s| std::mem::replace(&mut s.checks.busy, true)).unwrap_or(false);
    // The first example whose code is set (example 0 when none is).
    let failed = emit::not_equal(
        codes.t,
        emit::broadcast(
            emit::scalar(0.0, DType::S32, loc),
            codes.t.shape(),
            Vec::new(),
            loc,
        ),
        loc,
    );
    let lane = emit::convert(failed, DType::S32, loc).argmax(0);
    let code = row(codes.t, lane, loc);
    let values = rc
        .values
        .iter()
        .map(|(k, vs)| {
            let vs = vs
                .iter()
                .map(|v| {
                    let x = b.get(v.value);
                    match x.batched {
                        true => row(x.t, lane, loc),
                        false => x.t,
                    }
                })
                .collect();
            (*k, vs)
        })
        .collect();
    with_state(|s| {
        s.checks.put(region, RegionChecks { code, values });
        s.checks.busy = was_busy;
    });
}
