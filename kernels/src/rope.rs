//! Rotary position embeddings (RoPE), from a precomputed cos/sin table or
//! at explicit per-row positions.
//!
//! Feature pair `i` of the row at position `p` is rotated by the angle
//! `p · base^(-2i/R)`, where `R` is the rotary dimension (the head
//! dimension `D` unless only a prefix rotates, below):
//! `(a, b) ↦ (a·cos − b·sin, a·sin + b·cos)`. [`RopeLayout`] says which
//! features form pair `i`: `(2i, 2i+1)` (the original RoFormer/GPT-J
//! layout) or `(i, i + R/2)` (the GPT-NeoX/Llama layout).
//!
//! The table lives on the host: [`RopeTable::new`] computes
//! `cos`/`sin` of every angle in f64 (so long contexts keep full accuracy;
//! an in-trace f32 `iota · inv_freq` loses about 1e-3 rad at position 8192),
//! rounds them to f32 `[max_len, R/2]` [`HostTensor`]s, and caches the
//! result process-wide per `(max_len, R, base)`: every later call with the
//! same three values returns the same `Arc` without recomputing. The
//! kernels take the two tables as ordinary tensor arguments (pass
//! `table.cos()` and `table.sin()` to `run`, or upload them once with
//! `Device::to_device` and use `call`), so one compiled program serves every
//! table of the same shape.
//!
//! Inputs are `[.., S, D]`: the second-to-last axis is the sequence
//! (positions `offset, offset + 1, ..`), the last the features. Leading axes
//! (batch, heads) are broadcast over. If the table's `R` is smaller than
//! `D`, only the first `R` features rotate and the rest pass through
//! unchanged (partial rotary embeddings, GPT-NeoX's `rotary_pct`). The
//! rotation runs in f32 for bf16, f16 and fp8 inputs (f64 for f64) and
//! the result has the input's dtype.
//!
//! - [`rope`](fn@rope) takes a static `offset: usize` (prefill, training): positions
//!   past the table's end are a trace error.
//! - [`rope_at`](fn@rope_at) takes the offset as a traced integer scalar (decoding: one
//!   program for every step). Like every XLA dynamic slice, the start is
//!   clamped so that the `S` rows fit inside the table; keep
//!   `offset + S <= max_len`.
//! - [`rope_positions`](fn@rope_positions) takes one traced position per row
//!   (ragged serving batches, per-sequence decode positions) and forms the
//!   angles in the program, without a table.
//! - [`rope_at_positions`](fn@rope_at_positions) takes one traced position
//!   per row and reads the table's rows there: the table's accuracy, and no
//!   `sin`/`cos` in the program (the faster choice for a decode step).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tessel::ops::check::first_check;
use tessel::prelude::*;
use tessel::tensor::trace_error;
use tessel::HostError;

use crate::norm::compute_dtype;
use crate::serving::metadata::{element, MetadataChecks};

/// Which features of a `[.., S, D]` row form the rotated pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Pairs `(2i, 2i + 1)`: adjacent features (RoFormer, GPT-J, Mesh
    /// TensorFlow).
    Interleaved,
    /// Pairs `(i, i + R/2)`: the first half rotates against the second
    /// (GPT-NeoX, Llama, Hugging Face's `rotate_half`).
    HalfSplit,
}

tessel::static_arg!(RopeLayout);

/// The rotation frequencies `base^(-2i/dim)` of the `dim / 2` feature
/// pairs, in f64.
fn inverse_frequencies(dim: usize, base: f64) -> Vec<f64> {
    (0..dim / 2)
        .map(|i| base.powf(-2.0 * i as f64 / dim as f64))
        .collect()
}

/// What is wrong with a frequency `base`, if anything.
fn base_problem(base: f64) -> Option<String> {
    (!(base.is_finite() && base > 0.0))
        .then(|| format!("base must be finite and positive, got {base}"))
}

/// Host-side cos/sin tables for rotary embeddings: `f32[max_len, dim / 2]`
/// each, `cos[p, i] = cos(p · base^(-2i/dim))` computed in f64.
///
/// Built once per `(max_len, dim, base)` per process; see [`RopeTable::new`].
#[derive(Debug)]
pub struct RopeTable {
    max_len: usize,
    dim: usize,
    base: f64,
    cos: HostTensor,
    sin: HostTensor,
}

