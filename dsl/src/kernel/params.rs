//! How kernel parameters and results cross the boundary between the caller
//! and the trace, decided by type: a [`Tensor`] parameter is traced (the
//! caller passes a host tensor, a spec or a device buffer), any
//! [`StaticArg`] is static (the caller passes the value; it is part of the
//! compile-cache key).

use super::static_key::{StaticArg, StaticKey};
use super::trees::{bind_tree, collect_tree, tree_primals, tree_substitute, ArgLeaf};
use crate::error::{DeviceError, Result};
use crate::host::HostTensor;
use crate::ir::tree::{assemble_counted, Leaf, Tree, TreeDef, TreePath};
use crate::runtime::DeviceBuffer;
use crate::shape::TensorSpec;
use crate::shard::ShardedBuffer;
use crate::trace::tensor::Tensor;

/// The names of a kernel's tensor parameters, in order, kept in one
/// string (a tree of a hundred leaves costs two allocations, not a hundred).
///
/// ```
/// use tessel_dsl::kernel::ParamNames;
/// let names: ParamNames = ["x", "state.w"].into_iter().collect();
/// assert_eq!(names.len(), 2);
/// assert_eq!(names.get(1), Some("state.w"));
/// assert_eq!(names.iter().collect::<Vec<_>>(), ["x", "state.w"]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamNames {
    text: String,
    ends: Vec<usize>,
}

impl ParamNames {
    /// Adds the next name.
    pub fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th name.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<S: AsRef<str>> FromIterator<S> for ParamNames {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut names = ParamNames::default();
        for n in iter {
            names.push(n.as_ref());
        }
        names
    }
}

/// What a generated companion function collects from its arguments before tracing.
#[derive(Default)]
pub struct ArgCollector<'a> {
    /// Names of the tensor parameters, in order (a tree argument's leaves
    /// by their paths, `state.layers.0.wq`).
    pub names: ParamNames,
    /// Host tensors given for them (`run`).
    pub hosts: Vec<&'a HostTensor>,
    /// Specs given for them (`lower`, `compile`).
    pub specs: Vec<TensorSpec>,
    /// Device buffers given for them (`call`).
    pub buffers: Vec<&'a DeviceBuffer>,
    /// Sharded buffers given for them (`call_sharded`).
    pub sharded: Vec<&'a ShardedBuffer>,
    /// The static arguments (with their parameter names), by value, for the cache key.
    pub statics: StaticKey,
    /// Whether names are left out (a call's first try, which needs only
    /// the cache key: the names are used when the program is traced).
    pub unnamed: bool,
}

impl ArgCollector<'_> {
    /// A collector that leaves the parameters' names out: what a call
    /// collects to look its program up in the cache (on a miss it collects
    /// again, with the names, to trace).
    pub fn unnamed() -> Self {
        ArgCollector {
            unnamed: true,
            ..ArgCollector::default()
        }
    }

    /// Adds the next parameter's name (nothing when [`unnamed`](Self::unnamed)).
    #[inline]
    pub fn name(&mut self, name: &str) {
        if !self.unnamed {
            self.names.push(name);
        }
    }

    /// Makes room for the names and specs of `n` more tensor parameters.
    pub fn reserve(&mut self, n: usize) {
        if !self.unnamed {
            self.names.ends.reserve(n);
            self.names.text.reserve(16 * n);
        }
        self.specs.reserve(n);
    }
}

