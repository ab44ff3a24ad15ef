//! Block-sparse matrices: the values of the non-zero blocks plus their block
//! coordinates (BSR-like), as kernel parameters.
//!
//! A layout is *static* (the coordinates are known while tracing and part of
//! the compile-cache key: loops over the blocks skip empty ones entirely and
//! read coordinates from a constant table) or *dynamic* (the coordinates are
//! an `s32[nnz, 2]` tensor argument read inside the loop, the "mask info"
//! of splash attention: one program serves every layout with the same
//! number of blocks).

use crate::dtype::DType;
use crate::error::{HostError, Location, Result};
use crate::host::HostTensor;
use crate::lang::LoopBound;
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;

/// Where the block coordinates live.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Coords<T> {
    /// Known while tracing: (block row, block column) per stored block.
    Static(Vec<(usize, usize)>),
    /// A `s32[nnz, 2]` tensor of (block row, block column).
    Dynamic(T),
}

/// A block-sparse `rows × cols` matrix whose stored blocks are
/// `block.0 × block.1`: `values` is `[nnz, block.0, block.1]`. `T` is the
/// representation of the tensors: [`HostTensor`] for `run`, [`TensorSpec`]
/// for `lower`/`compile`, a device buffer for `call`
/// ([`DeviceBlockSparse`](crate::kernel::DeviceBlockSparse)).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSparseOf<T> {
    pub(crate) values: T,
    pub(crate) coords: Coords<T>,
    pub(crate) shape: (usize, usize),
    pub(crate) block: (usize, usize),
}

impl<T> BlockSparseOf<T> {
    /// The stored blocks, `[nnz, block.0, block.1]`.
    pub fn values(&self) -> &T {
        &self.values
    }
    /// The block coordinates.
    pub fn coords(&self) -> &Coords<T> {
        &self.coords
    }
    /// The dense shape.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }
    /// The block shape.
    pub fn block(&self) -> (usize, usize) {
        self.block
    }
}

/// A block-sparse matrix on the host.
pub type HostBlockSparse = BlockSparseOf<HostTensor>;

fn sparse_err(message: String) -> crate::Error {
    HostError::InvalidInput {
        what: "block-sparse matrix",
        message,
    }
    .into()
}

impl HostBlockSparse {
    /// Stores the blocks of a dense `[rows, cols]` matrix that have a non-zero
    /// element (row-major block order); static layout.
    pub fn from_dense(dense: &HostTensor, block: (usize, usize)) -> Result<Self> {
        if dense.shape().len() != 2 || block.0 == 0 || block.1 == 0 {
            return Err(sparse_err(format!(
                "need a rank-2 matrix and non-zero block sizes, got {} and {block:?}",
                dense.spec()
            )));
        }
        let (rows, cols) = (dense.shape()[0], dense.shape()[1]);
        let v = dense.to_f64_vec();
        let (nbr, nbc) = (rows.div_ceil(block.0), cols.div_ceil(block.1));
        let mut coords = Vec::new();
        let mut data = Vec::new();
        for br in 0..nbr {
            for bc in 0..nbc {
                let at = |i: usize, j: usize| {
                    let (r, c) = (br * block.0 + i, bc * block.1 + j);
                    if r < rows && c < cols {
                        v[r * cols + c]
                    } else {
                        0.0
                    }
                };
                let tile: Vec<f64> = (0..block.0)
                    .flat_map(|i| (0..block.1).map(move |j| (i, j)))
                    .map(|(i, j)| at(i, j))
                    .collect();
                if tile.iter().any(|&x| x != 0.0) {
                    coords.push((br, bc));
                    data.extend(tile);
                }
            }
        }
        let spec = TensorSpec::new([coords.len(), block.0, block.1], dense.dtype());
        Ok(BlockSparseOf {
            values: HostTensor::from_fn(spec, |i| data[i]),
            coords: Coords::Static(coords),
            shape: (rows, cols),
            block,
        })
    }