type TableKey = (usize, usize, u64);

fn cache() -> &'static Mutex<HashMap<TableKey, Arc<RopeTable>>> {
    static CACHE: OnceLock<Mutex<HashMap<TableKey, Arc<RopeTable>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn bad_table(message: String) -> Error {
    HostError::InvalidInput {
        what: "RopeTable",
        message,
    }
    .into()
}

impl RopeTable {
    /// The table for positions `0..max_len` and rotary dimension `dim`
    /// (even: `dim / 2` frequencies) with frequency base `base` (10 000 in
    /// the original paper and Llama 2, 500 000 in Llama 3).
    ///
    /// The first call for a `(max_len, dim, base)` computes the table; every
    /// later call returns the same `Arc` (a process-wide cache, which keeps
    /// each table for the life of the process). An odd or zero `dim`, a zero
    /// `max_len`, a `base` that is not finite and positive, or a table of
    /// more than 2³¹ elements is an [`Error::Host`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessel_kernels::rope::RopeTable;
    /// let t = RopeTable::new(2048, 128, 10_000.0)?;
    /// assert_eq!(t.cos().shape(), &[2048, 64]);
    /// assert!(Arc::ptr_eq(&t, &RopeTable::new(2048, 128, 10_000.0)?)); // built once
    /// assert!(RopeTable::new(2048, 127, 10_000.0).is_err());
    /// # Ok::<(), tessel_dsl::Error>(())
    /// ```
    pub fn new(max_len: usize, dim: usize, base: f64) -> Result<Arc<RopeTable>> {
        if dim == 0 || !dim.is_multiple_of(2) {
            return Err(bad_table(format!(
                "the rotary dimension must be even and positive, got {dim}"
            )));
        }
        if max_len == 0 {
            return Err(bad_table("max_len must be positive".into()));
        }
        if let Some(problem) = base_problem(base) {
            return Err(bad_table(problem));
        }
        if max_len
            .checked_mul(dim / 2)
            .is_none_or(|n| n > (1usize << 31))
        {
            return Err(bad_table(format!(
                "a table of {max_len} × {} entries is too large",
                dim / 2
            )));
        }
        let key = (max_len, dim, base.to_bits());
        let mut tables = cache().lock().unwrap_or_else(|e| e.into_inner());
        let table = tables
            .entry(key)
            .or_insert_with(|| Arc::new(RopeTable::compute(max_len, dim, base)));
        Ok(Arc::clone(table))
    }

    fn compute(max_len: usize, dim: usize, base: f64) -> RopeTable {
        let half = dim / 2;
        let inv_freq = inverse_frequencies(dim, base);
        let spec = TensorSpec::new([max_len, half], F32);
        let angle = |k: usize| (k / half) as f64 * inv_freq[k % half];
        RopeTable {
            max_len,
            dim,
            base,
            cos: HostTensor::from_fn(spec.clone(), |k| angle(k).cos()),
            sin: HostTensor::from_fn(spec, |k| angle(k).sin()),
        }
    }

    /// Number of positions (rows).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The rotary dimension `R` (twice the number of columns).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The frequency base.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// `cos` of every angle: `f32[max_len, dim / 2]`.
    pub fn cos(&self) -> &HostTensor {
        &self.cos
    }

    /// `sin` of every angle: `f32[max_len, dim / 2]`.
    pub fn sin(&self) -> &HostTensor {
        &self.sin
    }
}

