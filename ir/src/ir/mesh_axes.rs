//! The named axes of a device mesh as a `shard_map` kernel sees them while
//! tracing: which devices a collective over some axes groups together.

/// Mesh axes, major first: device `p` has the row-major coordinates of `p`
/// over the axis sizes (as `tessel::shard::Mesh` numbers them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeshAxes {
    axes: Vec<(String, usize)>,
}

impl MeshAxes {
    /// Axes `(name, size)`, major first.
    pub fn new(axes: Vec<(String, usize)>) -> MeshAxes {
        MeshAxes { axes }
    }

    /// The axes, major first.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    /// The number of devices.
    pub fn size(&self) -> usize {
        self.axes.iter().map(|(_, s)| s).product()
    }

    /// The position of each named axis (an error names an unknown axis or
    /// one given twice), in mesh order.
    pub fn positions(&self, names: &[&str]) -> Result<Vec<usize>, String> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(p) = self.position(name) else {
                return Err(format!(
                    "the mesh has no axis `{name}`; its axes: {}",
                    self.describe()
                ));
            };
            if out.contains(&p) {
                return Err(format!("axis `{name}` is named twice"));
            }
            out.push(p);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// `data=2, model=2`.
    pub fn describe(&self) -> String {
        self.axes
            .iter()
            .map(|(n, s)| format!("{n}={s}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The position of the axis called `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|(n, _)| n == name)
    }

    /// The row-major coordinates of device `p`.
    pub fn coords(&self, p: usize) -> Vec<usize> {
        let mut rest = p;
        let mut coords = vec![0; self.axes.len()];
        for (c, (_, size)) in coords.iter_mut().zip(&self.axes).rev() {
            *c = rest % size;
            rest /= size;
        }
        coords
    }

    /// The device at `coords` (row-major).
    pub fn device(&self, coords: &[usize]) -> usize {
        coords
            .iter()
            .zip(&self.axes)
            .fold(0, |acc, (c, (_, size))| acc * size + c)
    }

    /// The device groups of a collective over the axes at `positions`:
    /// devices that agree on every other axis form a group, ordered
    /// row-major over `positions` (so member `i` of a group is the device
    /// whose index over those axes is `i`). Groups are listed by their
    /// first device.
    pub fn groups(&self, positions: &[usize]) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut seen = vec![false; self.size()];
        for p in 0..self.size() {
            if seen[p] {
                continue;
            }
            let base = self.coords(p);
            let members = self.members(&base, positions);
            for &m in &members {
                seen[m] = true;
            }
            groups.push(members);
        }
        groups
    }

    /// The devices that share `base`'s coordinates off `positions`, row-major
    /// over `positions`.
    fn members(&self, base: &[usize], positions: &[usize]) -> Vec<usize> {
        let count: usize = positions.iter().map(|&a| self.axes[a].1).product();
        (0..count)
            .map(|mut i| {
                let mut c = base.to_vec();
                for &a in positions.iter().rev() {
                    let size = self.axes[a].1;
                    c[a] = i % size;
                    i /= size;
                }
                self.device(&c)
            })
            .collect()
    }

    /// `(source, target)` device pairs of a permutation `perm` of the
    /// indices along the axis at `position`, applied in every group.
    pub fn permutation_pairs(
        &self,
        position: usize,
        perm: &[(usize, usize)],
    ) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for group in self.groups(&[position]) {
            for &(from, to) in perm {
                pairs.push((group[from], group[to]));
            }
        }
        pairs
    }

    /// How far apart, in device numbers, neighbours along the axis at
    /// `position` are (the product of the sizes of the axes after it).
    pub fn stride(&self, position: usize) -> usize {
        self.axes[position + 1..].iter().map(|(_, s)| s).product()
    }
}

#[cfg(test)]
mod tests {
    use super::MeshAxes;

    fn mesh() -> MeshAxes {
        MeshAxes::new(vec![("data".into(), 2), ("model".into(), 3)])
    }

    #[test]
    fn groups_vary_the_named_axes_only() {
        let m = mesh();
        assert_eq!(m.groups(&[1]), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(m.groups(&[0]), vec![vec![0, 3], vec![1, 4], vec![2, 5]]);
        assert_eq!(m.groups(&[0, 1]), vec![vec![0, 1, 2, 3, 4, 5]]);
        assert_eq!(m.stride(0), 3);
        assert_eq!(m.stride(1), 1);
    }

    #[test]
    fn permutations_apply_in_every_group() {
        let m = mesh();
        assert_eq!(
            m.permutation_pairs(1, &[(0, 1), (1, 2), (2, 0)]),
            vec![(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]
        );
    }

    #[test]
    fn unknown_and_repeated_axes_are_errors() {
        let m = mesh();
        assert_eq!(m.positions(&["model", "data"]), Ok(vec![0, 1]));
        assert!(m
            .positions(&["expert"])
            .unwrap_err()
            .contains("no axis `expert`; its axes: data=2, model=3"));
        assert!(m.positions(&["data", "data"]).is_err());
    }
}
