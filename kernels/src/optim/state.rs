//! [`OptState`]: an optimizer's state as a tree — the step count and one
//! slot tree per per-parameter statistic (Adam's two moments, momentum's
//! one), each of the parameters' structure.

use tessel::kernel::{ArgCollector, KernelParam};
use tessel::prelude::*;
use tessel::shard::ShardedBuffer;
use tessel::tree::{Leaf, PathSegment, Tree, TreeDef, TreePath, TreeValue};
use tessel::HostError;

/// An optimizer's state over parameters of tree type `P`: `count` (an
/// `s32[]` step counter) and `slots`, each a tree of `P`'s structure
/// (paths `count`, `slots.0.layers.0.w`, ...). Like any tree it lives in a
/// kernel (`S = Tensor`), on the device (`OptState<Params<DeviceBuffer>,
/// DeviceBuffer>`) and on the host, and checkpoints by its paths.
#[derive(Clone, Debug)]
pub struct OptState<P, S = Tensor> {
    /// Steps taken so far (`s32[]`).
    pub count: S,
    /// Per-parameter statistics, in the order the optimizer's transforms
    /// keep them.
    pub slots: Vec<P>,
}

const COUNT: PathSegment = PathSegment::Field("count");
const SLOTS: PathSegment = PathSegment::Field("slots");

impl<P: Tree> Tree for OptState<P, Tensor> {
    type Form<L: Leaf> = OptState<P::Form<L>, L>;

    fn visit<'a, L: Leaf>(
        x: &'a Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &'a L),
    ) {
        path.push(COUNT);
        f(path, &x.count);
        path.pop();
        path.push(SLOTS);
        <Vec<P>>::visit::<L>(&x.slots, path, f);
        path.pop();
    }

    fn try_map<L: Leaf, M: Leaf, E>(
        x: &Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<Self::Form<M>, E> {
        path.push(COUNT);
        let count = f(path, &x.count);
        path.pop();
        path.push(SLOTS);
        let slots = <Vec<P>>::try_map::<L, M, E>(&x.slots, path, f);
        path.pop();
        Ok(OptState {
            count: count?,
            slots: slots?,
        })
    }

    fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef {
        TreeDef::Node(vec![TreeDef::Leaf, <Vec<P>>::structure::<L>(&x.slots)])
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<Self::Form<L>, HostError> {
        let c = def.children(path, Some(2), "an optimizer state (count, slots)")?;
        path.push(COUNT);
        let count = Tensor::assemble::<L>(&c[0], path, leaves);
        path.pop();
        path.push(SLOTS);
        let slots = <Vec<P>>::assemble::<L>(&c[1], path, leaves);
        path.pop();
        Ok(OptState {
            count: count?,
            slots: slots?,
        })
    }
}

impl<P: tessel::Carry> tessel::Carry for OptState<P, Tensor> {}
impl<P: tessel::Carry> tessel::trace::Outputs for OptState<P, Tensor> {}

impl<P: TreeValue> TreeValue for OptState<P, P::Leaf> {
    type Leaf = P::Leaf;
    type Tree = OptState<P::Tree, Tensor>;
}

macro_rules! forms {
    ($($assoc:ident $collect:ident $bind:ident $leaf:ty;)*) => {
        impl<P: tessel::Carry> KernelParam for OptState<P, Tensor> {
            $(type $assoc<'a> = &'a OptState<P::Form<$leaf>, $leaf>;)*
            $(
                fn $collect<'a>(arg: &&'a OptState<P::Form<$leaf>, $leaf>, name: &'static str, c: &mut ArgCollector<'a>) {
                    tessel::kernel::trees::collect_tree::<Self, $leaf>(*arg, name, c)
                }
                fn $bind(arg: &&OptState<P::Form<$leaf>, $leaf>, next: &mut dyn Iterator<Item = Tensor>) -> Self {
                    tessel::kernel::trees::bind_tree::<Self, $leaf>(*arg, next)
                }
            )*
        }
    };
}

forms! {
    Host collect_host bind_host HostTensor;
    Spec collect_spec bind_spec TensorSpec;
    Buffer collect_buffer bind_buffer DeviceBuffer;
    Sharded collect_sharded bind_sharded ShardedBuffer;
}
