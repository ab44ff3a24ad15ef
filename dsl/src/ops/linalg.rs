//! Linear algebra: `dot_general` with precision and accumulation type, and
//! numpy-style `matmul` built on it.

use crate::config::Precision;
use crate::dtype::DType;
use crate::error::Location;
use crate::ir::{DotDims, Op};
use crate::ops::elementwise::{broadcast_shapes, broadcast_to_at};
use crate::shape::TensorSpec;
use crate::trace::tensor::Tensor;
use crate::trace::{build, with_state};

fn dot_result(
    a: &TensorSpec,
    b: &TensorSpec,
    d: &DotDims,
    out: DType,
) -> Result<TensorSpec, String> {
    if a.dtype != b.dtype {
        return Err(format!(
            "dot operands have different dtypes {} and {}; cast one first",
            a.dtype, b.dtype
        ));
    }
    if a.dtype.is_pred() {
        return Err("dot is not defined for pred".into());
    }
    if d.lhs_batch.len() != d.rhs_batch.len() || d.lhs_contract.len() != d.rhs_contract.len() {
        return Err("batch and contracting axis lists must pair up".into());
    }
    let in_range = |axes: &[usize], s: &TensorSpec| axes.iter().all(|&x| x < s.rank());
    if !in_range(&d.lhs_batch, a)
        || !in_range(&d.lhs_contract, a)
        || !in_range(&d.rhs_batch, b)
        || !in_range(&d.rhs_contract, b)
    {
        return Err("a batch or contracting axis is out of range".into());
    }
    for (&x, &y) in d.lhs_batch.iter().zip(&d.rhs_batch) {
        if a.shape[x] != b.shape[y] {
            return Err(format!(
                "batch axes differ: lhs axis {x} is {}, rhs axis {y} is {}",
                a.shape[x], b.shape[y]
            ));
        }
    }
    for (&x, &y) in d.lhs_contract.iter().zip(&d.rhs_contract) {
        if a.shape[x] != b.shape[y] {
            return Err(format!(
                "contracting axes differ: lhs axis {x} is {}, rhs axis {y} is {}",
                a.shape[x], b.shape[y]
            ));
        }
    }
    let mut shape: Vec<usize> = d.lhs_batch.iter().map(|&x| a.shape[x]).collect();
    let free = |s: &TensorSpec, batch: &[usize], contract: &[usize]| {
        (0..s.rank())
            .filter(|i| !batch.contains(i) && !contract.contains(i))
            .map(|i| s.shape[i])
            .collect::<Vec<_>>()
    };
    shape.extend(free(a, &d.lhs_batch, &d.lhs_contract));
    shape.extend(free(b, &d.rhs_batch, &d.rhs_contract));
    Ok(TensorSpec::new(shape, out))
}

fn default_precision() -> Precision {
    with_state(|s| s.options.precision).unwrap_or_default()
}

pub(crate) fn dot_general_at(
    a: Tensor,
    b: Tensor,
    dims: DotDims,
    precision: Option<Precision>,
    out: Option<DType>,
    loc: Location,
) -> Tensor {
    let precision = precision.unwrap_or_else(default_precision);
    let at = loc.clone();
    let r = build("dot_general", &[a, b], loc, 1, move |s| {
        let out = out.unwrap_or(s[0].dtype);
        let spec = dot_result(&s[0], &s[1], &dims, out)?;
        Ok((Op::DotGeneral { dims, precision }, vec![spec]))
    })[0];
    crate::ops::check::nan_auto(r, "dot_general", &at);
    r
}

#[track_caller]
fn matmul_at(a: Tensor, b: Tensor, out: Option<DType>, loc: Location) -> Tensor {
    matmul_full(a, b, None, out, loc)
}