/// Checks `x` and the tables; gives the compute dtype, or the poisoned
/// result of a failed check. `consecutive`: `x`'s rows are consecutive
/// positions (a slice of the tables), so there must be no more of them
/// than the tables have rows.
#[track_caller]
fn check(
    op: &str,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    consecutive: bool,
) -> Result<DType, Tensor> {
    let (xs, cs, ss) = (x.spec(), cos.spec(), sin.spec());
    if xs.rank() < 2 {
        return Err(trace_error(
            op,
            &[x],
            format!("needs an input [.., S, D] of rank 2 or more, got {xs}"),
        ));
    }
    let Some(cd) = compute_dtype(xs.dtype) else {
        return Err(trace_error(
            op,
            &[x],
            format!("needs a float input, got {}", xs.dtype),
        ));
    };
    let d = xs.shape[xs.rank() - 1];
    if cs.rank() != 2 || cs != ss || !cs.dtype.is_float() {
        return Err(trace_error(
            op,
            &[x, cos, sin],
            format!("cos and sin must be float tables [max_len, R/2] of one shape and dtype, got {cs} and {ss}"),
        ));
    }
    if cs.shape[1] == 0 || 2 * cs.shape[1] > d {
        return Err(trace_error(
            op,
            &[x, cos, sin],
            format!(
                "the tables rotate {} features, but x has {d} (the table's dimension must be in 2..={d})",
                2 * cs.shape[1]
            ),
        ));
    }
    let s = xs.shape[xs.rank() - 2];
    if consecutive && s > cs.shape[0] {
        return Err(trace_error(
            op,
            &[x, cos, sin],
            format!(
                "the sequence has {s} positions but the tables only {}",
                cs.shape[0]
            ),
        ));
    }
    Ok(cd)
}

/// Rotates `x` (any float dtype) by angles whose cosines and sines are `c`,
/// `s`: table rows `[S, R/2]`, or any shape `[.., R/2]` that broadcasts
/// against `x`'s leading axes.
#[track_caller]
fn rotate(x: Tensor, c: Tensor, s: Tensor, layout: RopeLayout, cd: DType) -> Tensor {
    let xf = x.cast(cd);
    let (c, s) = (c.cast(cd), s.cast(cd));
    let d = xf.dim(-1);
    let h = c.dim(-1);
    let r = 2 * h;
    let xr = if r < d { xf.slice_axis(-1, 0, r) } else { xf };
    let rotated = match layout {
        RopeLayout::HalfSplit => {
            let (a, b) = (xr.slice_axis(-1, 0, h), xr.slice_axis(-1, h, r));
            concat(&[a * c - b * s, b * c + a * s], -1)
        }
        RopeLayout::Interleaved => {
            let lead: Vec<isize> = xr.shape().iter().map(|&n| n as isize).collect();
            let mut pairs = lead[..lead.len() - 1].to_vec();
            pairs.extend([h as isize, 2]);
            let xp = xr.reshape(&pairs);
            let (a, b) = (xp.slice_axis(-1, 0, 1), xp.slice_axis(-1, 1, 2));
            // The angles gain a trailing axis of one: `[.., R/2, 1]`.
            let mut angles: Vec<isize> = c.shape().iter().map(|&n| n as isize).collect();
            angles.push(1);
            let (c, s) = (c.reshape(&angles), s.reshape(&angles));
            concat(&[a * c - b * s, b * c + a * s], -1).reshape(&lead)
        }
    };
    let out = if r < d {
        concat(&[rotated, xf.slice_axis(-1, r, d)], -1)
    } else {
        rotated
    };
    out.cast(x.dtype())
}

#[track_caller]
fn rope_static(x: Tensor, cos: Tensor, sin: Tensor, offset: usize, layout: RopeLayout) -> Tensor {
    let op = "rope";
    let cd = match check(op, x, cos, sin, true) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let (seq, len) = (x.dim(-2), cos.dim(0));
    if offset.checked_add(seq).is_none_or(|end| end > len) {
        return trace_error(
            op,
            &[x, cos, sin],
            format!("positions {offset}..{offset}+{seq} run past the tables' {len} rows"),
        );
    }
    let end = offset + seq;
    rotate(
        x,
        cos.slice_axis(0, offset, end),
        sin.slice_axis(0, offset, end),
        layout,
        cd,
    )
}

