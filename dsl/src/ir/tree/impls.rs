//! [`Tree`] and [`TreeValue`] for the standard containers: `Vec`, arrays,
//! `Option`, tuples of up to 8 and `()`.

use super::{Leaf, PathSegment, Tree, TreeDef, TreePath, TreeValue};
use crate::error::HostError;

/// Runs `f` one level down, at `segment`.
fn at<R>(path: &mut TreePath, segment: PathSegment, f: impl FnOnce(&mut TreePath) -> R) -> R {
    path.push(segment);
    let r = f(path);
    path.pop();
    r
}

/// Visits the elements of a sequence, each at its index.
fn visit_seq<'a, X: Tree, L: Leaf>(
    xs: &'a [X::Form<L>],
    path: &mut TreePath,
    f: &mut dyn FnMut(&TreePath, &'a L),
) {
    for (i, e) in xs.iter().enumerate() {
        at(path, PathSegment::Index(i), |p| X::visit(e, p, f));
    }
}

/// Maps the elements of a sequence, each at its index.
fn map_seq<X: Tree, L: Leaf, M: Leaf, E>(
    xs: &[X::Form<L>],
    path: &mut TreePath,
    f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
) -> Result<Vec<X::Form<M>>, E> {
    let mut out = Vec::with_capacity(xs.len());
    for (i, e) in xs.iter().enumerate() {
        out.push(at(path, PathSegment::Index(i), |p| X::try_map(e, p, f))?);
    }
    Ok(out)
}

/// Writes the key of a sequence (a node of its elements); returns its leaves.
fn key_seq<X: Tree, L: Leaf>(xs: &[X::Form<L>], out: &mut Vec<u8>) -> usize {
    TreeDef::key_node(out, xs.len());
    xs.iter().map(|e| X::write_key::<L>(e, out)).sum()
}

/// The elements of a sequence of structures `children`, each at its index.
fn assemble_seq<X: Tree, L: Leaf>(
    children: &[TreeDef],
    path: &mut TreePath,
    leaves: &mut dyn Iterator<Item = L>,
) -> Result<Vec<X::Form<L>>, HostError> {
    let mut out = Vec::with_capacity(children.len());
    for (i, d) in children.iter().enumerate() {
        out.push(at(path, PathSegment::Index(i), |p| {
            X::assemble(d, p, leaves)
        })?);
    }
    Ok(out)
}

impl<X: Tree> Tree for Vec<X> {
    type Form<L: Leaf> = Vec<X::Form<L>>;

    fn visit<'a, L: Leaf>(
        x: &'a Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &'a L),
    ) {
        visit_seq::<X, L>(x, path, f)
    }

    fn try_map<L: Leaf, M: Leaf, E>(
        x: &Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<Self::Form<M>, E> {
        map_seq::<X, L, M, E>(x, path, f)
    }

    fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef {
        TreeDef::Node(x.iter().map(X::structure::<L>).collect())
    }

    fn write_key<L: Leaf>(x: &Self::Form<L>, out: &mut Vec<u8>) -> usize {
        key_seq::<X, L>(x, out)
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<Self::Form<L>, HostError> {
        let children = def.children(path, None, "a sequence")?;
        assemble_seq::<X, L>(children, path, leaves)
    }
}

impl<X: TreeValue> TreeValue for Vec<X> {
    type Leaf = X::Leaf;
    type Tree = Vec<X::Tree>;
}

impl<X: Tree, const N: usize> Tree for [X; N] {
    type Form<L: Leaf> = [X::Form<L>; N];

    fn visit<'a, L: Leaf>(
        x: &'a Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &'a L),
    ) {
        visit_seq::<X, L>(x, path, f)
    }

    fn try_map<L: Leaf, M: Leaf, E>(
        x: &Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<Self::Form<M>, E> {
        map_seq::<X, L, M, E>(x, path, f).map(into_array)
    }

    fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef {
        TreeDef::Node(x.iter().map(X::structure::<L>).collect())
    }

    fn write_key<L: Leaf>(x: &Self::Form<L>, out: &mut Vec<u8>) -> usize {
        key_seq::<X, L>(x, out)
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<Self::Form<L>, HostError> {
        let children = def.children(path, Some(N), &format!("an array of {N}"))?;
        assemble_seq::<X, L>(children, path, leaves).map(into_array)
    }
}

/// `v` (of exactly `N` elements, as every caller builds it) as an array.
fn into_array<T, const N: usize>(v: Vec<T>) -> [T; N] {
    let mut it = v.into_iter();
    std::array::from_fn(|_| match it.next() {
        Some(x) => x,
        // Every caller pushes one element per index of an `N`-array.
        None => unreachable!("an array of {N} built from fewer elements"),
    })
}

impl<X: TreeValue, const N: usize> TreeValue for [X; N] {
    type Leaf = X::Leaf;
    type Tree = [X::Tree; N];
}

impl<X: Tree> Tree for Option<X> {
    type Form<L: Leaf> = Option<X::Form<L>>;

    fn visit<'a, L: Leaf>(
        x: &'a Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &'a L),
    ) {
        if let Some(e) = x {
            X::visit(e, path, f);
        }
    }

    fn try_map<L: Leaf, M: Leaf, E>(
        x: &Self::Form<L>,
        path: &mut TreePath,
        f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<Self::Form<M>, E> {
        x.as_ref().map(|e| X::try_map(e, path, f)).transpose()
    }

    fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef {
        match x {
            Some(e) => TreeDef::Node(vec![X::structure::<L>(e)]),
            None => TreeDef::Absent,
        }
    }

    fn write_key<L: Leaf>(x: &Self::Form<L>, out: &mut Vec<u8>) -> usize {
        match x {
            Some(e) => {
                TreeDef::key_node(out, 1);
                X::write_key::<L>(e, out)
            }
            None => {
                TreeDef::key_absent(out);
                0
            }
        }
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        leaves: &mut dyn Iterator<Item = L>,
    ) -> Result<Self::Form<L>, HostError> {
        match def {
            TreeDef::Absent => Ok(None),
            d => {
                let c = d.children(path, Some(1), "an option")?;
                Ok(Some(X::assemble(&c[0], path, leaves)?))
            }
        }
    }
}

