//! Trees at the kernel boundary: the device-side leaves
//! ([`DeviceBuffer`], [`ShardedBuffer`]), how a tree argument is collected
//! into a kernel's flat parameter list (one parameter per leaf, named by its
//! path, its structure in the compile key) and bound inside the trace, a
//! tree's static fields, and moving whole trees between host and device.

use std::any::Any;

use super::params::ArgCollector;
use super::static_key::{StaticArg, StaticKey};
use crate::error::{HostError, Result};
use crate::host::HostTensor;
use crate::ir::tree::{Leaf, StaticValue, Tree, TreeDef, TreePath, TreeValue};
use crate::ops::carry::Carry;
use crate::runtime::{Device, DeviceBuffer};
use crate::shape::TensorSpec;
use crate::shard::ShardedBuffer;
use crate::trace::tensor::Tensor;

impl Leaf for ShardedBuffer {}

impl TreeValue for DeviceBuffer {
    type Leaf = DeviceBuffer;
    type Tree = Tensor;
}

impl TreeValue for ShardedBuffer {
    type Leaf = ShardedBuffer;
    type Tree = Tensor;
}

/// A leaf a kernel call takes: what it adds to the call's arguments.
pub trait ArgLeaf: Leaf {
    /// Records the leaf as the parameter `name`.
    fn collect<'a>(&'a self, name: &str, c: &mut ArgCollector<'a>);
    /// Its type.
    fn spec(&self) -> &TensorSpec;
    /// Makes room in `c` for `n` more leaves of this type.
    fn reserve(c: &mut ArgCollector<'_>, n: usize) {
        c.reserve(n);
    }
}

impl ArgLeaf for HostTensor {
    fn collect<'a>(&'a self, name: &str, c: &mut ArgCollector<'a>) {
        c.name(name);
        c.hosts.push(self);
        c.specs.push(self.spec().clone());
    }
    fn spec(&self) -> &TensorSpec {
        HostTensor::spec(self)
    }
    fn reserve(c: &mut ArgCollector<'_>, n: usize) {
        c.reserve(n);
        c.hosts.reserve(n);
    }
}

impl ArgLeaf for TensorSpec {
    fn collect<'a>(&'a self, name: &str, c: &mut ArgCollector<'a>) {
        c.name(name);
        c.specs.push(self.clone());
    }
    fn spec(&self) -> &TensorSpec {
        self
    }
}

impl ArgLeaf for DeviceBuffer {
    fn collect<'a>(&'a self, name: &str, c: &mut ArgCollector<'a>) {
        c.name(name);
        c.buffers.push(self);
        c.specs.push(DeviceBuffer::spec(self).clone());
    }
    fn spec(&self) -> &TensorSpec {
        DeviceBuffer::spec(self)
    }
    fn reserve(c: &mut ArgCollector<'_>, n: usize) {
        c.reserve(n);
        c.buffers.reserve(n);
    }
}

impl ArgLeaf for ShardedBuffer {
    fn collect<'a>(&'a self, name: &str, c: &mut ArgCollector<'a>) {
        c.name(name);
        c.sharded.push(self);
        c.specs.push(ShardedBuffer::spec(self).clone());
    }
    fn spec(&self) -> &TensorSpec {
        ShardedBuffer::spec(self)
    }
    fn reserve(c: &mut ArgCollector<'_>, n: usize) {
        c.reserve(n);
        c.sharded.reserve(n);
    }
}

/// Records the tree argument `x` of the parameter `name`: one parameter per
/// leaf, named by its path (`state.layers.0.wq`), and the tree's structure
/// (lengths, variants, static fields) in the static key.
pub fn collect_tree<'a, T: Tree, L: ArgLeaf>(
    x: &'a T::Form<L>,
    name: &'static str,
    c: &mut ArgCollector<'a>,
) {
    c.statics.push(&name);
    collect_leaves::<T, L>(x, Some(name), c);
}

/// Records the leaves of `x`, named by their paths under the parameter
/// `root` (a leaf at an unnamed root is `arg`; no names, and no paths built,
/// when the collector is [`unnamed`](ArgCollector::unnamed)), then its
/// structure in the static key.
pub(crate) fn collect_leaves<'a, T: Tree, L: ArgLeaf>(
    x: &'a T::Form<L>,
    root: Option<&'static str>,
    c: &mut ArgCollector<'a>,
) {
    let mut root = match (c.unnamed, root) {
        (true, _) => TreePath::silent(),
        (false, Some(name)) => TreePath::field(name),
        (false, None) => TreePath::default(),
    };
    let mut key = Vec::with_capacity(64);
    let leaves = T::write_key::<L>(x, &mut key);
    L::reserve(c, leaves);
    // A silent path shows as "": `collect` then records no name anyway.
    T::visit::<L>(x, &mut root, &mut |p, l| match p.as_str() {
        "" => l.collect("arg", c),
        name => l.collect(name, c),
    });
    c.statics.push_bytes(&key);
}