/// A kernel parameter type. Generated code uses the associated types to
/// type the companion API's arguments, so a wrong call is a Rust type error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a kernel parameter",
    label = "neither a `Tensor`, a tree of them, nor a static argument",
    note = "kernel parameters are `Tensor` or `Vec<Tensor>` (traced), a `#[derive(Tree)]` struct of tensors, \
            or static values implementing `tessel::StaticArg` (bool, integers, floats, &'static str, String, \
            DType, Precision)"
)]
pub trait KernelParam: Sized {
    /// What `run` takes: `&HostTensor` for tensors, the value for statics.
    type Host<'a>;
    /// What `lower`/`compile` take: `&TensorSpec` for tensors, the value for statics.
    type Spec<'a>;
    /// What `call` takes: `&DeviceBuffer` for tensors, the value for statics.
    type Buffer<'a>;
    /// What `call_sharded` takes: `&ShardedBuffer` for tensors, the value for statics.
    type Sharded<'a>;
    /// Records a `run` argument.
    fn collect_host<'a>(arg: &Self::Host<'a>, name: &'static str, c: &mut ArgCollector<'a>);
    /// Records a `lower`/`compile` argument.
    fn collect_spec<'a>(arg: &Self::Spec<'a>, name: &'static str, c: &mut ArgCollector<'a>);
    /// Records a `call` argument.
    fn collect_buffer<'a>(arg: &Self::Buffer<'a>, name: &'static str, c: &mut ArgCollector<'a>);
    /// Records a `call_sharded` argument.
    fn collect_sharded<'a>(arg: &Self::Sharded<'a>, name: &'static str, c: &mut ArgCollector<'a>);
    /// The in-trace value of a `run` argument.
    fn bind_host(arg: &Self::Host<'_>, next: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// The in-trace value of a `lower`/`compile` argument.
    fn bind_spec(arg: &Self::Spec<'_>, next: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// The in-trace value of a `call` argument.
    fn bind_buffer(arg: &Self::Buffer<'_>, next: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// The in-trace value of a `call_sharded` argument.
    fn bind_sharded(arg: &Self::Sharded<'_>, next: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// Appends the parameter's tensors (a tensor's one, a tree's leaves in
    /// path order) and returns `true`; a static argument appends nothing and
    /// returns `false`. What the companion's `value_and_grad` can
    /// differentiate with respect to.
    fn primals(&self, out: &mut Vec<Tensor>) -> bool {
        let _ = out;
        false
    }
    /// The parameter with its tensors replaced by the next ones of `next`
    /// when `replace` holds (the differentiated copy of a tensor or tree
    /// parameter).
    fn substitute(self, replace: bool, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        let _ = (replace, next);
        self
    }
    /// The values of a `run` argument to time when the kernel is autotuned
    /// (none for tensors; a static argument's
    /// [`tuning_candidates`](StaticArg::tuning_candidates)).
    fn tuning_candidates_host<'a>(
        arg: &Self::Host<'a>,
        inputs: &[TensorSpec],
    ) -> Vec<Self::Host<'a>> {
        let _ = (arg, inputs);
        Vec::new()
    }
    /// The values of a `call` argument to time when the kernel is autotuned.
    fn tuning_candidates_buffer<'a>(
        arg: &Self::Buffer<'a>,
        inputs: &[TensorSpec],
    ) -> Vec<Self::Buffer<'a>> {
        let _ = (arg, inputs);
        Vec::new()
    }
    /// How a tuned `run` argument is shown.
    fn tuning_label_host(arg: &Self::Host<'_>) -> String {
        let _ = arg;
        String::new()
    }
    /// How a tuned `call` argument is shown.
    fn tuning_label_buffer(arg: &Self::Buffer<'_>) -> String {
        let _ = arg;
        String::new()
    }
}

/// The single tensor a differentiated kernel returns; a trace error naming
/// the kernel when it returns more or fewer (used by the companion's
/// `value_and_grad`).
#[track_caller]
pub fn single_output<O: crate::trace::Outputs>(kernel: &str, out: O) -> Tensor {
    let ts = out.into_tensors();
    match ts.as_slice() {
        [t] => *t,
        _ => crate::trace::tensor::trace_error(
            "value_and_grad",
            &ts,
            format!(
                "`{kernel}` returns {} tensors; value_and_grad needs a kernel returning one scalar loss",
                ts.len()
            ),
        ),
    }
}

