//! Block-sparse matrices: the values of the non-zero blocks plus their block
//! coordinates (BSR-like), as kernel parameters.
//!
//! A layout is *static* (the coordinates are known while tracing and part of
//! the compile-cache key: loops over the blocks skip empty ones entirely and
//! read coordinates from a constant table) or *dynamic* (the coordinates are
//! an `s32[nnz, 2]` tensor argument read inside the loop, the "mask info"
//! of splash attention: one program serves every layout with the same
//! number of blocks).

mod check;

pub use self::check::MAX_SPARSE_EXTENT;
use self::check::{check_coordinates, check_layout, sparse_err, values_block};
use crate::dtype::DType;
use crate::error::{Location, Result};
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
/// ([`DeviceBlockSparse`](crate::kernel::DeviceBlockSparse)), a buffer laid
/// out over a mesh for `call_sharded`
/// ([`ShardedBlockSparse`](crate::kernel::ShardedBlockSparse)).
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

impl HostBlockSparse {
    /// Stores the blocks of a dense `[rows, cols]` matrix that have a non-zero
    /// element (row-major block order); static layout. The block shape is
    /// checked as in [`HostBlockSparse::from_blocks`].
    pub fn from_dense(dense: &HostTensor, block: (usize, usize)) -> Result<Self> {
        if dense.shape().len() != 2 {
            return Err(sparse_err(format!(
                "need a rank-2 matrix, got {}",
                dense.spec()
            )));
        }
        let (rows, cols) = (dense.shape()[0], dense.shape()[1]);
        check_layout((rows, cols), block)?;
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
            values: HostTensor::try_from_fn(spec, |i| data[i])?,
            coords: Coords::Static(coords),
            shape: (rows, cols),
            block,
        })
    }

    /// A matrix from stored blocks and their coordinates, checked: one
    /// coordinate per block, each inside the block grid (`0..ceil(rows /
    /// block rows)` by `0..ceil(cols / block cols)`), no duplicates; block
    /// edges of at least 1 that are multiples of 8 or cover their axis;
    /// extents at most [`MAX_SPARSE_EXTENT`]. Every violation is an error
    /// naming the block, its coordinate and the valid range.
    pub fn from_blocks(
        values: HostTensor,
        coords: Vec<(usize, usize)>,
        shape: (usize, usize),
    ) -> Result<Self> {
        let block = values_block(&values)?;
        let nnz = values.shape()[0];
        if coords.len() != nnz {
            return Err(sparse_err(format!(
                "{} coordinates for {nnz} stored blocks",
                coords.len()
            )));
        }
        let wide = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        check_coordinates(
            coords.iter().map(|&(r, c)| (wide(r), wide(c))),
            shape,
            block,
        )?;
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
        Self::check_coords(coords, shape, values_block(&values)?)?;
        let pairs: Vec<(usize, usize)> = coords
            .to_vec::<i32>()?
            .chunks(2)
            .map(|p| (p[0] as usize, p[1] as usize))
            .collect();
        Ok(Self::from_blocks(values, pairs, shape)?.into_dynamic())
    }

    /// Checks a host coordinate table for a `shape` matrix of `block`-shaped
    /// blocks before it is passed to a kernel as a traced `s32[nnz, 2]`
    /// tensor (where out-of-range coordinates would be clamped; see
    /// [`BlockSparse::from_parts`]): the table's type, the layout (as
    /// [`HostBlockSparse::from_blocks`] checks it), every coordinate inside
    /// the block grid, no block stored twice. The error names the first bad
    /// stored block, its coordinate and the valid range.
    ///
    /// ```
    /// use tessel_dsl::prelude::*;
    /// let ok = HostTensor::from_vec(vec![0i32, 1, 1, 0], [2, 2])?;
    /// HostBlockSparse::check_coords(&ok, (16, 16), (8, 8))?;
    /// let bad = HostTensor::from_vec(vec![0i32, 1, 100, -5], [2, 2])?;
    /// let e = HostBlockSparse::check_coords(&bad, (16, 16), (8, 8)).unwrap_err();
    /// assert!(e.to_string().contains("stored block 1 has coordinate (100, -5)"), "{e}");
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn check_coords(
        coords: &HostTensor,
        shape: (usize, usize),
        block: (usize, usize),
    ) -> Result<()> {
        if coords.dtype() != DType::S32 || coords.shape().len() != 2 || coords.shape()[1] != 2 {
            return Err(sparse_err(format!(
                "coordinates must be s32[nnz, 2], got {}",
                coords.spec()
            )));
        }
        let v = coords.to_vec::<i32>()?;
        let pairs = v.chunks(2).map(|p| (i64::from(p[0]), i64::from(p[1])));
        check_coordinates(pairs, shape, block)
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
        let spec = TensorSpec::new([rows, cols], self.values.dtype());
        spec.check_size()?;
        let vals = self.values.to_f64_vec();
        let mut out = vec![0.0; spec.num_elements()];
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
        HostTensor::try_from_fn(spec, |i| out[i])
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
    /// `shape.0 × shape.1` matrix. Shape errors are trace errors, and so are
    /// block edges of 0, edges that are not multiples of 8 yet smaller than
    /// their axis, and extents above [`MAX_SPARSE_EXTENT`].
    ///
    /// The coordinates' values are known only on the device, so they cannot
    /// be checked here. Out of range, they follow XLA's dynamic-slice rule:
    /// block `(r, c)` is read and written at the element starts
    /// `(r · b0, c · b1)` (s32 arithmetic, wrapping), each clamped into `[0, extent −
    /// edge]`; a coordinate below the grid lands on block 0, one past it on
    /// the last block. [`block_at`](Self::block_at) replaces such a block's
    /// values by NaN (zeros for integer values), so the real block it lands
    /// on comes out NaN rather than silently combined with it. Check host
    /// tables before passing them ([`HostBlockSparse::dynamic`],
    /// [`HostBlockSparse::check_coords`]) to get an error instead.
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
        let mut block = if vs.rank() == 3 {
            (vs.shape[1], vs.shape[2])
        } else {
            (1, 1)
        };
        if ok {
            if let Err(e) = check_layout(shape, block) {
                crate::tensor::fail("block_sparse", &[values, coords], e.to_string(), &loc);
                block = (1, 1);
            }
        }
        // Wider integers saturate into s32 (a cast would wrap 2^32 + 1 onto
        // block 1), so an out-of-range coordinate stays out of range.
        let coords = if ok && cs.dtype != DType::S32 && cs.dtype.size_in_bytes() >= 4 {
            let lo = if cs.dtype.is_unsigned() {
                0.0
            } else {
                f64::from(i32::MIN)
            };
            coords.clamp(lo, f64::from(i32::MAX))
        } else {
            coords
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
    ///
    /// A dynamic layout's coordinates are checked on the device: a block
    /// whose coordinate lies outside the block grid has its values replaced
    /// by NaN (zeros for integer values), so what it is combined with where
    /// XLA clamps it (see [`BlockSparse::from_parts`]) comes out NaN
    /// instead of a plausible wrong number.
    ///
    /// A matrix with no stored block reads the same way: block (0, 0), all
    /// NaN (zeros for integer values). A loop over its blocks runs no
    /// iteration, but its body is traced, so
    /// `for i in 0..a.block_count() { a.block_at(i) .. }` needs no guard.
    #[track_caller]
    pub fn block_at(&self, i: impl LoopBound) -> SparseBlock {
        let loc = Location::caller();
        let i = i.to_s32(&loc);
        let zero = Tensor::scalar(0.0, DType::S32);
        let (b0, b1) = self.block;
        let dtype = self.values.dtype();
        if self.block_count() == 0 {
            let missing = if dtype.is_float() { f64::NAN } else { 0.0 };
            return SparseBlock {
                row: zero,
                col: zero,
                values: Tensor::full([b0, b1], missing, dtype),
            };
        }
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
        let row = pair.slice_axis(1, 0, 1).reshape(&[]);
        let col = pair.slice_axis(1, 1, 2).reshape(&[]);
        let values = match &self.coords {
            // Checked when the layout was built.
            Coords::Static(_) => values,
            Coords::Dynamic(_) => {
                let (nbr, nbc) = (self.shape.0.div_ceil(b0), self.shape.1.div_ceil(b1));
                let inside = row.ge(0) & row.lt(nbr) & col.ge(0) & col.lt(nbc);
                let outside = if values.dtype().is_float() {
                    f64::NAN
                } else {
                    0.0
                };
                inside.select(values, outside)
            }
        };
        SparseBlock { row, col, values }
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
        dense
            .slice_axis(0, 0, self.shape.0)
            .slice_axis(1, 0, self.shape.1)
    }
}