/// The traced value of the tree argument `x`: its structure with the next
/// traced parameters as leaves.
pub fn bind_tree<T: Carry, L: Leaf>(x: &T::Form<L>, next: &mut dyn Iterator<Item = Tensor>) -> T {
    let bound = T::try_map::<L, Tensor, std::convert::Infallible>(
        x,
        &mut TreePath::default(),
        &mut |_, _| Ok(next.next().unwrap_or(Tensor::INERT)),
    );
    match bound {
        Ok(t) => t,
        Err(never) => match never {},
    }
}

/// A tree parameter's [`KernelParam::primals`](super::KernelParam::primals):
/// its leaves, in path order.
pub fn tree_primals<T: Carry>(x: &T, out: &mut Vec<Tensor>) -> bool {
    x.flatten(out);
    true
}

/// A tree parameter's [`KernelParam::substitute`](super::KernelParam::substitute):
/// every leaf replaced by the next of `next` when `replace` holds.
pub fn tree_substitute<T: Carry>(x: T, replace: bool, next: &mut dyn Iterator<Item = Tensor>) -> T {
    match replace {
        true => x.rebuild(next),
        false => x,
    }
}

/// The structure of a static field of a tree (what `#[derive(Tree)]`
/// writes for a field whose type does not mention the leaf type): its value
/// and its compile-cache key.
pub fn static_field<S: StaticArg + Any + Send + Sync>(value: &S) -> TreeDef {
    let mut key = StaticKey::default();
    key.push(value);
    TreeDef::Static(StaticValue::new(
        value.clone(),
        key.bytes().to_vec(),
        format!("{value:?}"),
    ))
}

/// Writes the key of a static field of a tree, the bytes its
/// [`static_field`] structure writes (what `#[derive(Tree)]`'s
/// [`Tree::write_key`] writes for it).
pub fn static_field_key<S: StaticArg>(value: &S, out: &mut Vec<u8>) {
    let mut key = StaticKey::default();
    key.push(value);
    TreeDef::key_static(out, key.bytes());
}

/// The value of a static field from a tree's structure, or an error at `path`.
pub fn static_from_def<S: Any + Clone>(
    def: &TreeDef,
    path: &TreePath,
) -> std::result::Result<S, HostError> {
    match def {
        TreeDef::Static(v) => v.get::<S>().cloned().ok_or_else(|| {
            path.error(format!(
                "the static value {} is not a `{}`",
                v.shown(),
                std::any::type_name::<S>()
            ))
        }),
        other => Err(path.error(format!(
            "expected a static value, found {}",
            other.describe()
        ))),
    }
}

/// The tree `x` (host tensors) copied to `device`, leaf by leaf.
///
/// ```
/// use tessel_dsl::{tree, runtime::Device, HostTensor, TensorSpec, F32};
/// let dev = Device::cpu()?;
/// let host = (
///     HostTensor::zeros(TensorSpec::new([2], F32)),
///     vec![HostTensor::zeros(TensorSpec::new([3], F32))],
/// );
/// let on_device = tree::to_device(&dev, &host)?;
/// assert_eq!(on_device.1[0].spec().to_string(), "f32[3]");
/// let back = tree::to_host(&on_device)?;
/// assert_eq!(back.0.to_vec::<f32>()?, vec![0.0, 0.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn to_device<X: TreeValue<Leaf = HostTensor>>(
    device: &Device,
    x: &X,
) -> Result<<X::Tree as Tree>::Form<DeviceBuffer>> {
    x.try_map_leaves(|_, h| device.to_device(h))
}

/// The tree `x` (device buffers) copied to the host, leaf by leaf.
pub fn to_host<X: TreeValue<Leaf = DeviceBuffer>>(
    x: &X,
) -> Result<<X::Tree as Tree>::Form<HostTensor>> {
    x.try_map_leaves(|_, b| b.to_host())
}

/// The specs of the tree `x` (host tensors, device buffers, sharded buffers
/// or specs): what `compile` and `lower` take.
pub fn specs<X: TreeValue>(x: &X) -> <X::Tree as Tree>::Form<TensorSpec>
where
    X::Leaf: ArgLeaf,
{
    x.map_leaves(|_, l| l.spec().clone())
}