impl KernelParam for Tensor {
    type Host<'a> = &'a HostTensor;
    type Spec<'a> = &'a TensorSpec;
    type Buffer<'a> = &'a DeviceBuffer;
    type Sharded<'a> = &'a ShardedBuffer;
    fn collect_host<'a>(arg: &&'a HostTensor, name: &'static str, c: &mut ArgCollector<'a>) {
        ArgLeaf::collect(*arg, name, c);
    }
    fn collect_spec<'a>(arg: &&'a TensorSpec, name: &'static str, c: &mut ArgCollector<'a>) {
        ArgLeaf::collect(*arg, name, c);
    }
    fn collect_buffer<'a>(arg: &&'a DeviceBuffer, name: &'static str, c: &mut ArgCollector<'a>) {
        ArgLeaf::collect(*arg, name, c);
    }
    fn bind_host(_: &&HostTensor, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        next.next().unwrap_or(Tensor::INERT)
    }
    fn bind_spec(_: &&TensorSpec, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        next.next().unwrap_or(Tensor::INERT)
    }
    fn bind_buffer(_: &&DeviceBuffer, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        next.next().unwrap_or(Tensor::INERT)
    }
    fn collect_sharded<'a>(arg: &&'a ShardedBuffer, name: &'static str, c: &mut ArgCollector<'a>) {
        ArgLeaf::collect(*arg, name, c);
    }
    fn bind_sharded(_: &&ShardedBuffer, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        next.next().unwrap_or(Tensor::INERT)
    }
    fn primals(&self, out: &mut Vec<Tensor>) -> bool {
        out.push(*self);
        true
    }
    fn substitute(self, replace: bool, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        if replace {
            next.next().unwrap_or(self)
        } else {
            self
        }
    }
}

fn record<T: StaticArg>(arg: &T, name: &str, c: &mut ArgCollector<'_>) {
    c.statics.push(&name.to_string()).push(arg);
}

impl<T: StaticArg> KernelParam for T {
    type Host<'a> = T;
    type Spec<'a> = T;
    type Buffer<'a> = T;
    type Sharded<'a> = T;
    fn collect_host<'a>(arg: &T, name: &'static str, c: &mut ArgCollector<'a>) {
        record(arg, name, c);
    }
    fn collect_spec<'a>(arg: &T, name: &'static str, c: &mut ArgCollector<'a>) {
        record(arg, name, c);
    }
    fn collect_buffer<'a>(arg: &T, name: &'static str, c: &mut ArgCollector<'a>) {
        record(arg, name, c);
    }
    fn bind_host(arg: &T, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        arg.clone()
    }
    fn bind_spec(arg: &T, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        arg.clone()
    }
    fn bind_buffer(arg: &T, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        arg.clone()
    }
    fn collect_sharded<'a>(arg: &T, name: &'static str, c: &mut ArgCollector<'a>) {
        record(arg, name, c);
    }
    fn bind_sharded(arg: &T, _: &mut dyn Iterator<Item = Tensor>) -> Self {
        arg.clone()
    }
    fn tuning_candidates_host<'a>(
        arg: &Self::Host<'a>,
        inputs: &[TensorSpec],
    ) -> Vec<Self::Host<'a>> {
        arg.tuning_candidates(inputs)
    }
    fn tuning_candidates_buffer<'a>(
        arg: &Self::Buffer<'a>,
        inputs: &[TensorSpec],
    ) -> Vec<Self::Buffer<'a>> {
        arg.tuning_candidates(inputs)
    }
    fn tuning_label_host(arg: &T) -> String {
        arg.tuning_label()
    }
    fn tuning_label_buffer(arg: &T) -> String {
        arg.tuning_label()
    }
}

/// A kernel's return type: any tree of tensors (a [`Tensor`], a tuple,
/// array, `Vec` or `Option` of them, or a `#[derive(Tree)]` struct); `run`
/// and `call` give back the same structure with host tensors or device
/// buffers as leaves.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be returned from a kernel",
    label = "kernels return a `Tensor`, a tuple, array or `Vec` of them, or a `#[derive(Tree)]` struct"
)]
pub trait KernelOutput: crate::trace::Outputs {
    /// What `run` returns.
    type Host;
    /// What `call` returns.
    type Buffer;
    /// What `call_sharded` returns.
    type Sharded;
    /// Builds the host result from the executable's outputs and the
    /// structure its body returned.
    fn from_host(outs: Vec<HostTensor>, tree: Option<&TreeDef>) -> Result<Self::Host>;
    /// Builds the device result from the executable's outputs.
    fn from_buffers(outs: Vec<DeviceBuffer>, tree: Option<&TreeDef>) -> Result<Self::Buffer>;
    /// Builds the sharded result from the program's outputs.
    fn from_sharded(outs: Vec<ShardedBuffer>, tree: Option<&TreeDef>) -> Result<Self::Sharded>;
}