impl<X: TreeValue> TreeValue for Option<X> {
    type Leaf = X::Leaf;
    type Tree = Option<X::Tree>;
}

impl Tree for () {
    type Form<L: Leaf> = ();

    fn visit<'a, L: Leaf>(_: &'a (), _: &mut TreePath, _: &mut dyn FnMut(&TreePath, &'a L)) {}

    fn try_map<L: Leaf, M: Leaf, E>(
        _: &(),
        _: &mut TreePath,
        _: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
    ) -> Result<(), E> {
        Ok(())
    }

    fn structure<L: Leaf>(_: &()) -> TreeDef {
        TreeDef::Node(Vec::new())
    }

    fn assemble<L: Leaf>(
        def: &TreeDef,
        path: &mut TreePath,
        _: &mut dyn Iterator<Item = L>,
    ) -> Result<(), HostError> {
        def.children(path, Some(0), "`()`").map(|_| ())
    }
}

macro_rules! tree_tuple {
    ($n:expr; $a:ident $ai:tt $(, $t:ident $i:tt)*) => {
        impl<$a: Tree $(, $t: Tree)*> Tree for ($a, $($t,)*) {
            type Form<L: Leaf> = ($a::Form<L>, $($t::Form<L>,)*);

            fn visit<'a, L: Leaf>(x: &'a Self::Form<L>, path: &mut TreePath, f: &mut dyn FnMut(&TreePath, &'a L)) {
                at(path, PathSegment::Index($ai), |p| $a::visit(&x.$ai, p, f));
                $( at(path, PathSegment::Index($i), |p| $t::visit(&x.$i, p, f)); )*
            }

            fn try_map<L: Leaf, M: Leaf, E>(
                x: &Self::Form<L>,
                path: &mut TreePath,
                f: &mut dyn FnMut(&TreePath, &L) -> Result<M, E>,
            ) -> Result<Self::Form<M>, E> {
                Ok((
                    at(path, PathSegment::Index($ai), |p| $a::try_map(&x.$ai, p, f))?,
                    $( at(path, PathSegment::Index($i), |p| $t::try_map(&x.$i, p, f))?, )*
                ))
            }

            fn structure<L: Leaf>(x: &Self::Form<L>) -> TreeDef {
                TreeDef::Node(vec![$a::structure::<L>(&x.$ai) $(, $t::structure::<L>(&x.$i))*])
            }

            fn write_key<L: Leaf>(x: &Self::Form<L>, out: &mut Vec<u8>) -> usize {
                TreeDef::key_node(out, $n);
                $a::write_key::<L>(&x.$ai, out) $(+ $t::write_key::<L>(&x.$i, out))*
            }

            fn assemble<L: Leaf>(
                def: &TreeDef,
                path: &mut TreePath,
                leaves: &mut dyn Iterator<Item = L>,
            ) -> Result<Self::Form<L>, HostError> {
                let c = def.children(path, Some($n), concat!("a tuple of ", $n))?;
                Ok((
                    at(path, PathSegment::Index($ai), |p| $a::assemble(&c[$ai], p, leaves))?,
                    $( at(path, PathSegment::Index($i), |p| $t::assemble(&c[$i], p, leaves))?, )*
                ))
            }
        }

        impl<$a: TreeValue $(, $t: TreeValue<Leaf = $a::Leaf>)*> TreeValue for ($a, $($t,)*) {
            type Leaf = $a::Leaf;
            type Tree = ($a::Tree, $($t::Tree,)*);
        }
    };
}

tree_tuple!(1; T0 0);
tree_tuple!(2; T0 0, T1 1);
tree_tuple!(3; T0 0, T1 1, T2 2);
tree_tuple!(4; T0 0, T1 1, T2 2, T3 3);
tree_tuple!(5; T0 0, T1 1, T2 2, T3 3, T4 4);
tree_tuple!(6; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5);
tree_tuple!(7; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5, T6 6);
tree_tuple!(8; T0 0, T1 1, T2 2, T3 3, T4 4, T5 5, T6 6, T7 7);
