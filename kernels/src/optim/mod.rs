//! Optimizers over trees (optax's design): an [`Optimizer`] is a chain of
//! [`Transform`]s — gradient clipping, Adam/Lion/momentum statistics,
//! weight decay chosen by path ([`PathMask`]), a learning-rate
//! [`Schedule`] — whose state is a tree ([`OptState`]) of the parameters'
//! structure. [`Optimizer::update`] runs inside the training-step kernel,
//! so the whole step (forward, backward, update) is one program, and the
//! state is donated and updated in place with the parameters.
//!
//! ```
//! # extern crate tessel_dsl as tessel;
//! use tessel_kernels::optim::{Optimizer, OptState, PathMask, Schedule};
//! use tessel::prelude::*;
//! use tessel::{autodiff::value_and_grad, tree, Tree};
//!
//! #[derive(Tree, Clone)]
//! struct Linear<T = Tensor> {
//!     w: T,
//!     b: T,
//! }
//!
//! #[cpu_kernel(donate(params, opt_state))]
//! fn step(params: Linear, opt_state: OptState<Linear>, x: Tensor, y: Tensor, opt: Optimizer)
//!     -> (Linear, OptState<Linear>, Tensor)
//! {
//!     let loss_of = |p: Linear| (x.matmul(p.w) + p.b - y).square().mean(&[0, 1]);
//!     let (loss, grads) = value_and_grad(loss_of, params.clone());
//!     let (params, opt_state) = opt.update(grads, opt_state, params);
//!     (params, opt_state, loss)
//! }
//!
//! let dev = Device::cpu()?;
//! let opt = Optimizer::adamw(Schedule::Constant(1e-2), 0.01, PathMask::except(["b"]));
//! let host = Linear {
//!     w: HostTensor::from_vec(vec![0.5f32; 4], [2, 2])?,
//!     b: HostTensor::from_vec(vec![0.0f32; 2], [2])?,
//! };
//! let mut state = opt.init(&host)?;
//! let mut params = host;
//! let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
//! let y = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2])?;
//! let (p, s, first) = step::run(&dev, &params, &state, &x, &y, opt.clone())?;
//! (params, state) = (p, s);
//! let (_, _, second) = step::run(&dev, &params, &state, &x, &y, opt.clone())?;
//! assert!(second.to_vec::<f32>()?[0] < first.to_vec::<f32>()?[0]);
//! # Ok::<(), tessel::Error>(())
//! ```

mod mask;
mod schedule;
mod state;
mod train_state;
mod update;

pub use mask::PathMask;
pub use schedule::{After, Schedule};
pub use state::OptState;
pub use train_state::TrainState;

use tessel::prelude::*;
use tessel::tree::TreeValue;

/// One step of an optimizer chain, applied to the running update `u`
/// (the gradient at the start) leaf by leaf, in order; the chain's result
/// is subtracted from the parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Transform {
    /// Scales every leaf by `min(1, max_norm / ‖u‖₂)`, the norm taken over
    /// all leaves together.
    ClipByGlobalNorm(f64),
    /// Adam's bias-corrected moments: `u ← m̂ / (√v̂ + eps)` (two slots).
    Adam {
        /// First-moment decay.
        b1: f64,
        /// Second-moment decay.
        b2: f64,
        /// Added to `√v̂`.
        eps: f64,
    },
    /// Lion: `u ← sign(b1·m + (1−b1)·u)`, `m ← b2·m + (1−b2)·u` (one slot).
    Lion {
        /// Interpolation of the update.
        b1: f64,
        /// Decay of the momentum.
        b2: f64,
    },
    /// Heavy-ball momentum: `m ← beta·m + u`, `u ← m`, or `u + beta·m`
    /// with Nesterov (one slot).
    Momentum {
        /// Momentum decay.
        beta: f64,
        /// Nesterov's look-ahead.
        nesterov: bool,
    },
    /// Decoupled weight decay: `u ← u + rate·p` on the leaves `mask` picks.
    WeightDecay {
        /// The decay rate (multiplied by the learning rate when a
        /// [`LearningRate`](Transform::LearningRate) follows).
        rate: f64,
        /// Which leaves decay.
        mask: PathMask,
    },
    /// Scales by the learning rate of the step: `u ← lr(t)·u`.
    LearningRate(Schedule),
}

impl Transform {
    /// How many per-parameter statistics (slot trees) it keeps.
    pub fn slots(&self) -> usize {
        match self {
            Transform::Adam { .. } => 2,
            Transform::Lion { .. } | Transform::Momentum { .. } => 1,
            _ => 0,
        }
    }

