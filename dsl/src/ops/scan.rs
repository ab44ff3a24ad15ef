//! `scan`: a loop over the leading axis of its inputs that stacks what each
//! step returns (JAX's `lax.scan`), as one XLA `while`.

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::carry::{flat, Carry};
use crate::ops::constant::full_at;
use crate::ops::control::WhileBuilder;
use crate::trace::tensor::{fail, Tensor};

/// How [`scan_with`] runs: the number of steps when there are no `xs`, and
/// the direction.
///
/// ```
/// use tessel_dsl::ops::scan::ScanOptions;
/// let o = ScanOptions::new().length(8).reverse(true);
/// assert_eq!(o.steps(), Some(8));
/// assert!(o.is_reverse());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanOptions {
    length: Option<usize>,
    reverse: bool,
}

impl ScanOptions {
    /// Forward, with the length taken from the `xs`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of steps: needed when `xs` holds no tensor, and checked
    /// against their leading extent when it does.
    pub fn length(mut self, n: usize) -> Self {
        self.length = Some(n);
        self
    }

    /// Runs the steps last to first: the first step reads the last row of
    /// each of the `xs` and writes the last row of the stacked outputs
    /// (JAX's `reverse=True`).
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// The length set with [`ScanOptions::length`].
    pub fn steps(&self) -> Option<usize> {
        self.length
    }

    /// Whether the steps run last to first.
    pub fn is_reverse(&self) -> bool {
        self.reverse
    }
}

/// Runs `body(carry, x)` once per row `x` of `xs` (each tensor of `xs`
/// sliced along its first axis), threading `carry` from step to step, and
/// returns the final carry with the per-step outputs `y` stacked along a
/// new first axis: JAX's `lax.scan(body, init, xs)`.
///
/// `xs` and the outputs are any [`Carry`] (a tensor, or a tuple, array or
/// `Vec` of them; `()` for none). Every tensor of `xs` must have the same
/// first extent, the number of steps; with no `xs`, give the length with
/// [`scan_with`]. `body` may use any tensor of the enclosing code. The
/// carry must keep its shapes and dtypes from step to step.
///
/// The loop is one XLA `while`, so a long scan compiles as fast as a short
/// one. Its gradient runs the steps backwards and keeps one carry per step
/// (not the stacked outputs): memory linear in the number of steps.
///
/// ```
/// use tessel_dsl::{kernel::KernelConfig, ops::scan::scan, trace, Tensor, TensorSpec, F32};
/// // Running sums of the rows of x: ys[t] = x[0] + ... + x[t].
/// let params = [("x".into(), TensorSpec::new([5, 3], F32))];
/// let g = trace("cumsum_rows", &params, KernelConfig::default(), |a| {
///     let zero = Tensor::zeros(vec![3], F32);
///     let (total, ys) = scan(zero, a[0], |acc, x: Tensor| {
///         let acc = acc + x;
///         (acc, acc)
///     });
///     (total, ys)
/// })?;
/// assert_eq!(g.output_specs()[1], TensorSpec::new([5, 3], F32));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn scan<C: Carry, X: Carry, Y: Carry>(
    init: C,
    xs: X,
    body: impl FnOnce(C, X) -> (C, Y),
) -> (C, Y) {
    scan_at(init, xs, ScanOptions::new(), body, Location::caller())
}

/// [`scan`] with options: a length for a scan without `xs`, or the steps
/// run last to first.
///
/// ```
/// use tessel_dsl::ops::scan::{scan_with, ScanOptions};
/// use tessel_dsl::{kernel::KernelConfig, trace, Tensor, TensorSpec, F32, S32};
/// // Powers of two, with no xs: ys[t] = 2^(t+1).
/// let g = trace("powers", &[], KernelConfig::default(), |_| {
///     let one = Tensor::scalar(1.0, F32);
///     let (_, ys) = scan_with(one, (), ScanOptions::new().length(4), |p, ()| (p * 2.0, p * 2.0));
///     ys
/// })?;
/// assert_eq!(g.output_specs()[0], TensorSpec::new([4], F32));
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[track_caller]
pub fn scan_with<C: Carry, X: Carry, Y: Carry>(
    init: C,
    xs: X,
    options: ScanOptions,
    body: impl FnOnce(C, X) -> (C, Y),
) -> (C, Y) {
    scan_at(init, xs, options, body, Location::caller())
}