#[track_caller]
fn rope_traced(x: Tensor, cos: Tensor, sin: Tensor, offset: Tensor, layout: RopeLayout) -> Tensor {
    let op = "rope_at";
    let cd = match check(op, x, cos, sin, true) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let os = offset.spec();
    // A scalar, or the one-element vector `cache_update` and the decode
    // kernels take for a position.
    let one = os.rank() == 0 || (os.rank() == 1 && os.shape[0] == 1);
    if !one || !os.dtype.is_integer() {
        return trace_error(
            op,
            &[x, offset],
            format!("offset must be an integer scalar (s32[] or s32[1]), got {os}"),
        );
    }
    let offset = offset.reshape(&[]).cast(S32);
    // XLA would clamp a start past `max_len - S` (rotating at the wrong
    // positions): a check inside the program reports it instead.
    let (rows, len) = (cos.dim(0), x.dim(-2));
    if len <= rows {
        let last = (rows - len).min(i32::MAX as usize) as i32;
        tessel::check(
            offset.ge(0) & offset.le(last),
            format!("rope_at: offset {{}} with {len} positions is not in 0..={last} (tables of {rows} rows)"),
            &[offset],
        );
    }
    let starts = [offset, Tensor::scalar(0.0, S32)];
    let sizes = [x.dim(-2), cos.dim(1)];
    rotate(
        x,
        cos.dynamic_slice(&starts, &sizes),
        sin.dynamic_slice(&starts, &sizes),
        layout,
        cd,
    )
}

/// Applies rotary position embeddings to `x` `[.., S, D]` at positions
/// `offset..offset + S`, with tables from [`RopeTable`] (`cos`, `sin`:
/// `[max_len, R/2]`, `R <= D`) in the given pair `layout`.
///
/// `offset` is static (part of the compiled program); `offset + S` past
/// the tables' end is a trace error. For a per-step decoding offset use
/// [`rope_at`](fn@rope_at).
///
/// ```
/// use tessel_kernels::rope::{rope, RopeLayout, RopeTable};
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let table = RopeTable::new(16, 2, 10_000.0)?; // one pair, angle = position
/// let x = HostTensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0], [2, 2])?; // S = 2, D = 2
/// let y = rope::run(&dev, &x, table.cos(), table.sin(), 3, RopeLayout::HalfSplit)?;
/// let y = y.to_vec::<f32>()?;
/// // Rows at positions 3 and 4: (1, 0) rotated by 3 and 4 radians.
/// assert!((y[0] - 3f32.cos()).abs() < 1e-6 && (y[1] - 3f32.sin()).abs() < 1e-6);
/// assert!((y[2] - 4f32.cos()).abs() < 1e-6 && (y[3] - 4f32.sin()).abs() < 1e-6);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rope(x: Tensor, cos: Tensor, sin: Tensor, offset: usize, layout: RopeLayout) -> Tensor {
    rope_static(x, cos, sin, offset, layout)
}

/// [`rope`](fn@rope) with the position offset as a traced integer `offset`
/// (a scalar or a one-element vector, s32 or any integer type, as
/// `cache_update` and the decode kernels take positions): one compiled
/// program for every decoding step. An offset outside `0..=max_len - S` is
/// an [`Error::Check`] after the call (a dynamic
/// slice would clamp it and rotate at the wrong positions).
///
/// ```
/// use tessel_kernels::rope::{rope_at, RopeLayout, RopeTable};
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let table = RopeTable::new(64, 4, 10_000.0)?;
/// let x = HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 0.0], [1, 1, 4])?; // one new token
/// for step in [5i32, 6, 7] {
///     let pos = HostTensor::scalar(step);
///     let y = rope_at::run(&dev, &x, table.cos(), table.sin(), &pos, RopeLayout::Interleaved)?;
///     let y = y.to_vec::<f32>()?;
///     assert!((y[0] - (step as f32).cos()).abs() < 1e-6); // pair (0, 1) turns 1 rad per position
/// }
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rope_at(x: Tensor, cos: Tensor, sin: Tensor, offset: Tensor, layout: RopeLayout) -> Tensor {
    rope_traced(x, cos, sin, offset, layout)
}

/// Whether `positions` (`ps`) fit the leading axes `lead` of an input:
/// integers, aligned with them, each the same or 1.
fn positions_fit(ps: &TensorSpec, lead: &[usize]) -> bool {
    ps.dtype.is_integer()
        && ps.rank() <= lead.len()
        && ps.shape.iter().zip(lead).all(|(&p, &n)| p == n || p == 1)
}

