//! Einstein summation over one or two operands, lowered at trace time to
//! `dot_general`, `transpose` and reductions.
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
//! `"ij,jk->ik"`, `"ji"` is `"ji->ij"`).
//!
//! Dtypes: both operands must have one dtype. f32 and f64 dots run at the
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
//! Not supported (each a trace error with the reason): ellipsis broadcasting
//! (`"...ij,...jk"`), more than two operands, broadcasting an extent of 1
//! against another extent. Every malformed equation is a trace error
//! ([`Error::Kernel`] with op `einsum`): a character that is not an ASCII
//! letter (or a misplaced `,` / `->`), a term count different from the
//! operand count, a term whose length is not its operand's rank, a label
//! with two different extents, an output label that no input has, or a
//! label repeated in the output.

use tessel::prelude::*;
use tessel::tensor::trace_error;
use tessel::DotDims;

/// An einsum equation: a `&'static str` such as `"bij,bjk->bik"`.
///
/// A type alias rather than `&'static str` written out because the kernel
/// attributes reject reference-typed parameters by their syntax (to catch
/// `x: &Tensor`); the alias names the same type, a static argument that is
/// part of the compile-cache key.
pub type Subscripts = &'static str;

/// A parsed equation: one label list per input and the output's.
#[derive(Debug)]
struct Equation {
    inputs: Vec<Vec<u8>>,
    output: Vec<u8>,
}

fn labels_of(term: &str, what: &str) -> Result<Vec<u8>, String> {
    term.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                Ok(c as u8)
            } else {
                Err(format!(
                    "bad character {c:?} in {what} {term:?}; labels are ASCII letters, \
                     terms are separated by ',' and the output follows '->'"
                ))
            }
        })
        .collect()
}

/// Parses `eq` for operands of the given shapes and checks it against them.
fn parse(eq: &str, shapes: &[Vec<usize>]) -> Result<Equation, String> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    if eq.contains("...") {
        return Err(
            "ellipsis ('...') broadcasting is not supported; name every axis with a letter".into(),
        );
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let inputs = terms
        .iter()
        .enumerate()
        .map(|(i, t)| labels_of(t, &format!("input term {i}")))
        .collect::<Result<Vec<_>, _>>()?;
    if terms.len() != shapes.len() {
        return Err(format!(
            "{} input terms for {} operand{}",
            terms.len(),
            shapes.len(),
            if shapes.len() == 1 { "" } else { "s" }
        ));
    }
    let mut extent: [Option<usize>; 128] = [None; 128];
    for (i, (labels, shape)) in inputs.iter().zip(shapes).enumerate() {
        if labels.len() != shape.len() {
            return Err(format!(
                "input term {i} {:?} names {} axes, but operand {i} has rank {} (shape {shape:?})",
                terms[i],
                labels.len(),
                shape.len()
            ));
        }
        for (&l, &n) in labels.iter().zip(shape) {
            match extent[l as usize] {
                Some(m) if m != n => {
                    return Err(format!(
                        "label '{}' has extent {m} in one place and {n} in another",
                        l as char
                    ))
                }
                _ => extent[l as usize] = Some(n),
            }
        }
    }
    let count = |l: u8| inputs.iter().flatten().filter(|&&x| x == l).count();
    let output = match rhs {
        Some(r) => {
            let out = labels_of(r, "the output")?;
            for (i, &l) in out.iter().enumerate() {
                if extent[l as usize].is_none() {
                    return Err(format!(
                        "output label '{}' does not occur in any input",
                        l as char
                    ));
                }
                if out[..i].contains(&l) {
                    return Err(format!("output label '{}' is repeated", l as char));
                }
            }
            out
        }
        None => {
            let mut out: Vec<u8> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| count(l) == 1)
                .collect();
            out.sort_unstable();
            out
        }
    };
    Ok(Equation { inputs, output })
}

/// `Some(F32)` for the narrow floats (bf16, f16, fp8), whose reductions
/// and dot accumulation run in f32; `None` for f32, f64 and integers.
fn accumulation(d: DType) -> Option<DType> {
    (d.is_float() && d != F32 && d != F64).then_some(F32)
}

