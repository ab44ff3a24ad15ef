//! Splitting host tensors into per-partition blocks and putting results
//! back together.

use super::mesh::Mesh;
use super::spec::Layout;
use crate::error::Result;
use crate::host::HostTensor;
use crate::shape::TensorSpec;

/// Copies the `size` block at `from` of `src` (shape `src_shape`) to `to`
/// in `dst` (shape `dst_shape`); `elem` bytes per element.
struct Block<'a> {
    size: &'a [usize],
    elem: usize,
}

impl Block<'_> {
    fn copy(
        &self,
        src: &[u8],
        src_shape: &[usize],
        from: &[usize],
        dst: &mut [u8],
        dst_shape: &[usize],
        to: &[usize],
    ) {
        let rank = self.size.len();
        if self.size.contains(&0) {
            return;
        }
        if rank == 0 {
            dst[..self.elem].copy_from_slice(&src[..self.elem]);
            return;
        }
        // Row-major offset of `index + start` in `shape`.
        let offset = |shape: &[usize], index: &[usize], start: &[usize]| -> usize {
            index
                .iter()
                .zip(start)
                .zip(shape)
                .fold(0, |acc, ((i, f), s)| acc * s + i + f)
        };
        let run = self.size[rank - 1] * self.elem;
        let rows: usize = self.size[..rank - 1].iter().product();
        let mut index = vec![0; rank];
        for row in 0..rows {
            let mut rest = row;
            for d in (0..rank - 1).rev() {
                index[d] = rest % self.size[d];
                rest /= self.size[d];
            }
            let so = offset(src_shape, &index, from) * self.elem;
            let to_ = offset(dst_shape, &index, to) * self.elem;
            dst[to_..to_ + run].copy_from_slice(&src[so..so + run]);
        }
    }
}

/// Each partition's block of `t`.
pub(crate) fn split(t: &HostTensor, layout: &Layout, mesh: &Mesh) -> Result<Vec<HostTensor>> {
    let shape = t.shape();
    let size = layout.block_shape(mesh, shape);
    let elem = t.dtype().size_in_bytes();
    let spec = TensorSpec::new(size.clone(), t.dtype());
    let bytes = spec.check_size()?;
    let block = Block { size: &size, elem };
    (0..mesh.size())
        .map(|p| {
            let mut data = vec![0u8; bytes];
            let from = layout.block_start(mesh, p, shape);
            block.copy(
                t.as_bytes(),
                shape,
                &from,
                &mut data,
                &size,
                &vec![0; size.len()],
            );
            HostTensor::from_bytes(spec.clone(), data)
        })
        .collect()
}

/// The tensor of `spec` whose partition blocks `block(p)` returns; each
/// distinct block is fetched once (a replica only from the first partition
/// that holds it).
pub(crate) fn assemble(
    spec: &TensorSpec,
    layout: &Layout,
    mesh: &Mesh,
    mut block_of: impl FnMut(usize) -> Result<HostTensor>,
) -> Result<HostTensor> {
    let shape = &spec.shape;
    let size = layout.block_shape(mesh, shape);
    let elem = spec.dtype.size_in_bytes();
    let mut data = vec![0u8; spec.check_size()?];
    let block = Block { size: &size, elem };
    let mut seen = std::collections::HashSet::new();
    for p in 0..mesh.size() {
        let to = layout.block_start(mesh, p, shape);
        if seen.insert(to.clone()) {
            let shard = block_of(p)?;
            block.copy(
                shard.as_bytes(),
                &size,
                &vec![0; size.len()],
                &mut data,
                shape,
                &to,
            );
        }
    }
    HostTensor::from_bytes(spec.clone(), data)
}