/// The message of positions that do not fit `x` (`xs`).
fn positions_problem(ps: &TensorSpec, xs: &TensorSpec) -> String {
    format!(
        "positions must be integers shaped like the leading axes of x (each the same or 1, \
         e.g. [T] for x [T, H, D]), got {ps} for x {xs}"
    )
}

/// `positions.shape` padded with ones to `rank` axes.
fn positions_shape(ps: &TensorSpec, rank: usize) -> Vec<isize> {
    let mut shape: Vec<isize> = ps.shape.iter().map(|&n| n as isize).collect();
    shape.resize(rank, 1);
    shape
}

#[track_caller]
fn rope_by_table_rows(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    layout: RopeLayout,
) -> Tensor {
    let op = "rope_at_positions";
    // `check` makes sure `x` has leading axes for the positions to fit.
    let cd = match check(op, x, cos, sin, false) {
        Ok(cd) => cd,
        Err(poisoned) => return poisoned,
    };
    let (xs, ps) = (x.spec(), positions.spec());
    if !positions_fit(&ps, &xs.shape[..xs.rank() - 1]) {
        return trace_error(op, &[x, positions], positions_problem(&ps, &xs));
    }
    let (rows, h) = (cos.dim(0), cos.dim(1));
    if rows == 0 {
        return trace_error(
            op,
            &[x, cos, sin],
            "the tables have no rows (no position to read)".to_string(),
        );
    }
    let at = positions.cast(S32);
    // A position past the tables would be clamped by the gather into
    // another position's angles: a check reports it instead (once per
    // region for the same positions and table length).
    let flat = at.reshape(&[-1]);
    if first_check(&("rope_at_positions", rows), &[positions]) {
        // One arg-reduction finds the first bad position (a kernel of its own).
        let n = flat.dim(0) as isize;
        let last = rows.min(i32::MAX as usize) as i32 - 1;
        let mut c = MetadataChecks::new();
        c.table(
            (flat.lt(0) | flat.gt(last)).reshape(&[n, 1]),
            format!("rope_at_positions: position {{}} (row {{}} of positions) is not in 0..={last} (tables of {rows} rows)"),
            move |i, _| vec![element(flat, i), i],
        );
        c.raise();
    }
    // Rows `[positions.., R/2]` broadcast to `positions.shape ++ [1, ..] ++ [R/2]`.
    let mut shape = positions_shape(&ps, xs.rank() - 1);
    shape.push(h as isize);
    let gather = |t: Tensor| t.take_with(flat, 0, TakeMode::Clip).reshape(&shape);
    rotate(x, gather(cos), gather(sin), layout, cd)
}

#[track_caller]
fn rope_by_positions(x: Tensor, positions: Tensor, base: f64, layout: RopeLayout) -> Tensor {
    let op = "rope_positions";
    let (xs, ps) = (x.spec(), positions.spec());
    let Some(cd) = compute_dtype(xs.dtype) else {
        return trace_error(op, &[x], format!("needs a float input, got {}", xs.dtype));
    };
    let d = xs.shape.last().copied().unwrap_or(0);
    if xs.rank() == 0 || d == 0 || d % 2 != 0 {
        return trace_error(
            op,
            &[x],
            format!("needs an input [.., D] with an even, nonzero feature count D, got {xs}"),
        );
    }
    if !positions_fit(&ps, &xs.shape[..xs.rank() - 1]) {
        return trace_error(op, &[x, positions], positions_problem(&ps, &xs));
    }
    if let Some(problem) = base_problem(base) {
        return trace_error(op, &[x], problem);
    }
    // Frequencies in f64, rounded once to the compute dtype; the angles
    // `position · frequency` broadcast to `positions.shape ++ [1, ..] ++ [D/2]`.
    let h = d / 2;
    let inv_freq = inverse_frequencies(d, base);
    let freq = HostTensor::from_fn(TensorSpec::new([h], cd), |i| inv_freq[i]);
    let mut freq_shape = vec![1isize; xs.rank() - 1];
    freq_shape.push(h as isize);
    let pos_shape = positions_shape(&ps, xs.rank());
    let angle =
        positions.cast(cd).reshape(&pos_shape) * Tensor::constant(&freq).reshape(&freq_shape);
    rotate(x, angle.cos(), angle.sin(), layout, cd)
}

