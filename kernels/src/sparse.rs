//! Block-sparse matrix products, written with `#[sparse_kernel]`.

use tessel::prelude::*;

/// `a · b` for a block-sparse `a` (static or dynamic layout) and a dense `b`:
/// one traced loop over `a`'s stored blocks, each adding its product into
/// the output rows it covers. Empty blocks cost nothing.
///
/// ```
/// use tessel_kernels::sparse::block_sparse_matmul;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let mut dense = vec![0.0f32; 16 * 16];
/// dense[3] = 2.0; // only block (0, 0) is non-zero
/// let a = HostBlockSparse::from_dense(&HostTensor::from_vec(dense, [16, 16])?, (8, 8))?;
/// let b = HostTensor::from_vec(vec![1.0f32; 16 * 4], [16, 4])?;
/// let y = block_sparse_matmul::run(&dev, &a, &b)?;
/// assert_eq!(y.to_vec::<f32>()?[..4], [2.0; 4]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[sparse_kernel(block_size = 128)]
pub fn block_sparse_matmul(a: BlockSparse, b: Tensor) -> Tensor {
    let (b0, b1) = a.block_shape();
    let mut out = Tensor::zeros([a.rows(), b.dim(1)], b.dtype());
    if a.block_count() > 0 {
        for i in 0..a.block_count() {
            let blk = a.block_at(i);
            let rows = out.block_sized(0, blk.row, b0, 0.0);
            let update = rows + blk.values.matmul(b.block_sized(0, blk.col, b1, 0.0));
            out = out.set_block(0, blk.row, update);
        }
    }
    out
}

/// The block-sparse product with the seeds' signature: `sparse · dense` for a
/// square `K × K` block-sparse matrix given as `sparse_values` `[nnz, b, b]`
/// at block coordinates `indices` `s32[nnz, 2]` (a dynamic layout: one
/// compiled program serves every sparsity pattern with `nnz` blocks), and a
/// dense `K × N` matrix.
#[sparse_kernel(block_size = 128)]
pub fn block_sparse(dense: Tensor, sparse_values: Tensor, indices: Tensor) -> Tensor {
    let k = dense.dim(0);
    block_sparse_matmul(
        BlockSparse::from_parts(sparse_values, indices, (k, k)),
        dense,
    )
}