    /// A matrix from stored blocks and their coordinates, checked: one
    /// coordinate per block, each inside the matrix, no duplicates.
    pub fn from_blocks(
        values: HostTensor,
        coords: Vec<(usize, usize)>,
        shape: (usize, usize),
    ) -> Result<Self> {
        let s = values.shape();
        if s.len() != 3 || s[1] == 0 || s[2] == 0 {
            return Err(sparse_err(format!(
                "values must be [nnz, block_rows, block_cols], got {}",
                values.spec()
            )));
        }
        let block = (s[1], s[2]);
        if coords.len() != s[0] {
            return Err(sparse_err(format!(
                "{} coordinates for {} stored blocks",
                coords.len(),
                s[0]
            )));
        }
        let (nbr, nbc) = (shape.0.div_ceil(block.0), shape.1.div_ceil(block.1));
        let mut seen = std::collections::HashSet::new();
        for &(r, c) in &coords {
            if r >= nbr || c >= nbc {
                return Err(sparse_err(format!(
                    "block ({r}, {c}) is outside the {nbr}x{nbc} block grid of a {}x{} matrix",
                    shape.0, shape.1
                )));
            }
            if !seen.insert((r, c)) {
                return Err(sparse_err(format!("block ({r}, {c}) is stored twice")));
            }
        }
        Ok(BlockSparseOf {
            values,
            coords: Coords::Static(coords),
            shape,
            block,
        })
    }

    /// The same matrix with its coordinates passed as a tensor argument
    /// (one compiled program for every layout with this many blocks).
    pub fn into_dynamic(self) -> Self {
        match self.coords {
            Coords::Static(c) => {
                let flat: Vec<i32> = c
                    .iter()
                    .flat_map(|&(r, col)| [r as i32, col as i32])
                    .collect();
                let n = c.len();
                let coords = HostTensor::from_vec(flat, [n, 2])
                    .unwrap_or_else(|_| HostTensor::zeros(TensorSpec::new([n, 2], DType::S32)));
                BlockSparseOf {
                    coords: Coords::Dynamic(coords),
                    ..self
                }
            }
            Coords::Dynamic(_) => self,
        }
    }

    /// A matrix whose coordinates are a `s32[nnz, 2]` host tensor (passed to
    /// the kernel as an argument), checked like [`HostBlockSparse::from_blocks`].
    pub fn dynamic(values: HostTensor, coords: &HostTensor, shape: (usize, usize)) -> Result<Self> {
        if coords.dtype() != DType::S32 || coords.shape().len() != 2 || coords.shape()[1] != 2 {
            return Err(sparse_err(format!(
                "coordinates must be s32[nnz, 2], got {}",
                coords.spec()
            )));
        }
        let v = coords.to_f64_vec();
        if v.iter().any(|&x| x < 0.0) {
            return Err(sparse_err("block coordinates must be non-negative".into()));
        }
        let pairs: Vec<(usize, usize)> = v
            .chunks(2)
            .map(|p| (p[0] as usize, p[1] as usize))
            .collect();
        Ok(Self::from_blocks(values, pairs, shape)?.into_dynamic())
    }

    /// Number of stored blocks.
    pub fn nnz(&self) -> usize {
        self.values.shape().first().copied().unwrap_or(0)
    }

    /// The dense matrix (zeros outside the stored blocks), for references.
    pub fn to_dense(&self) -> Result<HostTensor> {
        let coords: Vec<(usize, usize)> = match &self.coords {
            Coords::Static(c) => c.clone(),
            Coords::Dynamic(t) => {
                let v = t.to_f64_vec();
                v.chunks(2)
                    .map(|p| (p[0] as usize, p[1] as usize))
                    .collect()
            }
        };
        let (rows, cols) = self.shape;
        let (b0, b1) = self.block;
        let vals = self.values.to_f64_vec();
        let mut out = vec![0.0; rows * cols];
        for (k, &(br, bc)) in coords.iter().enumerate() {
            for i in 0..b0 {
                for j in 0..b1 {
                    let (r, c) = (br * b0 + i, bc * b1 + j);
                    if r < rows && c < cols {
                        out[r * cols + c] = vals[k * b0 * b1 + i * b1 + j];
                    }
                }
            }
        }
        Ok(HostTensor::from_fn(
            TensorSpec::new([rows, cols], self.values.dtype()),
            |i| out[i],
        ))
    }
}

/// The spec of a block-sparse argument, for `lower`/`compile`.
pub type BlockSparseSpec = BlockSparseOf<TensorSpec>;

impl HostBlockSparse {
    /// The spec of this argument.
    pub fn spec(&self) -> BlockSparseSpec {
        BlockSparseOf {
            values: self.values.spec().clone(),
            coords: match &self.coords {
                Coords::Static(c) => Coords::Static(c.clone()),
                Coords::Dynamic(t) => Coords::Dynamic(t.spec().clone()),
            },
            shape: self.shape,
            block: self.block,
        }
    }
}

/// A block-sparse matrix inside a kernel: traced values and static or
/// traced coordinates.
#[derive(Clone, Debug)]
pub struct BlockSparse {
    pub(crate) values: Tensor,
    pub(crate) coords: Coords<Tensor>,
    pub(crate) shape: (usize, usize),
    pub(crate) block: (usize, usize),
}

