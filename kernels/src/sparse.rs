//! Block-sparse matrix products, written with `#[sparse_kernel]`.
//!
//! Checks: a [`HostBlockSparse`] is checked when it is built (coordinates
//! inside the block grid, no block twice, valid block shapes). Inside a
//! kernel, shapes, block shapes and the kernel's `block_size` are checked
//! while tracing (kernel errors). The host `indices` of
//! [`block_sparse`](fn@block_sparse) are checked by its `run` (and
//! `profile`, `value_and_grad`) with [`check_block_indices`] before
//! anything runs. Coordinates that only the device sees (`call` on device
//! buffers, a layout computed inside a kernel) cannot fail there: a block
//! whose coordinate is outside the grid gets NaN values
//! ([`BlockSparse::block_at`]), so the rows XLA clamps it onto come out
//! NaN instead of a plausible wrong result.

use tessel::prelude::*;
use tessel::report;
use tessel::tile::block_size;
use tessel::tile::sparse::MAX_SPARSE_EXTENT;

/// `a · b` for a block-sparse `a` (static or dynamic layout) and a dense `b`:
/// one traced loop over `a`'s stored blocks, each adding its product into
/// the output rows it covers. Empty blocks cost nothing.
///
/// The block shape is `a`'s own (checked when `a` was built); `b` must be
/// a matrix with as many rows as `a` has columns (a kernel error
/// otherwise).
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
    if b.dtype() != a.dtype() {
        report::fail(
            "block_sparse_matmul",
            &[b],
            format!(
                "the dense operand must have the block-sparse matrix's dtype {}, got {}",
                a.dtype(),
                b.spec()
            ),
        );
        return b;
    }
    if b.rank() != 2 || b.dim(0) != a.cols() {
        report::fail(
            "block_sparse_matmul",
            &[b],
            format!(
                "the dense operand must be a matrix of {} rows (the block-sparse matrix is {} x {} \
                 in blocks of {b0} x {b1}), got {}",
                a.cols(),
                a.rows(),
                a.cols(),
                b.spec()
            ),
        );
        return b;
    }
    let mut out = Tensor::zeros([a.rows(), b.dim(1)], b.dtype());
    for i in 0..a.block_count() {
        let blk = a.block_at(i);
        let rows = out.block_sized(0, blk.row, b0, 0.0);
        let update = rows + blk.values.matmul(b.block_sized(0, blk.col, b1, 0.0));
        out = out.set_block(0, blk.row, update);
    }
    out
}

/// The block-sparse product with the seeds' signature: `sparse · dense` for a
/// square `K × K` block-sparse matrix given as `sparse_values` `[nnz, b, b]`
/// at block coordinates `indices` `s32[nnz, 2]` (a dynamic layout: one
/// compiled program serves every sparsity pattern with `nnz` blocks), and a
/// dense `K × N` matrix.
///
/// The kernel's `block_size` is the block edge `b`: it must be at least 1
/// and a multiple of 8 (or cover all `K` rows), and the values' blocks must
/// be `b × b`; each is a kernel error otherwise, as are malformed shapes.
/// Entries of a block past the matrix's edge (the ragged last block row or
/// column when `b` does not divide `K`) are ignored.
///
/// `run`, `profile` and `value_and_grad` check their host inputs with
/// [`check_block_indices`] (under the configuration's `block_size`) before
/// tracing: a coordinate outside the `ceil(K / b)`-square block grid, such
/// as `(100, -5)`, or a block stored twice, is an error naming the stored
/// block. `call` takes the indices as a device buffer, where they are read
/// by XLA's dynamic-slice rule: block `(r, c)` starts at element
/// `(r · b, c · b)`, clamped into `[0, K − b]`, so a bad coordinate would
/// land on a real block; the kernel gives such a block NaN values instead
/// (see [`BlockSparse::block_at`]), which makes the rows it lands on NaN.
/// Blocks stored twice are added twice on the device.
#[sparse_kernel(block_size = 128, check_args = check_run_args)]
pub fn block_sparse(dense: Tensor, sparse_values: Tensor, indices: Tensor) -> Tensor {
    if !is_matrix(dense) || !same_dtype(dense, sparse_values) {
        return dense;
    }
    let k = dense.dim(0);
    let a = BlockSparse::from_parts(sparse_values, indices, (k, k));
    check_kernel_block(&a, sparse_values);
    block_sparse_matmul(a, dense)
}

/// The host-input check of [`block_sparse`](fn@block_sparse)'s `run`:
/// [`check_block_indices`] under `config`'s block size, on indices of any
/// integer type read as s32 the way the kernel reads them (saturating).
/// Malformed shapes are left to the trace, which reports them as kernel
/// errors.
fn check_run_args(config: &KernelConfig, args: &[&HostTensor]) -> Result<()> {
    let [dense, values, indices] = args else {
        return Ok(());
    };
    let (vs, is) = (values.shape(), indices.shape());
    let well_formed = dense.shape().len() == 2
        && vs.len() == 3
        && is.len() == 2
        && is[1] == 2
        && is[0] == vs[0]
        && indices.dtype().is_integer();
    if !well_formed {
        return Ok(());
    }
    if indices.dtype() == S32 {
        return check_block_indices(dense, values, indices, config.block_size);
    }
    let (lo, hi) = (f64::from(i32::MIN), f64::from(i32::MAX));
    let read: Vec<i32> = indices
        .to_f64_vec()
        .into_iter()
        .map(|v| v.clamp(lo, hi) as i32)
        .collect();
    let read = HostTensor::from_vec(read, [is[0], 2])?;
    check_block_indices(dense, values, &read, config.block_size)
}

