//! [`TrainState`]: the parameters and the optimizer state over them, as one
//! tree (flax's `TrainState`): what a training step takes, donates and
//! returns, and what a checkpoint holds.

use tessel::prelude::*;
use tessel::tree::TreeValue;
use tessel::Carry;

use super::{OptState, Optimizer};

/// Parameters of tree type `P` and the [`OptState`] over them (paths
/// `params.…` and `opt.count`, `opt.slots.0.…`). In a kernel it is
/// `TrainState<Params>`; on the device `TrainState<Params<DeviceBuffer>,
/// DeviceBuffer>`; on the host, in a checkpoint, `TrainState<Params<HostTensor>,
/// HostTensor>`.
///
/// ```
/// # extern crate tessel_dsl as tessel;
/// use tessel::prelude::*;
/// use tessel::{autodiff::value_and_grad, tree, Tree};
/// use tessel_kernels::optim::{Optimizer, PathMask, Schedule, TrainState};
///
/// #[derive(Tree, Clone)]
/// struct Linear<T = Tensor> {
///     w: T,
///     b: T,
/// }
///
/// #[cpu_kernel(donate(state))]
/// fn step(state: TrainState<Linear>, x: Tensor, y: Tensor, opt: Optimizer) -> (TrainState<Linear>, Tensor) {
///     let loss_of = |p: Linear| (x.matmul(p.w) + p.b - y).square().mean(&[0, 1]);
///     let (loss, grads) = value_and_grad(loss_of, state.params.clone());
///     (state.apply_gradients(&opt, grads), loss)
/// }
///
/// let dev = Device::cpu()?;
/// let opt = Optimizer::adamw(Schedule::Constant(1e-2), 0.01, PathMask::except(["b"]));
/// let params = Linear {
///     w: HostTensor::from_vec(vec![0.5f32; 4], [2, 2])?,
///     b: HostTensor::from_vec(vec![0.0f32; 2], [2])?,
/// };
/// let mut state = tree::to_device(&dev, &TrainState::create(params, &opt)?)?;
/// let x = dev.to_device(&HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?)?;
/// let y = dev.to_device(&HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2])?)?;
/// let (next, first) = step::call(&dev, &state, &x, &y, opt.clone())?;
/// state = next; // the donated state is consumed; the result replaces it
/// let (_, second) = step::call(&dev, &state, &x, &y, opt.clone())?;
/// assert!(second.to_host()?.to_vec::<f32>()?[0] < first.to_host()?.to_vec::<f32>()?[0]);
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Tree, Clone, Debug)]
pub struct TrainState<P, S = Tensor> {
    /// The parameters.
    pub params: P,
    /// The optimizer's state over them.
    pub opt: OptState<P, S>,
}

impl<P: Carry> TrainState<P> {
    /// One optimizer step inside a kernel ([`Optimizer::update`]): the state
    /// after applying `grads` (the parameters' structure, as
    /// `value_and_grad` gives them) with `opt`.
    #[track_caller]
    pub fn apply_gradients(self, opt: &Optimizer, grads: P) -> Self {
        let (params, state) = opt.update(grads, self.opt, self.params);
        TrainState { params, opt: state }
    }
}

impl<X: TreeValue<Leaf = HostTensor>> TrainState<X, HostTensor> {
    /// The initial state for `params` (host tensors): the parameters and
    /// `opt`'s initial state for them ([`Optimizer::init`]).
    pub fn create(params: X, opt: &Optimizer) -> Result<Self> {
        Ok(TrainState {
            opt: opt.init(&params)?,
            params,
        })
    }
}