#[diagnostic::do_not_recommend]
impl<T: crate::trace::Outputs> KernelOutput for T {
    type Host = T::Form<HostTensor>;
    type Buffer = T::Form<DeviceBuffer>;
    type Sharded = T::Form<ShardedBuffer>;
    fn from_host(outs: Vec<HostTensor>, tree: Option<&TreeDef>) -> Result<Self::Host> {
        rebuild::<T, _>(outs, tree)
    }
    fn from_buffers(outs: Vec<DeviceBuffer>, tree: Option<&TreeDef>) -> Result<Self::Buffer> {
        rebuild::<T, _>(outs, tree)
    }
    fn from_sharded(outs: Vec<ShardedBuffer>, tree: Option<&TreeDef>) -> Result<Self::Sharded> {
        rebuild::<T, _>(outs, tree)
    }
}

/// `outs` in the structure `tree` (the kernel body's results).
fn rebuild<T: Tree, L: Leaf>(outs: Vec<L>, tree: Option<&TreeDef>) -> Result<T::Form<L>> {
    let Some(tree) = tree else {
        return Err(TreePath::default()
            .error("the program does not record its results' structure (it was not traced)")
            .into());
    };
    let expected = tree.num_leaves();
    if outs.len() != expected {
        return Err(DeviceError::OutputCount {
            expected,
            got: outs.len(),
        }
        .into());
    }
    Ok(assemble_counted::<T, L>(tree, outs)?)
}

/// A `Vec<Tensor>` parameter: any number of traced tensors, one program
/// parameter each (named `name.0`, `name.1`, ...); the length is part of
/// the compile key. `run` takes `&Vec<HostTensor>`, `call`
/// `&Vec<DeviceBuffer>`, `lower`/`compile` `&Vec<TensorSpec>`.
impl KernelParam for Vec<Tensor> {
    type Host<'a> = &'a Vec<HostTensor>;
    type Spec<'a> = &'a Vec<TensorSpec>;
    type Buffer<'a> = &'a Vec<DeviceBuffer>;
    type Sharded<'a> = &'a Vec<ShardedBuffer>;
    fn collect_host<'a>(arg: &&'a Vec<HostTensor>, name: &'static str, c: &mut ArgCollector<'a>) {
        collect_tree::<Self, HostTensor>(*arg, name, c);
    }
    fn collect_spec<'a>(arg: &&'a Vec<TensorSpec>, name: &'static str, c: &mut ArgCollector<'a>) {
        collect_tree::<Self, TensorSpec>(*arg, name, c);
    }
    fn collect_buffer<'a>(
        arg: &&'a Vec<DeviceBuffer>,
        name: &'static str,
        c: &mut ArgCollector<'a>,
    ) {
        collect_tree::<Self, DeviceBuffer>(*arg, name, c);
    }
    fn collect_sharded<'a>(
        arg: &&'a Vec<ShardedBuffer>,
        name: &'static str,
        c: &mut ArgCollector<'a>,
    ) {
        collect_tree::<Self, ShardedBuffer>(*arg, name, c);
    }
    fn bind_host(arg: &&Vec<HostTensor>, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind_tree::<Self, HostTensor>(*arg, next)
    }
    fn bind_spec(arg: &&Vec<TensorSpec>, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind_tree::<Self, TensorSpec>(*arg, next)
    }
    fn bind_buffer(arg: &&Vec<DeviceBuffer>, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind_tree::<Self, DeviceBuffer>(*arg, next)
    }
    fn bind_sharded(arg: &&Vec<ShardedBuffer>, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        bind_tree::<Self, ShardedBuffer>(*arg, next)
    }
    fn primals(&self, out: &mut Vec<Tensor>) -> bool {
        tree_primals(self, out)
    }
    fn substitute(self, replace: bool, next: &mut dyn Iterator<Item = Tensor>) -> Self {
        tree_substitute(self, replace, next)
    }
}
