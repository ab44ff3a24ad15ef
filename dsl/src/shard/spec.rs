//! Partition specs: which mesh axis splits which tensor axis, and what that
//! means for XLA (`mhlo.sharding`) and for the host (each partition's block).

use super::mesh::Mesh;

/// How a tensor is laid out on a [`Mesh`], as JAX's `PartitionSpec`: entry
/// `i` names the mesh axis that splits tensor axis `i` (`None`: that axis is
/// whole on every device). Tensor axes past the end are not split; mesh axes
/// no entry names replicate the tensor.
///
/// ```
/// use tessel_dsl::shard::PartitionSpec;
/// let rows = PartitionSpec::new([Some("data"), None]); // rows split over `data`
/// assert_eq!(rows.to_string(), "(data, _)");
/// assert_eq!(PartitionSpec::replicated().to_string(), "()");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PartitionSpec {
    axes: Vec<Option<String>>,
}

impl PartitionSpec {
    /// A spec naming, per tensor axis, the mesh axis that splits it.
    pub fn new<'a>(axes: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        PartitionSpec {
            axes: axes.into_iter().map(|a| a.map(str::to_string)).collect(),
        }
    }

    /// Every device holds the whole tensor.
    pub fn replicated() -> Self {
        PartitionSpec::default()
    }

    /// The entries, per tensor axis.
    pub fn axes(&self) -> &[Option<String>] {
        &self.axes
    }

    /// The layout on `mesh` of a tensor of `shape`, or why there is none.
    pub(crate) fn layout(&self, mesh: &Mesh, shape: &[usize]) -> Result<Layout, String> {
        if self.axes.len() > shape.len() {
            return Err(format!(
                "spec {self} has {} entries for a rank-{} tensor {shape:?}",
                self.axes.len(),
                shape.len()
            ));
        }
        let mut axis_of_dim = vec![None; shape.len()];
        for (dim, name) in self.axes.iter().enumerate() {
            let Some(name) = name else { continue };
            let Some(a) = mesh.axis_index(name) else {
                let names: Vec<&str> = mesh.axes().iter().map(|(n, _)| n.as_str()).collect();
                return Err(format!(
                    "spec {self} names mesh axis `{name}`; the mesh has {}",
                    names.join(", ")
                ));
            };
            if axis_of_dim.contains(&Some(a)) {
                return Err(format!("spec {self} uses mesh axis `{name}` twice"));
            }
            let size = mesh.axes()[a].1;
            if !shape[dim].is_multiple_of(size) {
                return Err(format!(
                    "axis {dim} of {shape:?} ({}) does not split evenly over mesh axis `{name}` ({size})",
                    shape[dim]
                ));
            }
            axis_of_dim[dim] = Some(a);
        }
        Ok(Layout { axis_of_dim })
    }
}

impl std::fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<&str> = self
            .axes
            .iter()
            .map(|a| a.as_deref().unwrap_or("_"))
            .collect();
        write!(f, "({})", parts.join(", "))
    }
}

/// A checked [`PartitionSpec`] for one tensor on one mesh.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The mesh axis splitting each tensor axis.
    axis_of_dim: Vec<Option<usize>>,
}

impl Layout {
    /// Pieces along each tensor axis.
    fn tiles(&self, mesh: &Mesh) -> Vec<usize> {
        self.axis_of_dim
            .iter()
            .map(|a| a.map_or(1, |a| mesh.axes()[a].1))
            .collect()
    }

    /// The mesh axes that split nothing (the tensor is replicated over them).
    fn replicated_axes(&self, mesh: &Mesh) -> Vec<usize> {
        (0..mesh.axes().len())
            .filter(|a| !self.axis_of_dim.contains(&Some(*a)))
            .collect()
    }