    fn write_key(&self, key: &mut StaticKey) {
        match self {
            Transform::ClipByGlobalNorm(m) => key.push(&0u8).push(m),
            Transform::Adam { b1, b2, eps } => key.push(&1u8).push(b1).push(b2).push(eps),
            Transform::Lion { b1, b2 } => key.push(&2u8).push(b1).push(b2),
            Transform::Momentum { beta, nesterov } => key.push(&3u8).push(beta).push(nesterov),
            Transform::WeightDecay { rate, mask } => {
                key.push(&4u8).push(rate);
                mask.write_key(key);
                key
            }
            Transform::LearningRate(s) => {
                key.push(&5u8);
                s.write_key(key);
                key
            }
        };
    }
}

/// A chain of [`Transform`]s with its state's layout: optax's
/// `GradientTransformation`, built from the usual recipes or by
/// [`chain`](Optimizer::chain). A static kernel argument (its
/// hyperparameters are in the compile key; the learning rate follows the
/// step count inside the program, so a schedule never recompiles).
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    transforms: Vec<Transform>,
}

impl Optimizer {
    /// The transforms applied in order.
    pub fn chain(transforms: impl IntoIterator<Item = Transform>) -> Self {
        Optimizer {
            transforms: transforms.into_iter().collect(),
        }
    }

    /// AdamW (betas 0.9, 0.999, eps 1e-8): Adam, then decoupled weight
    /// decay `weight_decay` on the leaves `decay` picks, then the rate.
    pub fn adamw(lr: Schedule, weight_decay: f64, decay: PathMask) -> Self {
        Self::chain([
            Transform::Adam {
                b1: 0.9,
                b2: 0.999,
                eps: 1e-8,
            },
            Transform::WeightDecay {
                rate: weight_decay,
                mask: decay,
            },
            Transform::LearningRate(lr),
        ])
    }

    /// SGD, with heavy-ball or Nesterov momentum when `momentum > 0`.
    pub fn sgd(lr: Schedule, momentum: f64, nesterov: bool) -> Self {
        let mut t = Vec::new();
        if momentum > 0.0 {
            t.push(Transform::Momentum {
                beta: momentum,
                nesterov,
            });
        }
        t.push(Transform::LearningRate(lr));
        Self::chain(t)
    }

    /// Lion (betas 0.9, 0.99) with decoupled weight decay on the leaves
    /// `decay` picks.
    pub fn lion(lr: Schedule, weight_decay: f64, decay: PathMask) -> Self {
        Self::chain([
            Transform::Lion { b1: 0.9, b2: 0.99 },
            Transform::WeightDecay {
                rate: weight_decay,
                mask: decay,
            },
            Transform::LearningRate(lr),
        ])
    }

    /// This chain with the gradients first clipped to global norm `max_norm`.
    pub fn clip_by_global_norm(mut self, max_norm: f64) -> Self {
        self.transforms
            .insert(0, Transform::ClipByGlobalNorm(max_norm));
        self
    }

    /// The transforms, in order.
    pub fn transforms(&self) -> &[Transform] {
        &self.transforms
    }

    /// How many slot trees its state holds.
    pub fn num_slots(&self) -> usize {
        self.transforms.iter().map(Transform::slots).sum()
    }

    /// The initial state for `params` (host tensors): a zero count and
    /// zero slots, each leaf in its [`slot_dtype`].
    pub fn init<X: TreeValue<Leaf = HostTensor>>(
        &self,
        params: &X,
    ) -> Result<OptState<X, HostTensor>> {
        let slots = (0..self.num_slots())
            .map(|_| {
                params.map_leaves(|_, h| {
                    HostTensor::zeros(TensorSpec::new(
                        h.spec().shape.clone(),
                        slot_dtype(h.dtype()),
                    ))
                })
            })
            .collect();
        Ok(OptState {
            count: HostTensor::from_vec(vec![0i32], [])?,
            slots,
        })
    }
}

/// The dtype an optimizer keeps statistics and computes updates in for a
/// parameter of `dtype`: f32 for 16-bit and narrower floats (f32 master
/// statistics for bf16 parameters), the parameter's own otherwise.
pub fn slot_dtype(dtype: DType) -> DType {
    if dtype == F64 {
        F64
    } else {
        F32
    }
}

impl StaticArg for Optimizer {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.transforms.len());
        for t in &self.transforms {
            t.write_key(key);
        }
    }
}
