//! Trees in checkpoints: a tree of host tensors saved under its leaves'
//! paths, and loaded back into the structure of a tree given as a model
//! (its specs, host tensors or buffers), every leaf's dtype and shape
//! checked, missing and unexpected keys listed in one error.

use std::collections::BTreeMap;
use std::path::Path;

use super::trees::ArgLeaf;
use crate::error::Result;
use crate::host::checkpoint::Checkpoint;
use crate::host::HostTensor;
use crate::ir::tree::{Tree, TreeValue};
use crate::shape::TensorSpec;

/// Saves the tree `x` to `path` as one safetensors file, each leaf under
/// its path (`layers.0.w`); returns how many tensors it wrote.
///
/// ```
/// use tessel_dsl::{tree, HostTensor};
/// let dir = std::env::temp_dir().join(format!("tessel-tree-ckpt-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("state.safetensors");
/// let state = (HostTensor::from_vec(vec![1.0f32, 2.0], [2])?, vec![HostTensor::from_vec(vec![3i32], [1])?]);
/// assert_eq!(tree::save(&path, &state)?, 2);
/// let back = tree::load(&path, &state)?;
/// assert_eq!(back.1[0].to_vec::<i32>()?, vec![3]);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn save<X: TreeValue<Leaf = HostTensor>>(path: impl AsRef<Path>, x: &X) -> Result<usize> {
    save_with_metadata(path, x, &BTreeMap::new())
}

/// [`save`], with `metadata` in the file's header.
pub fn save_with_metadata<X: TreeValue<Leaf = HostTensor>>(
    path: impl AsRef<Path>,
    x: &X,
    metadata: &BTreeMap<String, String>,
) -> Result<usize> {
    let leaves = x.leaves_with_paths();
    let count = leaves.len();
    crate::host::checkpoint::save_with_metadata(path, leaves, metadata)?;
    Ok(count)
}

/// Loads the tree of `like`'s structure from the checkpoint at `path`
/// (`like`: specs, host tensors or device buffers of the same tree): every
/// leaf's path must be in the file with `like`'s dtype and shape, and the
/// file must hold nothing else; one error lists every missing key,
/// unexpected key and type that differs. To load a part of a file, or
/// under other names, use [`Checkpoint::take_tree`] and
/// [`Checkpoint::rename_prefixes`].
pub fn load<X: TreeValue>(
    path: impl AsRef<Path>,
    like: &X,
) -> Result<<X::Tree as Tree>::Form<HostTensor>>
where
    X::Leaf: ArgLeaf,
{
    Checkpoint::load(path)?.take_tree_all(like)
}

impl Checkpoint {
    /// Takes the leaves of a tree of `like`'s structure (its paths, dtypes
    /// and shapes: specs, host tensors or buffers of the same tree), and
    /// leaves the other tensors in the checkpoint. Every missing path and
    /// every type that differs (`layers.3.w: expected f32[256,256], got
    /// f32[256,128]`) is listed in one error; on error nothing is taken.
    pub fn take_tree<X: TreeValue>(
        &mut self,
        like: &X,
    ) -> Result<<X::Tree as Tree>::Form<HostTensor>>
    where
        X::Leaf: ArgLeaf,
    {
        take_into(like, |want| self.take(want))
    }

    /// [`take_tree`](Self::take_tree), and the checkpoint must hold nothing
    /// else: its other names are listed as unexpected keys.
    pub fn take_tree_all<X: TreeValue>(
        &mut self,
        like: &X,
    ) -> Result<<X::Tree as Tree>::Form<HostTensor>>
    where
        X::Leaf: ArgLeaf,
    {
        take_into(like, |want| self.take_all(want))
    }
}

/// The tensors `take` gives for `like`'s leaves (paths and types), in
/// `like`'s structure.
fn take_into<X: TreeValue>(
    like: &X,
    take: impl FnOnce(&[(String, TensorSpec)]) -> Result<Vec<HostTensor>>,
) -> Result<<X::Tree as Tree>::Form<HostTensor>>
where
    X::Leaf: ArgLeaf,
{
    let taken = take(&wanted(like))?;
    rebuild(like, taken)
}

/// The paths and types of `like`'s leaves.
fn wanted<X: TreeValue>(like: &X) -> Vec<(String, TensorSpec)>
where
    X::Leaf: ArgLeaf,
{
    like.leaves_with_paths()
        .into_iter()
        .map(|(p, l)| (p, l.spec().clone()))
        .collect()
}

/// `taken` (one tensor per leaf of `like`, in order) in `like`'s structure.
fn rebuild<X: TreeValue>(
    like: &X,
    taken: Vec<HostTensor>,
) -> Result<<X::Tree as Tree>::Form<HostTensor>> {
    let mut it = taken.into_iter();
    like.try_map_leaves(|path, _| {
        it.next().ok_or_else(|| {
            path.error("the checkpoint gave fewer tensors than asked")
                .into()
        })
    })
}