    /// The GSPMD sharding string (`{devices=[2,1,2]0,1,2,3
    /// last_tile_dim_replicate}`), partition ids being mesh positions.
    pub(crate) fn gspmd(&self, mesh: &Mesh) -> String {
        let tiles = self.tiles(mesh);
        if tiles.iter().all(|&t| t == 1) {
            return "{replicated}".into();
        }
        let rep_axes = self.replicated_axes(mesh);
        let rep: usize = rep_axes.iter().map(|&a| mesh.axes()[a].1).product();
        let mut dims = tiles.clone();
        if rep > 1 {
            dims.push(rep);
        }
        let total: usize = dims.iter().product();
        let mut devices = Vec::with_capacity(total);
        for flat in 0..total {
            // Row-major tile index over `dims`.
            let mut rest = flat;
            let mut index = vec![0; dims.len()];
            for (i, d) in index.iter_mut().zip(&dims).rev() {
                *i = rest % d;
                rest /= d;
            }
            let mut coords = vec![0; mesh.axes().len()];
            for (dim, a) in self.axis_of_dim.iter().enumerate() {
                if let Some(a) = a {
                    coords[*a] = index[dim];
                }
            }
            let mut r = if rep > 1 { index[tiles.len()] } else { 0 };
            for &a in rep_axes.iter().rev() {
                let size = mesh.axes()[a].1;
                coords[a] = r % size;
                r /= size;
            }
            devices.push(mesh.partition(&coords).to_string());
        }
        let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
        format!(
            "{{devices=[{}]{}{}}}",
            dims.join(","),
            devices.join(","),
            if rep > 1 {
                " last_tile_dim_replicate"
            } else {
                ""
            }
        )
    }

    /// The shape of each partition's block of a tensor of `shape`.
    pub(crate) fn block_shape(&self, mesh: &Mesh, shape: &[usize]) -> Vec<usize> {
        shape
            .iter()
            .zip(self.tiles(mesh))
            .map(|(s, t)| s / t)
            .collect()
    }

    /// Where partition `p`'s block starts in a tensor of `shape`.
    pub(crate) fn block_start(&self, mesh: &Mesh, p: usize, shape: &[usize]) -> Vec<usize> {
        let coords = mesh.coords(p);
        let block = self.block_shape(mesh, shape);
        self.axis_of_dim
            .iter()
            .zip(block)
            .map(|(a, b)| a.map_or(0, |a| coords[a] * b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Device;

    fn spec(axes: &[Option<&str>]) -> PartitionSpec {
        PartitionSpec::new(axes.iter().copied())
    }

    #[test]
    fn gspmd_strings_follow_the_mesh_order() {
        let dev = Device::cpu_with_devices(4).unwrap();
        let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)]).unwrap();
        let s = |axes: &[Option<&str>]| spec(axes).layout(&mesh, &[4, 6]).unwrap().gspmd(&mesh);
        assert_eq!(s(&[]), "{replicated}");
        assert_eq!(
            s(&[Some("data")]),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
        );
        assert_eq!(
            s(&[Some("model")]),
            "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"
        );
        assert_eq!(s(&[Some("data"), Some("model")]), "{devices=[2,2]0,1,2,3}");
        assert_eq!(s(&[Some("model"), Some("data")]), "{devices=[2,2]0,2,1,3}");
        assert_eq!(
            s(&[None, Some("model")]),
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
        );
    }

    #[test]
    fn blocks_of_each_partition() {
        let dev = Device::cpu_with_devices(4).unwrap();
        let mesh = Mesh::new(&dev, &[("data", 2), ("model", 2)]).unwrap();
        let l = spec(&[Some("model"), Some("data")])
            .layout(&mesh, &[4, 6])
            .unwrap();
        assert_eq!(l.block_shape(&mesh, &[4, 6]), vec![2, 3]);
        // Partition 1 is data 0, model 1: rows 2.., columns 0...
        assert_eq!(l.block_start(&mesh, 1, &[4, 6]), vec![2, 0]);
        assert_eq!(l.block_start(&mesh, 2, &[4, 6]), vec![0, 3]);
        assert!(spec(&[Some("data")]).layout(&mesh, &[3]).is_err());
    }
}
