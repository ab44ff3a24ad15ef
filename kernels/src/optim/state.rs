//! [`OptState`]: an optimizer's state as a tree — the step count and one
//! slot tree per per-parameter statistic (Adam's two moments, momentum's
//! one), each of the parameters' structure.

use tessel::prelude::*;

/// An optimizer's state over parameters of tree type `P`: `count` (an
/// `s32[]` step counter) and `slots`, each a tree of `P`'s structure
/// (paths `count`, `slots.0.layers.0.w`, ...). Like any tree it lives in a
/// kernel (`S = Tensor`), on the device (`OptState<Params<DeviceBuffer>,
/// DeviceBuffer>`) and on the host, and checkpoints by its paths: a
/// `#[derive(Tree)]` type whose parameter `P` is a subtree.
#[derive(Tree, Clone, Debug)]
pub struct OptState<P, S = Tensor> {
    /// Steps taken so far (`s32[]`).
    pub count: S,
    /// Per-parameter statistics, in the order the optimizer's transforms
    /// keep them.
    pub slots: Vec<P>,
}
