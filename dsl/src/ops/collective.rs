//! Collectives over named mesh axes, for per-device (`shard_map`) kernels:
//! `psum`/`pmax`/`pmin`, `all_gather`, `psum_scatter`, `all_to_all`,
//! `ppermute` and [`axis_index`], as in JAX's `shard_map`.
//!
//! A collective names mesh axes; the devices that agree on every other axis
//! form one group ([`MeshAxes::groups`]), so on a `data=2, model=2` mesh
//! `x.psum(&["model"])` sums over the two devices of each `data` row. They
//! are ordinary ops: usable inside traced loops and branches. Called outside
//! a `shard_map` trace, with an axis the mesh lacks, or on a shape the group
//! does not divide, they are kernel errors at the caller's line.
//!
//! ```
//! use tessel_dsl::prelude::*;
//! use tessel_dsl::shard::{Mesh, PartitionSpec, Shardings};
//! use tessel_dsl::kernel::Kernel;
//! let dev = Device::cpu_with_devices(2)?;
//! let mesh = Mesh::new(&dev, &[("x", 2)])?;
//! // Each device holds 2 of the 4 elements; the sum of all of them comes back on each.
//! let k = Kernel::new("total", |a: &[Tensor]| a[0].sum(&[0]).psum(&["x"]));
//! let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4])?;
//! let shardings = Shardings::new([PartitionSpec::new([Some("x")])], [PartitionSpec::replicated()]);
//! let out = k.run_shard_map(&mesh, &shardings, &[&x])?;
//! assert_eq!(out[0].to_vec::<f32>()?, vec![10.0]);
//! # Ok::<(), tessel_dsl::Error>(())
//! ```

use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{BinaryOp, MeshAxes, Op, ReduceKind};
use crate::ops::constant::full_at;
use crate::ops::elementwise::binary_at;
use crate::shape::TensorSpec;
use crate::trace::tensor::{normalize_axis, Tensor};
use crate::trace::{build, current_mesh};

/// The mesh of the `shard_map` trace in progress, or the message for an op
/// called outside one.
fn mesh_for(op: &str) -> Result<MeshAxes, String> {
    current_mesh().ok_or_else(|| {
        format!(
            "{op} is a collective: it needs a device mesh, so call it in a kernel run with \
             run_shard_map (a per-device kernel)"
        )
    })
}

/// The device groups of a collective over `axes`, with their size.
fn groups_for(op: &str, axes: &[String]) -> Result<(Vec<Vec<usize>>, usize), String> {
    let mesh = mesh_for(op)?;
    if axes.is_empty() {
        return Err(format!("{op} needs at least one mesh axis"));
    }
    let names: Vec<&str> = axes.iter().map(String::as_str).collect();
    let positions = mesh.positions(&names)?;
    let groups = mesh.groups(&positions);
    let size = groups.first().map_or(1, Vec::len);
    Ok((groups, size))
}

fn owned(axes: &[&str]) -> Vec<String> {
    axes.iter().map(|a| a.to_string()).collect()
}

fn all_reduce_at(x: Tensor, kind: ReduceKind, axes: &[&str], loc: Location) -> Tensor {
    let name = match kind {
        ReduceKind::Max => "pmax",
        ReduceKind::Min => "pmin",
        _ => "psum",
    };
    // The mesh is read before `build`, which holds the trace state.
    let pre = groups_for(name, &owned(axes));
    build(name, &[x], loc, 1, move |s| {
        let (groups, _) = pre?;
        if s[0].dtype.is_pred() {
            return Err(format!("{name} is not defined for pred elements"));
        }
        Ok((Op::AllReduce { kind, groups }, vec![s[0].clone()]))
    })[0]
}

/// Checks that `spec`'s extent along `dim` divides among the `n` devices
/// of `axes`, or gives the message.
fn check_split(spec: &TensorSpec, dim: usize, n: usize, axes: &[String]) -> Result<(), String> {
    if !spec.shape[dim].is_multiple_of(n) {
        return Err(format!(
            "axis {dim} of {spec} does not split into {n} equal parts (the devices of {})",
            axes.join(", ")
        ));
    }
    Ok(())
}

/// The result shape of the shape-changing collective `op` (`all_gather`,
/// `psum_scatter`, `all_to_all`) on an operand of `shape` (already checked
/// to split evenly); other ops keep the shape.
fn result_shape(op: &Op, mut shape: Vec<usize>) -> Vec<usize> {
    let size = |groups: &[Vec<usize>]| groups.first().map_or(1, Vec::len).max(1);
    match op {
        Op::AllGather { dim, groups } => shape[*dim] *= size(groups),
        Op::ReduceScatter { dim, groups, .. } => shape[*dim] /= size(groups),
        Op::AllToAll {
            split_dim,
            concat_dim,
            groups,
        } => {
            shape[*split_dim] /= size(groups);
            shape[*concat_dim] *= size(groups);
        }
        _ => {}
    }
    shape
}