/// One stored block inside a kernel.
#[derive(Clone, Copy, Debug)]
pub struct SparseBlock {
    /// Block row (an s32 scalar; constant for static layouts).
    pub row: Tensor,
    /// Block column.
    pub col: Tensor,
    /// The block's `[block.0, block.1]` values.
    pub values: Tensor,
}

impl BlockSparse {
    /// A block-sparse matrix made inside a kernel from traced parts: `values`
    /// `[nnz, b0, b1]` and `coords` `s32[nnz, 2]` (a dynamic layout) of a
    /// `shape.0 × shape.1` matrix. Shape errors are trace errors.
    #[track_caller]
    pub fn from_parts(values: Tensor, coords: Tensor, shape: (usize, usize)) -> BlockSparse {
        let (vs, cs) = (values.spec(), coords.spec());
        let loc = Location::caller();
        let ok = vs.rank() == 3
            && cs.rank() == 2
            && cs.shape[1] == 2
            && cs.shape[0] == vs.shape[0]
            && cs.dtype.is_integer();
        if !ok {
            let m = format!("block-sparse parts must be values [nnz, b0, b1] and integer coordinates [nnz, 2], got {vs} and {cs}");
            crate::trace::tensor::fail("block_sparse", &[values, coords], m, &loc);
        }
        let block = if vs.rank() == 3 {
            (vs.shape[1], vs.shape[2])
        } else {
            (1, 1)
        };
        BlockSparse {
            values,
            coords: Coords::Dynamic(coords.cast(DType::S32)),
            shape,
            block,
        }
    }

    /// Dense rows.
    pub fn rows(&self) -> usize {
        self.shape.0
    }
    /// Dense columns.
    pub fn cols(&self) -> usize {
        self.shape.1
    }
    /// The block shape.
    pub fn block_shape(&self) -> (usize, usize) {
        self.block
    }
    /// Number of stored blocks (the trip count of a loop over them).
    pub fn block_count(&self) -> usize {
        self.values.dim(0)
    }
    /// The static coordinates, if the layout is static.
    pub fn static_coords(&self) -> Option<&[(usize, usize)]> {
        match &self.coords {
            Coords::Static(c) => Some(c),
            Coords::Dynamic(_) => None,
        }
    }
    /// The element type of the stored values.
    pub fn dtype(&self) -> DType {
        self.values.dtype()
    }

    /// Stored block `i` (a Rust integer or a traced loop index): its
    /// coordinates (from the constant table or the coordinate tensor) and values.
    #[track_caller]
    pub fn block_at(&self, i: impl LoopBound) -> SparseBlock {
        let loc = Location::caller();
        let i = i.to_s32(&loc);
        let zero = Tensor::scalar(0.0, DType::S32);
        let (b0, b1) = self.block;
        let values = self
            .values
            .dynamic_slice(&[i, zero, zero], &[1, b0, b1])
            .reshape(&[b0 as isize, b1 as isize]);
        let table = match &self.coords {
            Coords::Dynamic(t) => *t,
            Coords::Static(c) => {
                let flat: Vec<i32> = c
                    .iter()
                    .flat_map(|&(r, col)| [r as i32, col as i32])
                    .collect();
                match HostTensor::from_vec(flat, [c.len(), 2]) {
                    Ok(h) => Tensor::constant(&h),
                    Err(_) => Tensor::zeros([c.len(), 2], DType::S32),
                }
            }
        };
        let pair = table.dynamic_slice(&[i, zero], &[1, 2]);
        SparseBlock {
            row: pair.narrow(1, 0, 1).reshape(&[]),
            col: pair.narrow(1, 1, 2).reshape(&[]),
            values,
        }
    }

    /// The dense matrix (for references and small cases).
    #[track_caller]
    pub fn to_dense(&self) -> Tensor {
        let (b0, b1) = self.block;
        let (nbr, nbc) = (self.shape.0.div_ceil(b0), self.shape.1.div_ceil(b1));
        let mut dense = Tensor::zeros([nbr * b0, nbc * b1], self.values.dtype());
        for k in 0..self.block_count() {
            let blk = self.block_at(k);
            let rows = dense.block_sized(0, blk.row, b0, 0.0);
            dense = dense.set_block(0, blk.row, rows.set_block(1, blk.col, blk.values));
        }
        dense.narrow(0, 0, self.shape.0).narrow(1, 0, self.shape.1)
    }
}