#[track_caller]
fn matmul_full(
    a: Tensor,
    b: Tensor,
    precision: Option<Precision>,
    out: Option<DType>,
    loc: Location,
) -> Tensor {
    // The kernel's compute dtype: round wide float operands, accumulate in f32.
    let opts = with_state(|s| s.options).unwrap_or_default();
    if let (Some(d), None) = (opts.dtype, out) {
        let wide = matches!(a.dtype(), DType::F32 | DType::F64)
            && a.dtype() == b.dtype()
            && d != a.dtype();
        if wide && precision.unwrap_or(opts.precision) == Precision::Default && d.is_float() {
            let acc = if opts.accumulate { DType::F32 } else { d };
            let orig = a.dtype();
            let r = matmul_full(a.cast(d), b.cast(d), precision, Some(acc), loc.clone());
            return r.cast(orig);
        }
    }
    let (sa, sb) = (a.spec(), b.spec());
    if sa.rank() == 0 || sb.rank() == 0 {
        let m = "matmul needs operands of rank 1 or more; use * for scalars".to_string();
        return build("matmul", &[a, b], loc, 1, move |_| Err(m))[0];
    }
    // Vectors become matrices and the added axis is dropped afterwards.
    let a2 = if sa.rank() == 1 {
        a.reshape(&[1, sa.shape[0] as isize])
    } else {
        a
    };
    let b2 = if sb.rank() == 1 {
        b.reshape(&[sb.shape[0] as isize, 1])
    } else {
        b
    };
    let (ra, rb) = (a2.rank(), b2.rank());
    if rb == 2 && ra > 2 && a2.shape()[ra - 1] == b2.shape()[0] {
        // `[..., M, K] x [K, N]` (a layer's input times its weight): the
        // leading axes folded into the rows of one `[R, K] x [K, N]` GEMM,
        // as `jnp.matmul` ends up computing it. The weight is not broadcast
        // over the batch axes (its gradient is one GEMM, not a batched dot
        // and a sum), and XLA's CPU dot emitter gets the canonical 2-D form.
        let lead = &a2.shape()[..ra - 1];
        let k = a2.shape()[ra - 1] as isize;
        let rows: isize = lead.iter().product::<usize>() as isize;
        let mut shape: Vec<isize> = lead.iter().map(|&d| d as isize).collect();
        shape.push(b2.shape()[1] as isize);
        let dims = DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![1],
            rhs_contract: vec![0],
        };
        let r = dot_general_at(a2.reshape(&[rows, k]), b2, dims, precision, out, loc);
        let r = r.reshape(&shape);
        return if sb.rank() == 1 { r.squeeze(-1) } else { r };
    }
    let (ba, bb) = (&a2.shape()[..ra - 2], &b2.shape()[..rb - 2]);
    let Some(batch) = broadcast_shapes(ba, bb) else {
        let m = format!("batch shapes {ba:?} and {bb:?} do not broadcast");
        return build("matmul", &[a, b], loc, 1, move |_| Err(m))[0];
    };
    let grow = |t: Tensor, r: usize| {
        let s = t.shape();
        let mut shape = batch.clone();
        shape.extend_from_slice(&s[r - 2..]);
        broadcast_to_at(t, &shape, &loc)
    };
    let (a3, b3) = (grow(a2, ra), grow(b2, rb));
    let nb = batch.len();
    let dims = DotDims {
        lhs_batch: (0..nb).collect(),
        rhs_batch: (0..nb).collect(),
        lhs_contract: vec![nb + 1],
        rhs_contract: vec![nb],
    };
    let r = dot_general_at(a3, b3, dims, precision, out, loc);
    match (sa.rank(), sb.rank()) {
        (1, 1) => r.reshape(&[]),
        (1, _) => r.squeeze(-2),
        (_, 1) => r.squeeze(-1),
        _ => r,
    }
}

impl Tensor {
    /// XLA `dot_general`: contracts `dims.lhs_contract` with `dims.rhs_contract`
    /// and pairs the batch axes. The result is `[batch..., lhs free..., rhs free...]`
    /// in `out` (the operands' dtype when `None`), at `precision` (the kernel's
    /// when `None`).
    #[track_caller]
    pub fn dot_general(
        self,
        rhs: Tensor,
        dims: DotDims,
        precision: Option<Precision>,
        out: Option<DType>,
    ) -> Tensor {
        dot_general_at(self, rhs, dims, precision, out, Location::caller())
    }

    /// numpy `matmul`: `[..., M, K] x [..., K, N] -> [..., M, N]` with batch
    /// axes broadcast; a rank-1 operand is a vector.
    #[track_caller]
    pub fn matmul(self, rhs: Tensor) -> Tensor {
        matmul_at(self, rhs, None, Location::caller())
    }

    /// `matmul` at a chosen `precision` (the kernel's when `None`) accumulating
    /// and returning `acc` elements (the operands' dtype when `None`; an
    /// explicit `acc` also skips the kernel's compute-dtype rounding).
    #[track_caller]
    pub fn matmul_with(
        self,
        rhs: Tensor,
        precision: Option<Precision>,
        acc: Option<DType>,
    ) -> Tensor {
        matmul_full(self, rhs, precision, acc, Location::caller())
    }

    /// `matmul` accumulating and returning `acc` elements (for example bf16
    /// inputs with an f32 result), XLA's `preferred_element_type`.
    #[track_caller]
    pub fn matmul_acc(self, rhs: Tensor, acc: DType) -> Tensor {
        matmul_at(self, rhs, Some(acc), Location::caller())
    }
}