/// `axis` of a rank-`rank` tensor as an index, or the message.
fn axis_of(op: &str, axis: isize, spec: &TensorSpec) -> Result<usize, String> {
    normalize_axis(axis, spec.rank())
        .ok_or_else(|| format!("{op}: axis {axis} is out of range for {spec}"))
}

impl Tensor {
    /// The sum of this tensor over the devices of the mesh `axes` (JAX's
    /// `psum`); every device of a group gets the same result.
    #[track_caller]
    pub fn psum(self, axes: &[&str]) -> Tensor {
        all_reduce_at(self, ReduceKind::Sum, axes, Location::caller())
    }

    /// The elementwise maximum over the devices of the mesh `axes`.
    #[track_caller]
    pub fn pmax(self, axes: &[&str]) -> Tensor {
        all_reduce_at(self, ReduceKind::Max, axes, Location::caller())
    }

    /// The elementwise minimum over the devices of the mesh `axes`.
    #[track_caller]
    pub fn pmin(self, axes: &[&str]) -> Tensor {
        all_reduce_at(self, ReduceKind::Min, axes, Location::caller())
    }

    /// The group's tensors joined along `axis`, in the order of the devices'
    /// index over the mesh `axes` (JAX's `all_gather(.., tiled=True)`).
    #[track_caller]
    pub fn all_gather(self, axes: &[&str], axis: isize) -> Tensor {
        let pre = groups_for("all_gather", &owned(axes));
        build("all_gather", &[self], Location::caller(), 1, move |s| {
            let (groups, _) = pre?;
            let dim = axis_of("all_gather", axis, &s[0])?;
            let op = Op::AllGather { dim, groups };
            let shape = result_shape(&op, s[0].shape.clone());
            Ok((op, vec![TensorSpec::new(shape, s[0].dtype)]))
        })[0]
    }

    /// The sum over the group, split along `axis`: the device with index
    /// `i` over the mesh `axes` gets the `i`-th slice (JAX's
    /// `psum_scatter(.., tiled=True)`). `axis` must divide by the group size.
    #[track_caller]
    pub fn psum_scatter(self, axes: &[&str], axis: isize) -> Tensor {
        let axes = owned(axes);
        let pre = groups_for("psum_scatter", &axes);
        build("psum_scatter", &[self], Location::caller(), 1, move |s| {
            let (groups, n) = pre?;
            let dim = axis_of("psum_scatter", axis, &s[0])?;
            check_split(&s[0], dim, n, &axes)?;
            let op = Op::ReduceScatter {
                kind: ReduceKind::Sum,
                dim,
                groups,
            };
            let shape = result_shape(&op, s[0].shape.clone());
            Ok((op, vec![TensorSpec::new(shape, s[0].dtype)]))
        })[0]
    }

    /// Splits `split_axis` into one chunk per device of the group, sends
    /// chunk `j` to the device with index `j` over the mesh `axes`, and joins
    /// the chunks it receives along `concat_axis`, in device order (JAX's
    /// `all_to_all(.., tiled=True)`).
    #[track_caller]
    pub fn all_to_all(self, axes: &[&str], split_axis: isize, concat_axis: isize) -> Tensor {
        let axes = owned(axes);
        let pre = groups_for("all_to_all", &axes);
        build("all_to_all", &[self], Location::caller(), 1, move |s| {
            let (groups, n) = pre?;
            let split_dim = axis_of("all_to_all", split_axis, &s[0])?;
            let concat_dim = axis_of("all_to_all", concat_axis, &s[0])?;
            check_split(&s[0], split_dim, n, &axes)?;
            let op = Op::AllToAll {
                split_dim,
                concat_dim,
                groups,
            };
            let shape = result_shape(&op, s[0].shape.clone());
            Ok((op, vec![TensorSpec::new(shape, s[0].dtype)]))
        })[0]
    }

