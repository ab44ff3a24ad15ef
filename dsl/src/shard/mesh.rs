//! A logical mesh of devices with named axes.

use crate::error::{DeviceError, Result};
use crate::ir::MeshAxes;
use crate::runtime::Device;

/// The first `product(sizes)` devices of a [`Device`] (client) arranged as
/// an array with named axes, as JAX's `Mesh`: partition `p` of a sharded
/// program runs on addressable device `p`, and `p` is the row-major index of
/// the device's mesh coordinates.
///
/// ```
/// use tessel_dsl::prelude::*;
/// use tessel_dsl::shard::Mesh;
/// let dev = Device::cpu_with_devices(4)?;
/// let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)])?;
/// assert_eq!(mesh.size(), 4);
/// assert_eq!(mesh.coords(3), vec![1, 1]);
/// assert!(Mesh::new(&dev, &[("data", 8)]).is_err()); // only 4 devices
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[derive(Clone)]
pub struct Mesh {
    device: Device,
    axes: MeshAxes,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mesh{:?}", self.axes.axes())
    }
}

impl Mesh {
    /// A mesh of `axes` (name, size) over `device`'s first devices.
    ///
    /// Errors ([`DeviceError::Sharding`]): no axes, an axis of size 0, a
    /// repeated or empty name, or more devices than `device` has.
    pub fn new(device: &Device, axes: &[(&str, usize)]) -> Result<Mesh> {
        let fail = |m: String| Err(DeviceError::Sharding(m).into());
        if axes.is_empty() {
            return fail("a mesh needs at least one axis".into());
        }
        for (i, (name, size)) in axes.iter().enumerate() {
            if name.is_empty() {
                return fail(format!("mesh axis {i} has an empty name"));
            }
            if *size == 0 {
                return fail(format!("mesh axis `{name}` has size 0"));
            }
            if axes[..i].iter().any(|(n, _)| n == name) {
                return fail(format!("mesh axis `{name}` appears twice"));
            }
        }
        let named = MeshAxes::new(axes.iter().map(|(n, s)| ((*n).to_string(), *s)).collect());
        // Saturating: a product that overflows is more devices than any client has.
        let size = axes.iter().fold(1usize, |p, (_, s)| p.saturating_mul(*s));
        if size > device.device_count() {
            return fail(format!(
                "a mesh of {size} devices ({}) needs {size} devices, the {} client has {} \
                 (Device::cpu_with_devices(n) makes a CPU client with n devices)",
                named.describe(),
                device.platform_name(),
                device.device_count()
            ));
        }
        Ok(Mesh {
            device: device.clone(),
            axes: named,
        })
    }

    /// The client the mesh's devices belong to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The axes, (name, size), major first.
    pub fn axes(&self) -> &[(String, usize)] {
        self.axes.axes()
    }

    /// The axes as a per-device (`shard_map`) trace sees them.
    pub(crate) fn mesh_axes(&self) -> &MeshAxes {
        &self.axes
    }

    /// The number of devices (partitions).
    pub fn size(&self) -> usize {
        self.axes.size()
    }

    /// The position of the axis called `name`.
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.axes.position(name)
    }

    /// The mesh coordinates of partition `p` (row-major).
    pub fn coords(&self, p: usize) -> Vec<usize> {
        self.axes.coords(p)
    }

    /// The partition at mesh coordinates `coords`.
    pub fn partition(&self, coords: &[usize]) -> usize {
        self.axes.device(coords)
    }

    /// `data=2, model=2`.
    pub fn describe(&self) -> String {
        self.axes.describe()
    }
}