/// The number of steps, or why `xs` and `options` do not give one.
fn steps(xs: &[Tensor], options: &ScanOptions) -> Result<usize, String> {
    let mut n = options.length;
    for (k, x) in xs.iter().enumerate() {
        let spec = x.spec();
        let Some(&first) = spec.shape.first() else {
            return Err(format!(
                "xs tensor {k} is a scalar ({spec}); scan slices its xs along their first axis"
            ));
        };
        match n {
            Some(m) if m != first => {
                let what = match options.length {
                    Some(_) => "the length".to_string(),
                    None => "xs tensor 0".to_string(),
                };
                return Err(format!(
                    "xs tensor {k} ({spec}) has {first} rows but {what} gives {m} steps"
                ));
            }
            _ => n = Some(first),
        }
    }
    n.ok_or_else(|| {
        "scan has no xs to take its length from: give one with scan_with and \
         ScanOptions::new().length(n)"
            .to_string()
    })
}

/// Records a kernel error if the body changed the carry's types.
fn check_carry(before: &[Tensor], after: &[Tensor], loc: &Location) {
    if before.len() != after.len() {
        let m = format!(
            "the body returned {} carried tensors for {}",
            after.len(),
            before.len()
        );
        return fail("scan", after, m, loc);
    }
    for (k, (a, b)) in before.iter().zip(after).enumerate() {
        let (want, got) = (a.spec(), b.spec());
        if want != got {
            let m = format!(
                "carry {k} is {got} but must be {want}: the carry keeps its shapes and dtypes \
                 from step to step"
            );
            return fail("scan", &[*b], m, loc);
        }
    }
}

/// Row `at` of `x` (rank one less).
#[track_caller]
fn row(x: Tensor, at: Tensor) -> Tensor {
    let spec = x.spec();
    let mut starts = vec![at];
    starts.extend((1..spec.rank()).map(|_| Tensor::scalar(0.0, DType::S32)));
    let mut sizes = spec.shape.clone();
    sizes[0] = 1;
    let rest: Vec<isize> = spec.shape[1..].iter().map(|&d| d as isize).collect();
    x.dynamic_slice(&starts, &sizes).reshape(&rest)
}

#[track_caller]
fn scan_at<C: Carry, X: Carry, Y: Carry>(
    init: C,
    xs: X,
    options: ScanOptions,
    body: impl FnOnce(C, X) -> (C, Y),
    loc: Location,
) -> (C, Y) {
    let xt = flat(&xs);
    let n = match steps(&xt, &options) {
        Ok(n) => n,
        Err(m) => {
            fail("scan", &xt, m, &loc);
            return body(init, xs);
        }
    };
    let s32 = |v: usize| full_at(Vec::new(), v as f64, DType::S32, loc.clone());
    let mut inits = vec![s32(0)];
    inits.extend(flat(&init));
    let k = inits.len() - 1;
    let Some((mut b, cargs)) = WhileBuilder::begin(inits, loc.clone()) else {
        return body(init, xs);
    };
    b.set_trip_count(n);
    let bargs = b.cond_done(cargs[0].lt(s32(n)));
    let t = bargs[0];
    let at = match options.reverse {
        true => s32(n.saturating_sub(1)) - t,
        false => t,
    };
    // With no step the body is still traced (for its types), on zeros:
    // a row of an empty tensor cannot be sliced.
    let x = xs.rebuild(&mut xt.iter().map(|&x| match n {
        0 => {
            let sp = x.spec();
            full_at(sp.shape[1..].to_vec(), 0.0, sp.dtype, loc.clone())
        }
        _ => row(x, at),
    }));
    let (next, y) = body(init.rebuild(&mut bargs[1..].iter().copied()), x);
    check_carry(&bargs[1..], &flat(&next), &loc);
    let mut outs = vec![t + 1];
    outs.extend(flat(&next));
    let first = outs.len();
    for v in flat(&y) {
        let spec = v.spec();
        let mut shape = vec![n];
        shape.extend(&spec.shape);
        let Some(buf) = b.add_carry(|| full_at(shape, 0.0, spec.dtype, loc.clone())) else {
            break;
        };
        outs.push(match n {
            0 => buf,
            _ => {
                let mut starts = vec![at];
                starts.extend((0..spec.rank()).map(|_| s32(0)));
                buf.dynamic_update_slice(v.expand_dims(0), &starts)
            }
        });
    }
    if n > 0 {
        b.set_stacked_from(first);
    }
    let r = b.finish(outs);
    let carry = init.rebuild(&mut r.iter().skip(1).take(k).copied());
    let ys = y.rebuild(&mut r.iter().skip(1 + k).copied());
    (carry, ys)
}
