//! Einstein summation over any number of operands, lowered at trace time
//! to `dot_general`, `transpose` and reductions: [`einsum`](fn@einsum) (two
//! operands), [`einsum1`](fn@einsum1) (one) and [`einsum_n`](fn@einsum_n)
//! (a `Vec` of any length, contracted two at a time in the order
//! [`einsum_path`] reports).
//!
//! The equation is parsed while tracing (it is a static argument): `"bij,bjk->bik"`
//! names each operand's axes with one ASCII letter per axis, and the labels
//! after `->` the result's axes in order. Lowering, per label:
//!
//! - in both operands and the output: a batch axis of the `dot_general`;
//! - in both operands, not the output: contracted by the `dot_general`;
//! - in one operand and the output: a free axis of the `dot_general`;
//! - in one operand only: summed out of that operand before the dot;
//! - twice in one operand (`"ii->i"`, `"ii->"`): that operand's diagonal
//!   is taken first (a `select` against an `iota` mask, then a sum; exact,
//!   also for infinities off the diagonal);
//!
//! and a final `transpose` puts the axes in the output's order (none is
//! emitted when they already are). Without `->` the output is, as in numpy,
//! every label that occurs exactly once, in alphabetical order (`"ij,jk"` is
//! `"ij,jk->ik"`, `"ji"` is `"ji->ij"`), after the ellipsis axes.
//!
//! **Ellipsis**: one `...` per term stands for the axes its letters leave,
//! aligned on the right across operands and broadcast as numpy does (an
//! extent of 1 meets any other); `...` in the output places them, and
//! ellipsis axes an explicit output leaves out are summed.
//!
//! **Several operands** are contracted two at a time (each pair as above),
//! in the order of least cost over every pairwise order for up to
//! [`OPTIMAL_UP_TO`] operands and greedily past that (opt_einsum's
//! `optimal` and `greedy`); [`einsum_path`] reports the order, its cost
//! and its largest intermediate without tracing anything. Narrow floats
//! stay in f32 between the steps and are rounded once, at the end.
//!
//! Dtypes: all operands must have one dtype. f32 and f64 dots run at the
//! kernel's precision, as `dot_general` does: under `#[tpu_kernel]`'s
//! default precision a TPU multiplies f32 operands in one bf16 pass (use
//! `einsum::run_with(&einsum::CONFIG.with_precision(Precision::Highest), ..)`
//! for full f32); unlike `matmul`, einsum does not itself round f32
//! operands to the kernel's `dtype`, so the CPU backend computes in f32. bf16, f16 and fp8 operands are
//! multiplied with f32 accumulation (`preferred_element_type`); reductions
//! taken before the dot are summed in f32, and an operand so reduced enters
//! the dot in f32 (the other operand is converted to match), so the result
//! is rounded to the operands' dtype once, at the end. Integer operands
//! accumulate in their own type.
//!
//! Not supported (a trace error with the reason): broadcasting an extent of
//! 1 against another extent on a lettered axis (only ellipsis axes
//! broadcast). Every malformed equation is a trace error
//! ([`Error::Kernel`] with op `einsum`): a character that is not an ASCII
//! letter (or a misplaced `,` / `->`), a term count different from the
//! operand count, a term whose length is not its operand's rank, a label
//! with two different extents, an output label that no input has, or a
//! label repeated in the output.

mod contract;
mod parse;
mod path;

use tessel::prelude::*;

use self::contract::einsum_traced;
pub use self::path::{einsum_path, EinsumPath, PathStrategy, OPTIMAL_UP_TO};

/// An einsum equation: a `&'static str` such as `"bij,bjk->bik"`.
///
/// A type alias rather than `&'static str` written out because the kernel
/// attributes reject reference-typed parameters by their syntax (to catch
/// `x: &Tensor`); the alias names the same type, a static argument that is
/// part of the compile-cache key.
pub type Subscripts = &'static str;

/// Einstein summation of two operands, `equation` such as `"bij,bjk->bik"`
/// (see the [module documentation](self) for the rules, the lowering and
/// what is unsupported).
///
/// Contractions (`"ij,jk->ik"`), batched products (`"bhqd,bhkd->bhqk"`),
/// outer products (`"i,j->ij"`), elementwise products with reductions
/// (`"ij,ij->i"`), and diagonals within an operand (`"ii,i->i"`) all lower
/// to one `dot_general` plus, where needed, a transpose of its result and
/// reductions or diagonal masks of the operands. A malformed equation is a
/// trace error.
///
/// ```
/// use tessel_kernels::einsum::einsum;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let a = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
/// let b = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], [3, 2])?;
/// let c = einsum::run(&dev, "ij,jk->ki", &a, &b)?; // (a · b)ᵀ
/// assert_eq!(c.shape(), &[2, 2]);
/// assert_eq!(c.to_vec::<f32>()?, vec![4.0, 10.0, 5.0, 11.0]);
/// let err = einsum::run(&dev, "ij,jk->iz", &a, &b).unwrap_err();
/// assert!(err.to_string().contains("output label 'z' does not occur in any input"));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn einsum(equation: Subscripts, a: Tensor, b: Tensor) -> Tensor {
    einsum_traced("einsum", equation, &[a, b])
}

/// Einstein summation of one operand: transposes (`"ij->ji"`), reductions
/// (`"ijk->j"`, `"ij->"`), diagonals (`"ii->i"`) and traces (`"ii->"`).
/// Same rules as [`einsum`](fn@einsum), with one input term.
///
/// ```
/// use tessel_kernels::einsum::einsum1;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let a = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
/// assert_eq!(einsum1::run(&dev, "ij->ji", &a)?.to_vec::<f32>()?, vec![1.0, 3.0, 2.0, 4.0]);
/// assert_eq!(einsum1::run(&dev, "ii->", &a)?.to_vec::<f32>()?, vec![5.0]); // the trace
/// assert_eq!(einsum1::run(&dev, "ij->j", &a)?.to_vec::<f32>()?, vec![4.0, 6.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn einsum1(equation: Subscripts, a: Tensor) -> Tensor {
    einsum_traced("einsum1", equation, &[a])
}

/// Einstein summation of any number of operands (`"ij,jk,kl->il"`,
/// `"...ij,...jk->...ik"`), contracted two at a time in the order of
/// [`einsum_path`]. Same rules as [`einsum`](fn@einsum), one input term per
/// operand.
///
/// ```
/// use tessel_kernels::einsum::einsum_n;
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let a = HostTensor::from_vec(vec![1.0f32, 2.0], [1, 2])?;
/// let b = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2])?;
/// let c = HostTensor::from_vec(vec![3.0f32, 4.0], [2, 1])?;
/// // a · b · c, and a batch of two products broadcast over an ellipsis.
/// let y = einsum_n::run(&dev, "ij,jk,kl->il", &vec![a.clone(), b.clone(), c])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![11.0]);
/// let batch = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 1, 2])?;
/// let z = einsum_n::run(&dev, "...ij,jk->...ik", &vec![batch, b])?;
/// assert_eq!(z.shape(), &[2, 1, 2]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn einsum_n(equation: Subscripts, operands: Vec<Tensor>) -> Tensor {
    einsum_traced("einsum_n", equation, &operands)
}