    /// Sends this tensor along the mesh axis `axis`: each `(from, to)` pair
    /// of indices along it sends the tensor of device `from` to device `to`,
    /// in every group (JAX's `ppermute`). A device no pair sends to gets
    /// zeros. Each index may send once and receive once.
    #[track_caller]
    pub fn ppermute(self, axis: &str, perm: &[(usize, usize)]) -> Tensor {
        let axis = axis.to_string();
        let perm = perm.to_vec();
        let mesh = mesh_for("ppermute");
        build("ppermute", &[self], Location::caller(), 1, move |s| {
            let mesh = mesh?;
            let position = mesh.positions(&[&axis])?[0];
            let size = mesh.axes()[position].1;
            let mut sends = vec![false; size];
            let mut receives = vec![false; size];
            for &(from, to) in &perm {
                if from >= size || to >= size {
                    return Err(format!(
                        "pair ({from}, {to}) is outside axis `{axis}` of size {size}"
                    ));
                }
                if std::mem::replace(&mut sends[from], true) {
                    return Err(format!("index {from} sends twice"));
                }
                if std::mem::replace(&mut receives[to], true) {
                    return Err(format!("index {to} receives twice"));
                }
            }
            if perm.is_empty() {
                return Err("needs at least one (from, to) pair".into());
            }
            let pairs = mesh.permutation_pairs(position, &perm);
            Ok((Op::CollectivePermute { pairs }, vec![s[0].clone()]))
        })[0]
    }
}

/// This device's index (s32 scalar) along the mesh axis `axis`, inside a
/// per-device (`shard_map`) kernel (JAX's `lax.axis_index`).
#[track_caller]
pub fn axis_index(axis: &str) -> Tensor {
    let loc = Location::caller();
    let axis_name = axis.to_string();
    let place = move || -> Result<(usize, usize), String> {
        let mesh = mesh_for("axis_index")?;
        let p = mesh.positions(&[&axis_name])?[0];
        Ok((mesh.stride(p), mesh.axes()[p].1))
    };
    let (stride, size) = match place() {
        Ok(v) => v,
        Err(m) => {
            return build("axis_index", &[], loc, 1, move |_| Err(m))[0];
        }
    };
    let id = build("replica_id", &[], loc.clone(), 1, |_| {
        Ok((Op::ReplicaId, vec![TensorSpec::scalar(DType::U32)]))
    })[0];
    let id = id.cast(DType::S32);
    let stride_t = full_at(Vec::new(), stride as f64, DType::S32, loc.clone());
    let size_t = full_at(Vec::new(), size as f64, DType::S32, loc.clone());
    let major = binary_at(id, stride_t, BinaryOp::Div, loc.clone());
    binary_at(major, size_t, BinaryOp::Rem, loc)
}

/// The transpose of the linear collective `op` (a node's op) applied to
/// the cotangent `g` of its result, with the caller's location: the
/// cotangent of its operand under the convention that the loss is the sum
/// of the devices' losses (JAX's rules for varying values):
///
/// - `all_gather` ↔ `psum_scatter` over the same groups and axis;
/// - `all_to_all` is `all_to_all` with the split and concat axes swapped;
/// - `ppermute` sends back along the inverted pairs.
///
/// `psum`, `pmax` and `pmin` have none here (an `Err` with the reason):
/// whether a `psum`'s cotangent must be summed again or passed through
/// depends on whether the loss is replicated or per device, which values
/// do not record.
pub(crate) fn transpose_collective(op: &Op, g: Tensor, loc: Location) -> Result<Tensor, String> {
    let transposed = match op {
        Op::AllGather { dim, groups } => Op::ReduceScatter {
            kind: ReduceKind::Sum,
            dim: *dim,
            groups: groups.clone(),
        },
        Op::ReduceScatter {
            kind: ReduceKind::Sum,
            dim,
            groups,
        } => Op::AllGather {
            dim: *dim,
            groups: groups.clone(),
        },
        Op::AllToAll {
            split_dim,
            concat_dim,
            groups,
        } => Op::AllToAll {
            split_dim: *concat_dim,
            concat_dim: *split_dim,
            groups: groups.clone(),
        },
        Op::CollectivePermute { pairs } => Op::CollectivePermute {
            pairs: pairs.iter().map(|&(from, to)| (to, from)).collect(),
        },
        Op::AllReduce { .. } | Op::ReduceScatter { .. } => {
            return Err(
                "psum, pmax, pmin and a non-sum psum_scatter have no gradient rule: whether the cotangent of \
                 a psum is summed over the devices again or passed through depends on whether the loss is \
                 per device or replicated. Differentiate the per-device computation and psum its gradients \
                 outside the gradient"
                    .into(),
            )
        }
        other => return Err(format!("internal: {other:?} is not a collective")),
    };
    let name = match &transposed {
        Op::AllGather { .. } => "all_gather",
        Op::ReduceScatter { .. } => "psum_scatter",
        Op::AllToAll { .. } => "all_to_all",
        _ => "ppermute",
    };
    Ok(build(name, &[g], loc, 1, move |s| {
        let shape = result_shape(&transposed, s[0].shape.clone());
        Ok((transposed, vec![TensorSpec::new(shape, s[0].dtype)]))
    })[0])
}