/// Takes the diagonal of every label `x` repeats and sums out the labels
/// `keep` rejects; gives the new operand and its labels. A narrow-float
/// operand that was reduced comes back in f32 (its sums are not rounded
/// before the dot); otherwise the operand is returned unchanged.
#[track_caller]
fn prepare(x: Tensor, labels: &[u8], keep: impl Fn(u8) -> bool) -> (Tensor, Vec<u8>) {
    let dtype = x.dtype();
    let mut labels = labels.to_vec();
    let mut x = x;
    let repeated = (0..labels.len()).any(|i| labels[..i].contains(&labels[i]));
    let summed = labels.iter().any(|&l| !keep(l));
    if !repeated && !summed {
        return (x, labels);
    }
    if let Some(acc) = accumulation(dtype) {
        x = x.cast(acc);
    }
    // Diagonals: for a label at axes p < q, keep x where index p == index q,
    // then sum axis q away.
    while let Some(q) = (0..labels.len()).find(|&q| labels[..q].contains(&labels[q])) {
        let p = labels.iter().position(|&l| l == labels[q]).unwrap_or(q);
        let shape = x.shape();
        let on_diagonal = Tensor::iota(shape.clone(), p, S32).eq(Tensor::iota(shape, q, S32));
        x = on_diagonal.select(x, 0.0).sum(&[q as isize]);
        labels.remove(q);
    }
    let drop: Vec<isize> = (0..labels.len())
        .filter(|&i| !keep(labels[i]))
        .map(|i| i as isize)
        .collect();
    if !drop.is_empty() {
        x = x.sum(&drop);
        labels.retain(|&l| keep(l));
    }
    (x, labels)
}

/// Transposes `x`, whose axes carry `have`, into the order `want` (a
/// permutation of `have`); no op when they agree.
#[track_caller]
fn arrange(x: Tensor, have: &[u8], want: &[u8]) -> Tensor {
    if have == want {
        return x;
    }
    let perm: Vec<usize> = want
        .iter()
        .map(|l| have.iter().position(|h| h == l).unwrap_or(0))
        .collect();
    x.transpose(&perm)
}

/// Shared checks: operand dtypes. `Err` is the poisoned result.
#[track_caller]
fn check_dtypes(op: &str, eq: &str, operands: &[Tensor]) -> Result<DType, Tensor> {
    let d = operands[0].dtype();
    if d.is_pred() {
        return Err(trace_error(
            op,
            operands,
            format!("equation {eq:?}: pred operands cannot be multiplied; cast them first"),
        ));
    }
    if let Some(other) = operands.iter().map(|t| t.dtype()).find(|&o| o != d) {
        return Err(trace_error(
            op,
            operands,
            format!(
                "equation {eq:?}: operands have different dtypes {d} and {other}; cast one first"
            ),
        ));
    }
    Ok(d)
}

#[track_caller]
fn einsum2(eq: &str, a: Tensor, b: Tensor) -> Tensor {
    let dtype = match check_dtypes("einsum", eq, &[a, b]) {
        Ok(d) => d,
        Err(poisoned) => return poisoned,
    };
    let parsed = match parse(eq, &[a.shape(), b.shape()]) {
        Ok(p) => p,
        Err(m) => return trace_error("einsum", &[a, b], format!("equation {eq:?}: {m}")),
    };
    let (la0, lb0, out) = (&parsed.inputs[0], &parsed.inputs[1], &parsed.output);
    let (a, la) = prepare(a, la0, |l| out.contains(&l) || lb0.contains(&l));
    let (b, lb) = prepare(b, lb0, |l| out.contains(&l) || la0.contains(&l));
    let pos = |labels: &[u8], l: u8| labels.iter().position(|&x| x == l).unwrap_or(0);
    let batch: Vec<u8> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && out.contains(l))
        .collect();
    let contract: Vec<u8> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && !out.contains(l))
        .collect();
    let dims = DotDims {
        lhs_batch: batch.iter().map(|&l| pos(&la, l)).collect(),
        rhs_batch: batch.iter().map(|&l| pos(&lb, l)).collect(),
        lhs_contract: contract.iter().map(|&l| pos(&la, l)).collect(),
        rhs_contract: contract.iter().map(|&l| pos(&lb, l)).collect(),
    };
    let mut result: Vec<u8> = batch.clone();
    result.extend(la.iter().filter(|l| !lb.contains(l)));
    result.extend(lb.iter().filter(|l| !la.contains(l)));
    // A reduced narrow operand is f32 now: the dot then runs on f32 operands.
    let (a, b) = if a.dtype() != b.dtype() {
        (a.cast(F32), b.cast(F32))
    } else {
        (a, b)
    };
    let acc = accumulation(a.dtype());
    let y = a.dot_general(b, dims, None, acc).cast(dtype);
    arrange(y, &result, out)
}

#[track_caller]
fn einsum_one(eq: &str, a: Tensor) -> Tensor {
    if let Err(poisoned) = check_dtypes("einsum1", eq, &[a]) {
        return poisoned;
    }
    let parsed = match parse(eq, &[a.shape()]) {
        Ok(p) => p,
        Err(m) => return trace_error("einsum1", &[a], format!("equation {eq:?}: {m}")),
    };
    let out = &parsed.output;
    let (y, labels) = prepare(a, &parsed.inputs[0], |l| out.contains(&l));
    arrange(y, &labels, out).cast(a.dtype())
}

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
    einsum2(equation, a, b)
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
    einsum_one(equation, a)
}
