//! A block-sparse matmul written with `#[sparse_kernel]`: the loop visits
//! only the stored blocks. Static layouts bake the coordinates into the
//! program; dynamic ones pass them as a tensor, so one program serves every
//! pattern with the same number of blocks.
use tessel::prelude::*;

/// `a · b` for a block-sparse `a`, one traced loop over its stored blocks.
#[sparse_kernel(block_size = 64)]
fn sparse_matmul(a: BlockSparse, b: Tensor) -> Tensor {
    let (b0, b1) = a.block_shape();
    let mut out = Tensor::zeros([a.rows(), b.dim(1)], b.dtype());
    for i in 0..a.block_count() {
        let blk = a.block_at(i);
        let rows = out.block_sized(0, blk.row, b0, 0.0);
        out = out.set_block(0, blk.row, rows + blk.values.matmul(b.block_sized(0, blk.col, b1, 0.0)));
    }
    out
}

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let n = 256;
    // A banded matrix: only blocks on and next to the diagonal are non-zero.
    let dense = HostTensor::from_fn(TensorSpec::new([n, n], F32), |i| {
        let (r, c) = (i / n, i % n);
        if (r / 64).abs_diff(c / 64) <= 1 {
            ((r + c) % 9) as f64 / 9.0
        } else {
            0.0
        }
    });
    let a = HostBlockSparse::from_dense(&dense, (64, 64))?;
    let b = HostTensor::from_fn(TensorSpec::new([n, 8], F32), |i| (i % 4) as f64);
    let y_static = sparse_matmul::run(&dev, &a, &b)?;
    let y_dynamic = sparse_matmul::run(&dev, &a.clone().into_dynamic(), &b)?;
    println!("{} of {} blocks stored", a.nnz(), (n / 64) * (n / 64));
    println!("static and dynamic layouts agree: {}", y_static == y_dynamic);
    println!("first row: {:?}", &y_static.to_vec::<f32>()?[..8]);
    Ok(())
}
