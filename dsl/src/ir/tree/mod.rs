//! Trees of tensors (JAX's pytrees): the traits that relate the forms of one
//! structure — traced [`Tensor`](crate::Tensor) leaves inside a kernel,
//! `DeviceBuffer` leaves between calls, `HostTensor` leaves on the host,
//! `TensorSpec` leaves to compile — beside the data of trees from
//! tessel-ir (`TreeDef`, `TreePath`, `Leaf`), which this module re-exports.
//!
//! A type is a [`Tree`] through `#[derive(Tree)]` (structs and enums generic
//! over their leaf type) or the impls here (`Vec`, arrays, `Option`, tuples).
//! The trait is implemented on the traced form (`Params<Tensor>`); its
//! [`Form`](Tree::Form) names the same structure with other leaves.
//! [`TreeValue`] goes the other way, from any form to its tree, so functions
//! over trees infer their types from the value they are given.

mod impls;

pub use tessel_ir::ir::tree::*;

use crate::dtype::DType;
use crate::error::HostError;
use crate::shape::TensorSpec;

/// A structure of tensors, implemented on its traced form (`Params<Tensor>`,
/// `Vec<Tensor>`, `(Tensor, Tensor)`, ...) by `#[derive(Tree)]` or by the
/// impls of this module. [`Form<L>`](Tree::Form) is the same structure with
/// leaves of type `L`; the functions work on any form.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tree of tensors",
    label = "not a `Tensor`, a `#[derive(Tree)]` type, or a tuple, array, `Vec` or `Option` of them",
    note = "write the structure once, generic over its leaf: \
            `#[derive(Tree)] struct Params<T = Tensor> {{ w: T, layers: Vec<Layer<T>> }}`"
)]
pub trait Tree: Sized {
    /// The same structure with leaves of type `L`.
    type Form<L: Leaf>: 'static;

    /// Calls `f` on every leaf of `x` with its path, in order.
    fn visit<'a, L: Leaf>(
        x: &'a Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &'a L),
    );

    /// The same structure with every leaf replaced by `f`'s value for it
    /// (in [`visit`](Tree::visit) order); the first error stops.
    fn try_map<L: Leaf, M: Leaf, E>(
        x: &Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<Self::Form<M>, E>;

    /// The structure of `x`.
    fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef;

    /// Writes the identity of `x`'s structure, the bytes
    /// `structure(x).write_key(out)` writes, and returns its number of
    /// leaves. The impls of this crate and `#[derive(Tree)]` write it
    /// without building the structure (a kernel call keys every tree
    /// argument this way).
    fn write_key<L: Leaf>(x: &Self::Form<L>, out: &mut Vec<u8>) -> usize {
        let def = Self::structure::<L>(x);
        def.write_key(out);
        def.num_leaves()
    }

    /// A tree of structure `def` made of the next leaves of `leaves`, or an
    /// error at the first path where `def` does not fit this type or the
    /// leaves run out.
    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<Self::Form<L>, HostError>;
}

/// A value that is one form of a tree: `Params<HostTensor>`,
/// `Vec<DeviceBuffer>`, a lone `TensorSpec`, ... It names its [`Tree`] and
/// its leaf type, so functions over trees take the value and infer the rest.
pub trait TreeValue: Sized {
    /// The leaf type.
    type Leaf: Leaf;
    /// The tree (its traced form) of which this is the `Leaf` form.
    type Tree: Tree<Form<Self::Leaf> = Self>;

    /// The leaves, in order.
    fn leaves(&self) -> Vec<&Self::Leaf> {
        let mut out = Vec::new();
        <Self::Tree as Tree>::visit::<Self::Leaf>(self, &mut TreePath::default(), &mut |_, l| {
            out.push(l)
        });
        out
    }

    /// The value as the `Leaf` form of its tree (the same value, named
    /// through the tree's type: what functions generic over the tree take).
    fn as_form(&self) -> &<Self::Tree as Tree>::Form<Self::Leaf> {
        self
    }

    /// The leaves' paths, in order (`layers.0.wq`, ...).
    fn leaf_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        <Self::Tree as Tree>::visit::<Self::Leaf>(self, &mut TreePath::default(), &mut |p, _| {
            out.push(p.as_str().to_owned())
        });
        out
    }

    /// The leaves with their paths, in order.
    fn leaves_with_paths(&self) -> Vec<(String, &Self::Leaf)> {
        let mut out = Vec::new();
        <Self::Tree as Tree>::visit::<Self::Leaf>(self, &mut TreePath::default(), &mut |p, l| {
            out.push((p.as_str().to_owned(), l))
        });
        out
    }

    /// The same structure with every leaf replaced by `f(path, leaf)`.
    fn map_leaves<M: Leaf>(
        &self,
        mut f: impl FnMut(&TreePath, &Self::Leaf) -> M,
    ) -> <Self::Tree as Tree>::Form<M> {
        let mapped = <Self::Tree as Tree>::try_map::<Self::Leaf, M, _>(
            self,
            &mut TreePath::default(),
            &mut |p, l| Ok::<M, std::convert::Infallible>(f(p, l)),
        );
        match mapped {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// The same structure with every leaf replaced by `f(path, leaf)`; the
    /// first error stops.
    fn try_map_leaves<M: Leaf, E>(
        &self,
        mut f: impl FnMut(&TreePath, &Self::Leaf) -> Result<M, E>,
    ) -> Result<<Self::Tree as Tree>::Form<M>, E> {
        <Self::Tree as Tree>::try_map::<Self::Leaf, M, _>(self, &mut TreePath::default(), &mut f)
    }

    /// The structure (without the leaves).
    fn structure(&self) -> TreeDef {
        <Self::Tree as Tree>::structure::<Self::Leaf>(self)
    }
}

/// A tree of structure `def` made of `leaves` (all of them), or an error
/// naming the first path where they do not fit.
pub fn assemble_all<T: Tree, L: Leaf>(
    def: &TreeDef,
    leaves: Vec<L>,
) -> Result<T::Form<L>, HostError> {
    let (n, want) = (leaves.len(), def.num_leaves());
    if n != want {
        return Err(TreePath::default().error(format!("the structure has {want} leaves, got {n}")));
    }
    assemble_counted::<T, L>(def, leaves)
}

/// [`assemble_all`] for `leaves` already counted against `def`. The walk
/// keeps no path (a kernel call rebuilds its results this way); when `def`
/// does not fit `T`, a second walk over placeholder leaves names where.
pub(crate) fn assemble_counted<T: Tree, L: Leaf>(
    def: &TreeDef,
    leaves: Vec<L>,
) -> Result<T::Form<L>, HostError> {
    T::assemble(def, &mut TreePath::silent(), &mut leaves.into_iter()).map_err(|unplaced| {
        let placeholder = || TensorSpec::new(Vec::<usize>::new(), DType::F32);
        let mut holes = std::iter::repeat_with(placeholder);
        match T::assemble::<TensorSpec>(def, &mut TreePath::unnamed(), &mut holes) {
            Err(named) => named,
            Ok(_) => unplaced,
        }
    })
}
