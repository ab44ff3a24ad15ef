//! [`Carry`]: the values a traced loop carries, a branch returns, or a
//! gradient takes: any [`Tree`] of traced tensors — a [`Tensor`], a tuple,
//! array, `Vec` or `Option` of them, or a `#[derive(Tree)]` struct — and the
//! [`Tree`] impl of [`Tensor`] itself, the leaf.

use crate::error::HostError;
use crate::host::HostTensor;
use crate::ir::tree::{Leaf, Tree, TreeDef, TreePath, TreeValue};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::Outputs;

impl Leaf for Tensor {}

/// A tensor is the one-leaf tree.
impl Tree for Tensor {
    type Form<L: Leaf> = L;

    fn visit<'a, L: Leaf>(x: &'a L, path: &mut TreePath, f: &mut dyn FnMut(&TreePath, &'a L)) {
        f(path, x)
    }

    fn try_map<L: Leaf, M: Leaf, E>(
        x: &L,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<M, E> {
        f(path, x)
    }

    fn structure<L: Leaf>(_: &L) -> TreeDef {
        TreeDef::Leaf
    }

    fn write_key<L: Leaf>(_: &L, out: &mut Vec<u8>) -> usize {
        TreeDef::key_leaf(out);
        1
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<L, HostError> {
        match def {
            TreeDef::Leaf => leaves
                .next()
                .ok_or_else(|| path.error("the leaves ran out before this one")),
            other => Err(path.error(format!("expected a tensor, found {}", other.describe()))),
        }
    }
}

macro_rules! leaf_value {
    ($($t:ty),+) => {$(
        impl TreeValue for $t {
            type Leaf = $t;
            type Tree = Tensor;
        }
    )+};
}
leaf_value!(Tensor, HostTensor, TensorSpec);

/// A value carried through a loop or returned by a branch: a [`Tree`] of
/// traced tensors (a [`Tensor`], a tuple, array, `Vec` or `Option` of them,
/// or a `#[derive(Tree)]` struct over `Tensor`, which implements it).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be carried through a traced loop or merged by a branch on a tensor",
    label = "not made of `Tensor`s",
    note = "a `for` over a range, a `while` on a tensor condition and an `if` on a tensor condition carry \
            every outer variable they assign as traced values; a Rust value assigned there must be a \
            `Tensor` (or a tuple/array/Vec of them, or a `#[derive(Tree)]` struct). To run a loop while \
            tracing instead, write `#[unroll] for ...`"
)]
pub trait Carry: Tree<Form<Tensor> = Self> {
    /// Appends the tensors, in order.
    fn flatten(&self, out: &mut Vec<Tensor>) {
        Self::visit::<Tensor>(self, &mut TreePath::default(), &mut |_, t| out.push(*t));
    }

    /// A value of the same structure as `self` made of the next tensors of `it`.
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        let rebuilt = Self::try_map::<Tensor, Tensor, std::convert::Infallible>(
            self,
            &mut TreePath::default(),
            &mut |_, _| Ok::<Tensor, std::convert::Infallible>(it.next().unwrap_or(Tensor::INERT)),
        );
        match rebuilt {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }
}

impl Carry for () {}

/// Each container of carries is a carry, and a kernel may return it.
macro_rules! carry_and_output {
    ($([$($g:tt)*] $t:ty;)*) => {$(
        impl<$($g)*> Carry for $t {}
        impl<$($g)*> Outputs for $t {}
    )*};
}
carry_and_output! {
    [] Tensor;
    [X: Carry] Vec<X>;
    [X: Carry, const N: usize] [X; N];
    [X: Carry] Option<X>;
    [A: Carry] (A,);
    [A: Carry, B: Carry] (A, B);
    [A: Carry, B: Carry, C: Carry] (A, B, C);
    [A: Carry, B: Carry, C: Carry, D: Carry] (A, B, C, D);
    [A: Carry, B: Carry, C: Carry, D: Carry, E: Carry] (A, B, C, D, E);
    [A: Carry, B: Carry, C: Carry, D: Carry, E: Carry, F: Carry] (A, B, C, D, E, F);
    [A: Carry, B: Carry, C: Carry, D: Carry, E: Carry, F: Carry, G: Carry] (A, B, C, D, E, F, G);
    [A: Carry, B: Carry, C: Carry, D: Carry, E: Carry, F: Carry, G: Carry, H: Carry] (A, B, C, D, E, F, G, H);
}

/// The tensors of a carry, in order.
pub fn flat<C: Carry>(c: &C) -> Vec<Tensor> {
    let mut v = Vec::new();
    c.flatten(&mut v);
    v
}
