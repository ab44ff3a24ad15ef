//! Checks recorded inside a loop body or a branch leave it as extra
//! carried values or branch results (see [`check`](crate::ops::check)).

use super::{CondBuilder, WhileBuilder};
use crate::dtype::DType;
use crate::ir::{RegionId, ValueId};
use crate::ops::check::{self, RegionChecks};
use crate::ops::constant::full_at;
use crate::ops::elementwise::compare_at;
use crate::ops::Comparison;
use crate::trace::tensor::Tensor;
use crate::trace::with_state;

impl WhileBuilder {
    /// Carries the checks `rc` of the open body out of the loop: a code
    /// (the first failing iteration's) and the values of that iteration,
    /// appended to `outs`. Returns their layout.
    pub(super) fn carry_checks(
        &mut self,
        rc: &RegionChecks,
        outs: &mut Vec<Tensor>,
    ) -> Option<check::Layout> {
        let loc = self.loc.clone();
        let (flat, layout) = check::flatten(rc);
        let mut carried = Vec::with_capacity(flat.len());
        for &t in &flat {
            let spec = t.spec();
            carried.push(self.add_carry(|| full_at(spec.shape, 0.0, spec.dtype, loc.clone()))?);
        }
        // Until an iteration fails, each one's code and values replace the
        // carried ones; after that they stay.
        let clean = compare_at(
            carried[0],
            full_at(Vec::new(), 0.0, DType::S32, loc.clone()),
            Comparison::Eq,
            loc.clone(),
        );
        outs.extend(
            flat.iter()
                .zip(&carried)
                .map(|(&now, &before)| clean.select(now, before)),
        );
        Some(layout)
    }
}

impl CondBuilder {
    /// Whether either branch recorded a check.
    pub(super) fn has_checks(&self, er: RegionId) -> bool {
        with_state(|s| {
            s.checks
                .regions
                .iter()
                .any(|(r, _)| *r == er || *r == self.then_region)
        })
        .unwrap_or(false)
    }

    /// [`finish`](Self::finish); with `checks_only`, the branches return
    /// nothing but their checks.
    pub(super) fn finish_checked(mut self, outs: &[Tensor], checks_only: bool) -> Vec<Tensor> {
        let Some(er) = self.else_region else {
            return outs.to_vec();
        };
        let (then_checks, else_checks) = (check::take(self.then_region), check::take(er));
        if then_checks.is_none() && else_checks.is_none() {
            return self.finish_cond(outs, er);
        }
        let layouts = [&then_checks, &else_checks].map(|c| c.as_ref().map(check::flatten));
        let [t, e] = layouts.map(|l| l.map(|(_, layout)| layout).unwrap_or_default());
        let layout = check::union(&t, &e);
        let user = if checks_only { 0 } else { outs.len() };
        let mut all = outs[..user].to_vec();
        all.extend(check::flatten_as(else_checks.as_ref(), &layout));
        let then_extra =
            with_state(|s| std::mem::replace(&mut s.region, self.then_region)).map(|at| {
                let extra = check::flatten_as(then_checks.as_ref(), &layout);
                let ids: Vec<ValueId> = with_state(|s| {
                    let ids = extra
                        .iter()
                        .filter_map(|&t| s.operand(t).ok().flatten())
                        .collect();
                    s.region = at;
                    ids
                })
                .unwrap_or_default();
                (extra, ids)
            });
        let Some((extra, ids)) = then_extra else {
            return outs.to_vec();
        };
        if checks_only {
            self.specs.clear();
        }
        self.specs.extend(extra.iter().map(|t| t.spec()));
        with_state(|s| {
            let results = &mut s.graph.regions[self.then_region].results;
            if checks_only {
                results.clear();
            }
            results.extend(ids);
        });
        let results = self.finish_cond(&all, er);
        check::merge(&results[user..], &layout);
        results[..user.min(results.len())].to_vec()
    }
}
