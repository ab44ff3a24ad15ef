//! [`Optimizer::update`]: one step of the chain over the leaves of a
//! parameter tree, traced inside the training kernel.

use tessel::prelude::*;
use tessel::tensor::trace_error;
use tessel::tree::TreePath;
use tessel::Carry;

use super::{slot_dtype, OptState, Optimizer, Transform};

/// The leaves of a carry, in order.
fn flat<C: Carry>(c: &C) -> Vec<Tensor> {
    let mut out = Vec::new();
    c.flatten(&mut out);
    out
}

/// One leaf's running values through the chain.
struct LeafStep {
    path: String,
    param: Tensor,
    /// The running update, in the slot dtype.
    u: Tensor,
}

impl Optimizer {
    /// One optimizer step inside a kernel: from the gradients `grads` (the
    /// parameters' structure, as `value_and_grad` gives them), the state and
    /// the parameters, the new parameters and the new state. Statistics and
    /// the update are computed in [`slot_dtype`] (f32 for
    /// bf16 parameters) and the new parameters cast back to their dtype.
    ///
    /// A state of another layout (a slot count the chain does not keep, a
    /// leaf of another shape) is a trace error naming the leaf's path.
    #[track_caller]
    pub fn update<P: Carry>(&self, grads: P, state: OptState<P>, params: P) -> (P, OptState<P>) {
        let mut leaves = Vec::new();
        P::visit::<Tensor>(&params, &mut TreePath::default(), &mut |p, t| {
            leaves.push((p.to_string(), *t))
        });
        let g = flat(&grads);
        let mut slots: Vec<Vec<Tensor>> = state.slots.iter().map(flat).collect();
        if let Err(message) = self.check_layout(&leaves, &g, &slots) {
            let mut operands: Vec<Tensor> = g.clone();
            operands.push(state.count);
            let t = trace_error("optimizer update", &operands, message);
            let mut bad = std::iter::repeat(t);
            let ps = params.rebuild(&mut bad);
            let ss = OptState {
                count: t,
                slots: state.slots.iter().map(|s| s.rebuild(&mut bad)).collect(),
            };
            return (ps, ss);
        }
        let count = state.count + 1;
        let wide = leaves.iter().any(|(_, p)| p.dtype() == F64);
        let t = count.cast(if wide { F64 } else { F32 });
        let mut steps: Vec<LeafStep> = leaves
            .into_iter()
            .zip(&g)
            .map(|((path, param), &g)| LeafStep {
                path,
                param,
                u: g.cast(slot_dtype(param.dtype())),
            })
            .collect();
        let mut slot = 0;
        for tr in &self.transforms {
            apply(tr, &mut steps, &mut slots[slot..slot + tr.slots()], t);
            slot += tr.slots();
        }
        let new_params: Vec<Tensor> = steps
            .iter()
            .map(|s| (s.param.cast(s.u.dtype()) - s.u).cast(s.param.dtype()))
            .collect();
        let params = params.rebuild(&mut new_params.into_iter());
        let slots = state
            .slots
            .iter()
            .zip(slots)
            .map(|(s, new)| s.rebuild(&mut new.into_iter()))
            .collect();
        (params, OptState { count, slots })
    }

    /// Checks the state against the chain and the parameters.
    fn check_layout(
        &self,
        leaves: &[(String, Tensor)],
        grads: &[Tensor],
        slots: &[Vec<Tensor>],
    ) -> Result<(), String> {
        if slots.len() != self.num_slots() {
            return Err(format!(
                "the state has {} slot trees, the optimizer keeps {} ({:?})",
                slots.len(),
                self.num_slots(),
                self.transforms
            ));
        }
        if grads.len() != leaves.len() {
            return Err(format!(
                "{} gradients for {} parameters",
                grads.len(),
                leaves.len()
            ));
        }
        for (i, (path, p)) in leaves.iter().enumerate() {
            let want = TensorSpec::new(p.shape(), slot_dtype(p.dtype()));
            if grads[i].shape() != p.shape() {
                return Err(format!(
                    "{path}: the gradient is {}, the parameter {}",
                    grads[i].spec(),
                    p.spec()
                ));
            }
            for (k, s) in slots.iter().enumerate() {
                match s.get(i) {
                    Some(x) if x.spec() == want => {}
                    Some(x) => {
                        return Err(format!(
                            "slots.{k}.{path}: expected {want}, got {}",
                            x.spec()
                        ))
                    }
                    None => {
                        return Err(format!(
                            "slots.{k} has {} leaves, the parameters {}",
                            s.len(),
                            leaves.len()
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}

/// Applies one transform to every leaf, updating its slots in place.
fn apply(tr: &Transform, steps: &mut [LeafStep], slots: &mut [Vec<Tensor>], t: Tensor) {
    match *tr {
        Transform::ClipByGlobalNorm(max_norm) => {
            let cd = t.dtype();
            let mut total = Tensor::scalar(0.0, cd);
            for s in steps.iter() {
                let axes: Vec<isize> = (0..s.u.rank() as isize).collect();
                total = total + s.u.cast(cd).square().sum(&axes);
            }
            let scale = (Tensor::scalar(max_norm, cd) / total.sqrt().maximum(1e-30)).minimum(1.0);
            for s in steps.iter_mut() {
                s.u = s.u * scale.cast(s.u.dtype());
            }
        }
        Transform::Adam { b1, b2, eps } => {
            for (i, s) in steps.iter_mut().enumerate() {
                let cd = s.u.dtype();
                let tc = t.cast(cd);
                let m = slots[0][i] * b1 + s.u * (1.0 - b1);
                let v = slots[1][i] * b2 + s.u.square() * (1.0 - b2);
                let bc1 = 1.0 - Tensor::scalar(b1, cd).pow(tc);
                let bc2 = 1.0 - Tensor::scalar(b2, cd).pow(tc);
                s.u = (m / bc1) / ((v / bc2).sqrt() + eps);
                (slots[0][i], slots[1][i]) = (m, v);
            }
        }
        Transform::Lion { b1, b2 } => {
            for (i, s) in steps.iter_mut().enumerate() {
                let m = slots[0][i];
                let g = s.u;
                s.u = (m * b1 + g * (1.0 - b1)).sign();
                slots[0][i] = m * b2 + g * (1.0 - b2);
            }
        }
        Transform::Momentum { beta, nesterov } => {
            for (i, s) in steps.iter_mut().enumerate() {
                let m = slots[0][i] * beta + s.u;
                s.u = if nesterov { s.u + m * beta } else { m };
                slots[0][i] = m;
            }
        }
        Transform::WeightDecay { rate, ref mask } => {
            for s in steps.iter_mut().filter(|s| mask.matches(&s.path)) {
                s.u = s.u + s.param.cast(s.u.dtype()) * rate;
            }
        }
        Transform::LearningRate(schedule) => {
            let lr = schedule.traced(t);
            for s in steps.iter_mut() {
                s.u = s.u * lr.cast(s.u.dtype());
            }
        }
    }
}
