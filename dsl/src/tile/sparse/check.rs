//! The checks of block-sparse layouts: block shapes against the tiling
//! rule, extents against what the kernels address, coordinates against the
//! block grid. Every error names what is wrong and the valid range.

use crate::error::{HostError, Result};
use crate::host::HostTensor;

/// A host-data error about a block-sparse matrix.
pub(super) fn sparse_err(message: String) -> crate::Error {
    HostError::InvalidInput {
        what: "block-sparse matrix",
        message,
    }
    .into()
}

/// The largest dense extent of a block-sparse matrix: the kernels compute
/// block starts (`coordinate · block edge`) and coordinates in s32, as
/// XLA's dynamic slices take them.
pub const MAX_SPARSE_EXTENT: usize = i32::MAX as usize;

/// Why a block of `edge` rows or columns (`what`: "height" or "width")
/// cannot tile an axis of `extent` (`unit`: "rows" or "columns"), if it
/// cannot: an edge is at least 1 and a multiple of 8 (8-row sublanes), or at
/// least the whole extent (one block covers the axis) — the rule of
/// `block_size` in the kernels' block reads — and at most
/// [`MAX_SPARSE_EXTENT`].
fn block_edge_problem(what: &str, unit: &str, edge: usize, extent: usize) -> Option<String> {
    if edge == 0 {
        return Some(format!("the block {what} must be at least 1"));
    }
    if edge > MAX_SPARSE_EXTENT {
        return Some(format!(
            "the block {what} ({edge}) is above the limit of {MAX_SPARSE_EXTENT} (2^31 - 1)"
        ));
    }
    if !edge.is_multiple_of(8) && edge < extent {
        return Some(format!(
            "the block {what} ({edge}) is not a multiple of 8 and smaller than the matrix's \
             {extent} {unit} (block sizes must be multiples of 8, or cover the whole axis)"
        ));
    }
    None
}

/// Checks a dense shape and block shape: extents within
/// [`MAX_SPARSE_EXTENT`], block edges by [`block_edge_problem`].
pub(super) fn check_layout(shape: (usize, usize), block: (usize, usize)) -> Result<()> {
    if shape.0 > MAX_SPARSE_EXTENT || shape.1 > MAX_SPARSE_EXTENT {
        return Err(sparse_err(format!(
            "a {}x{} matrix is larger than block-sparse kernels address: each extent must be at \
             most {MAX_SPARSE_EXTENT} (2^31 - 1)",
            shape.0, shape.1
        )));
    }
    let problem = block_edge_problem("height", "rows", block.0, shape.0)
        .or_else(|| block_edge_problem("width", "columns", block.1, shape.1));
    match problem {
        Some(m) => Err(sparse_err(format!(
            "{m}; got {}x{} blocks for a {}x{} matrix",
            block.0, block.1, shape.0, shape.1
        ))),
        None => Ok(()),
    }
}

/// Checks a layout and its coordinates: the layout by [`check_layout`],
/// every coordinate inside the block grid, no block twice. The error names
/// the first bad stored block, its coordinate and the valid range.
pub(super) fn check_coordinates(
    coords: impl IntoIterator<Item = (i64, i64)>,
    shape: (usize, usize),
    block: (usize, usize),
) -> Result<()> {
    check_layout(shape, block)?;
    let grid = (shape.0.div_ceil(block.0), shape.1.div_ceil(block.1));
    let inside = |c: i64, n: usize| c >= 0 && (c as u64) < n as u64;
    let mut seen = std::collections::HashMap::new();
    for (index, (r, c)) in coords.into_iter().enumerate() {
        if !(inside(r, grid.0) && inside(c, grid.1)) {
            let sign = if r < 0 || c < 0 {
                " (coordinates are non-negative)"
            } else {
                ""
            };
            return Err(sparse_err(format!(
                "stored block {index} has coordinate ({r}, {c}), outside the {}x{} block grid of \
                 a {}x{} matrix: block rows must be in 0..{}, block columns in 0..{}{sign}",
                grid.0, grid.1, shape.0, shape.1, grid.0, grid.1
            )));
        }
        if let Some(first) = seen.insert((r, c), index) {
            return Err(sparse_err(format!(
                "block ({r}, {c}) is stored twice (stored blocks {first} and {index})"
            )));
        }
    }
    Ok(())
}

/// The block shape of stored values `[nnz, block_rows, block_cols]`.
pub(super) fn values_block(values: &HostTensor) -> Result<(usize, usize)> {
    match *values.shape() {
        [_, b0, b1] if b0 > 0 && b1 > 0 => Ok((b0, b1)),
        _ => Err(sparse_err(format!(
            "values must be [nnz, block_rows, block_cols], got {}",
            values.spec()
        ))),
    }
}