/// Applies rotary position embeddings to `x` `[.., D]` at explicit
/// integer `positions`, one per row: the per-token positions of a packed
/// (ragged) serving batch, of a training batch of several sequences, or of
/// a decoding step at each sequence's own length.
///
/// `positions` is shaped like `x`'s leading axes, each the same or 1 (it
/// broadcasts over the others): `[T]` for `x` `[T, H, D]`, `[B, S]` for
/// `[B, S, H, D]`, `[B, 1, S]` for `[B, H, S, D]`, a scalar for one
/// position. Every feature rotates (`R = D`, even) with frequencies
/// `base^(-2i/D)` computed in f64; the angles `position · frequency` are
/// formed in the program in f32 (f64 for f64 inputs), as JAX and PyTorch
/// models do: about `position · 2⁻²⁴` radians of rounding, 5e-4 at 8192.
/// For long contexts at full accuracy, or a partial rotary dimension, use
/// the f64 tables of [`RopeTable`] with [`rope`](fn@rope),
/// [`rope_at`](fn@rope_at) or [`rope_at_positions`](fn@rope_at_positions). Differentiable like any traced op; bf16, f16
/// and fp8 inputs rotate in f32 and keep their dtype.
///
/// ```
/// use tessel_kernels::rope::{rope_positions, RopeLayout};
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// // Two tokens of one head, D = 2 (one pair, angle = position), at positions 3 and 0.
/// let x = HostTensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0], [2, 1, 2])?;
/// let pos = HostTensor::from_vec(vec![3i32, 0], [2])?;
/// let y = rope_positions::run(&dev, &x, &pos, 10_000.0, RopeLayout::HalfSplit)?.to_vec::<f32>()?;
/// assert!((y[0] - 3f32.cos()).abs() < 1e-6 && (y[1] - 3f32.sin()).abs() < 1e-6);
/// assert_eq!(&y[2..], &[1.0, 0.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rope_positions(x: Tensor, positions: Tensor, base: f64, layout: RopeLayout) -> Tensor {
    rope_by_positions(x, positions, base, layout)
}

/// [`rope_positions`](fn@rope_positions) with the angles read from
/// [`RopeTable`]s (`cos`, `sin`: `[max_len, R/2]`, `R <= D`) at explicit
/// integer `positions`, one per row: the table's f64 accuracy at every
/// position, and no sine or cosine in the program (XLA evaluates a fused
/// `sin`/`cos` once per element of every consumer that reads the rotated
/// values, e.g. once per key in an attention product).
///
/// `positions` is shaped like `x`'s leading axes, each the same or 1, as
/// for [`rope_positions`](fn@rope_positions). A position outside
/// `0..max_len` is an [`Error::Check`] after the call (a gather would clamp
/// it into another position's angles); a region checks the same positions
/// once, whatever the number of calls (the queries and keys of every layer).
///
/// ```
/// use tessel_kernels::rope::{rope_at_positions, RopeLayout, RopeTable};
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let table = RopeTable::new(16, 2, 10_000.0)?; // one pair, angle = position
/// // Two tokens of one head, D = 2, at positions 3 and 0.
/// let x = HostTensor::from_vec(vec![1.0f32, 0.0, 1.0, 0.0], [2, 1, 2])?;
/// let pos = HostTensor::from_vec(vec![3i32, 0], [2])?;
/// let y = rope_at_positions::run(&dev, &x, table.cos(), table.sin(), &pos, RopeLayout::HalfSplit)?;
/// let y = y.to_vec::<f32>()?;
/// assert!((y[0] - 3f32.cos()).abs() < 1e-6 && (y[1] - 3f32.sin()).abs() < 1e-6);
/// assert_eq!(&y[2..], &[1.0, 0.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn rope_at_positions(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    layout: RopeLayout,
) -> Tensor {
    rope_by_table_rows(x, cos, sin, positions, layout)
}