/// Whether `dense` is a matrix; records a kernel error if not.
#[track_caller]
fn is_matrix(dense: Tensor) -> bool {
    if dense.rank() != 2 {
        let m = format!(
            "the dense operand must be a K x N matrix, got {}",
            dense.spec()
        );
        report::fail("block_sparse", &[dense], m);
        return false;
    }
    true
}

/// Whether the stored blocks have the dense operand's dtype; records a
/// kernel error if not.
#[track_caller]
fn same_dtype(dense: Tensor, sparse_values: Tensor) -> bool {
    if sparse_values.dtype() != dense.dtype() {
        let m = format!(
            "the sparse values must have the dense operand's dtype {}, got {}",
            dense.dtype(),
            sparse_values.spec()
        );
        report::fail("block_sparse", &[dense, sparse_values], m);
        return false;
    }
    true
}

/// Records a kernel error if the kernel's `block_size` is not a valid block
/// edge for `a` or disagrees with its blocks (after any error
/// [`BlockSparse::from_parts`] recorded, which comes first).
#[track_caller]
fn check_kernel_block(a: &BlockSparse, sparse_values: Tensor) {
    if let Some(bs) = block_size() {
        if let Err(m) = check_block_size(bs, a.rows(), a.block_shape()) {
            report::fail("block_sparse", &[sparse_values], m);
        }
    }
}

/// Checks the kernel's `block_size` against the tile rule (the guide's chapter on writing kernels) and against
/// the values' block shape.
fn check_block_size(bs: usize, k: usize, block: (usize, usize)) -> Result<(), String> {
    if bs == 0 {
        return Err("block_size must be at least 1, got 0".into());
    }
    if bs > MAX_SPARSE_EXTENT {
        return Err(format!(
            "block_size {bs} is above the limit of {MAX_SPARSE_EXTENT} (2^31 - 1): block starts \
             are s32"
        ));
    }
    if !bs.is_multiple_of(8) && bs < k {
        return Err(format!(
            "block_size {bs} is not a multiple of 8 (block sizes must be multiples of 8, or cover \
             all {k} rows of the matrix)"
        ));
    }
    if block != (bs, bs) {
        return Err(format!(
            "block_size {bs} disagrees with the values' blocks of {} x {}: the values must be \
             [nnz, {bs}, {bs}]",
            block.0, block.1
        ));
    }
    Ok(())
}

/// Checks the host inputs of [`block_sparse`](fn@block_sparse) before they go to the
/// device: `dense` a `K × N` matrix, `sparse_values` `[nnz, b, b]` (and
/// `b` equal to `block_size` when one is given), `indices` `s32[nnz, 2]`
/// with every coordinate inside the `ceil(K / b)`-square block grid and no
/// block twice. The error names the first bad stored block, its coordinate
/// and the valid range.
///
/// ```
/// use tessel_kernels::sparse::check_block_indices;
/// use tessel_dsl::prelude::*;
/// let dense = HostTensor::from_vec(vec![0.0f32; 16 * 4], [16, 4])?;
/// let values = HostTensor::from_vec(vec![1.0f32; 2 * 8 * 8], [2, 8, 8])?;
/// let ok = HostTensor::from_vec(vec![0i32, 1, 1, 0], [2, 2])?;
/// check_block_indices(&dense, &values, &ok, Some(8))?;
/// let bad = HostTensor::from_vec(vec![0i32, 1, 100, -5], [2, 2])?;
/// let e = check_block_indices(&dense, &values, &bad, Some(8)).unwrap_err();
/// assert!(e.to_string().contains("block rows must be in 0..2"), "{e}");
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
pub fn check_block_indices(
    dense: &HostTensor,
    sparse_values: &HostTensor,
    indices: &HostTensor,
    block_size: Option<usize>,
) -> Result<()> {
    let bad = |m: String| -> Error {
        tessel::HostError::InvalidInput {
            what: "block_sparse",
            message: m,
        }
        .into()
    };
    let (ds, vs) = (dense.shape(), sparse_values.shape());
    if ds.len() != 2 {
        return Err(bad(format!(
            "the dense operand must be a K x N matrix, got {}",
            dense.spec()
        )));
    }
    if vs.len() != 3 || indices.shape().first() != Some(&vs[0]) {
        return Err(bad(format!(
            "the values must be [nnz, b, b] and the indices [nnz, 2], got {} and {}",
            sparse_values.spec(),
            indices.spec()
        )));
    }
    let block = (vs[1], vs[2]);
    if let Some(bs) = block_size {
        check_block_size(bs, ds[0], block).map_err(bad)?;
    }
    HostBlockSparse::check_coords(indices, (ds[0], ds[0]), block)
}
