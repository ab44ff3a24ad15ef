//! Rotary embeddings against a direct f64 rotation (angles computed here,
//! not read from the table) for both layouts, static and traced offsets,
//! partial rotary dimensions and narrow dtypes (tolerances in
//! `common::tol`; f32 results also carry the table's f32 rounding, well
//! inside 1e-5); the process-wide table cache; bad arguments. Rotation at
//! explicit per-row positions against the same f64 rotation, with the
//! in-program f32 angle's rounding written into its tolerance.

extern crate tessel_dsl as tessel;

mod common;

use std::sync::Arc;

use common::{assert_close, dev, kernel_error, random, tol, Tol};
use tessel::autodiff::vjp;
use tessel::prelude::*;
use tessel_kernels::rope::{
    rope, rope_at, rope_at_positions, rope_positions, RopeLayout, RopeTable,
};

const BASE: f64 = 10_000.0;

/// `x` `[.., D]` (rows of `d` features) with the first `r` features of row
/// `k` rotated at position `pos(k)`, directly in f64.
fn rotate_rows(
    x: &[f64],
    d: usize,
    r: usize,
    pos: impl Fn(usize) -> f64,
    layout: RopeLayout,
) -> Vec<f64> {
    let h = r / 2;
    let mut out = x.to_vec();
    for (row_index, row) in x.chunks(d).enumerate() {
        for i in 0..h {
            let theta = pos(row_index) * BASE.powf(-2.0 * i as f64 / r as f64);
            let (p, q) = match layout {
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                RopeLayout::HalfSplit => (i, i + h),
            };
            let (a, b) = (row[p], row[q]);
            out[row_index * d + p] = a * theta.cos() - b * theta.sin();
            out[row_index * d + q] = a * theta.sin() + b * theta.cos();
        }
    }
    out
}

/// `x` `[.., S, D]` rotated at positions `offset..offset + S`, rotary
/// dimension `r` (the first `r` features), directly in f64.
fn reference(x: &[f64], shape: &[usize], r: usize, offset: usize, layout: RopeLayout) -> Vec<f64> {
    let (s, d) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    rotate_rows(x, d, r, |row| (offset + row % s) as f64, layout)
}

const LAYOUTS: [RopeLayout; 2] = [RopeLayout::Interleaved, RopeLayout::HalfSplit];

#[test]
fn static_offsets_match_a_direct_rotation() {
    let d = dev();
    // [S, D], [B, S, D] and [B, H, S, D]; S of 1, odd, 129; D of 2, 8, 64, 10.
    for (k, shape) in [&[1, 2][..], &[3, 8], &[2, 3, 5, 64], &[1, 129, 10]]
        .iter()
        .enumerate()
    {
        let dim = shape[shape.len() - 1];
        let table = RopeTable::new(200, dim, BASE).unwrap();
        let (x, xv) = random(F32, shape, k as u64, -2.0, 2.0);
        for layout in LAYOUTS {
            for offset in [0, 5, 200 - shape[shape.len() - 2]] {
                let y = rope::run(&d, &x, table.cos(), table.sin(), offset, layout).unwrap();
                let want = reference(&xv, shape, dim, offset, layout);
                assert_close(
                    &y,
                    &want,
                    tol(F32),
                    &format!("{layout:?} {shape:?} offset {offset}"),
                );
            }
        }
    }
}

#[test]
fn traced_offsets_match_and_share_one_program() {
    let d = dev();
    let shape = [2, 4, 3, 16];
    let table = RopeTable::new(64, 16, BASE).unwrap();
    let (x, xv) = random(F32, &shape, 9, -1.0, 1.0);
    for layout in LAYOUTS {
        let mut compiles = None;
        for offset in [0usize, 1, 17, 61] {
            let pos = HostTensor::scalar(offset as i32);
            let y = rope_at::run(&d, &x, table.cos(), table.sin(), &pos, layout).unwrap();
            assert_close(
                &y,
                &reference(&xv, &shape, 16, offset, layout),
                tol(F32),
                &format!("{layout:?} at {offset}"),
            );
            // The traced and the static offset agree.
            let s = rope::run(&d, &x, table.cos(), table.sin(), offset, layout).unwrap();
            assert_close(&y, &s.to_f64_vec(), tol(F32), "traced vs static");
            // Each static offset traces (and compiles) a program; the traced
            // offset only did for the first.
            let now = tessel::thread_trace_count();
            if let Some(c) = compiles {
                assert_eq!(now, c + 1, "only the static kernel traced again");
            }
            compiles = Some(now);
        }
    }
    // Other integer offset dtypes are accepted.
    let y = rope_at::run(
        &d,
        &x,
        table.cos(),
        table.sin(),
        &HostTensor::scalar(3u32),
        RopeLayout::HalfSplit,
    )
    .unwrap();
    assert_close(
        &y,
        &reference(&xv, &shape, 16, 3, RopeLayout::HalfSplit),
        tol(F32),
        "u32 offset",
    );
}

#[test]
fn partial_rotary_dimensions_pass_the_rest_through() {
    let d = dev();
    let shape = [3, 5, 12];
    let table = RopeTable::new(32, 8, BASE).unwrap();
    let (x, xv) = random(F32, &shape, 4, -1.0, 1.0);
    for layout in LAYOUTS {
        let y = rope::run(&d, &x, table.cos(), table.sin(), 2, layout).unwrap();
        let want = reference(&xv, &shape, 8, 2, layout);
        assert_close(&y, &want, tol(F32), &format!("partial {layout:?}"));
        let got = y.to_f64_vec();
        for (i, (&g, &v)) in got.iter().zip(&xv).enumerate() {
            if i % 12 >= 8 {
                assert_eq!(g, v, "feature {} passes through", i % 12);
            }
        }
    }
}

#[test]
fn narrow_dtypes_rotate_in_f32() {
    let d = dev();
    let shape = [2, 7, 32];
    let table = RopeTable::new(40, 32, BASE).unwrap();
    for dtype in [BF16, F16, F64] {
        let (x, xv) = random(dtype, &shape, 6, -2.0, 2.0);
        for layout in LAYOUTS {
            let y = rope::run(&d, &x, table.cos(), table.sin(), 31, layout).unwrap();
            assert_eq!(y.dtype(), dtype);
            let want = reference(&xv, &shape, 32, 31, layout);
            // f64 inputs still use the f32 table: f32 accuracy.
            let t = if dtype == F64 { tol(F32) } else { tol(dtype) };
            assert_close(&y, &want, t, &format!("{dtype} {layout:?}"));
        }
    }
}

#[test]
fn tables_are_built_once_per_key_and_are_accurate() {
    let a = RopeTable::new(4096, 128, BASE).unwrap();
    let b = RopeTable::new(4096, 128, BASE).unwrap();
    assert!(
        Arc::ptr_eq(&a, &b),
        "the second call reuses the first table"
    );
    // From other threads too.
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| RopeTable::new(4096, 128, BASE).unwrap()))
        .collect();
    for h in handles {
        assert!(Arc::ptr_eq(&a, &h.join().unwrap()));
    }
    for other in [
        RopeTable::new(2048, 128, BASE).unwrap(),
        RopeTable::new(4096, 64, BASE).unwrap(),
        RopeTable::new(4096, 128, 500_000.0).unwrap(),
    ] {
        assert!(!Arc::ptr_eq(&a, &other));
    }
    assert_eq!((a.max_len(), a.dim(), a.base()), (4096, 128, BASE));
    assert_eq!((a.cos().shape(), a.sin().dtype()), (&[4096, 64][..], F32));
    // Entries are the f64 values rounded once to f32.
    let (cos, sin) = (
        a.cos().to_vec::<f32>().unwrap(),
        a.sin().to_vec::<f32>().unwrap(),
    );
    for (p, i) in [(0, 0), (1, 0), (4095, 0), (4095, 63), (1000, 17)] {
        let theta = p as f64 * BASE.powf(-2.0 * i as f64 / 128.0);
        assert_eq!(cos[p * 64 + i], theta.cos() as f32, "cos[{p}, {i}]");
        assert_eq!(sin[p * 64 + i], theta.sin() as f32, "sin[{p}, {i}]");
    }
    for (len, dim, base) in [
        (16, 7, BASE),
        (16, 0, BASE),
        (0, 8, BASE),
        (16, 8, 0.0),
        (16, 8, f64::NAN),
        (usize::MAX, 8, BASE),
    ] {
        let err = RopeTable::new(len, dim, base).unwrap_err();
        assert!(matches!(err, Error::Host(_)), "{err}");
        assert!(err.to_string().starts_with("RopeTable: "), "{err}");
    }
}

#[test]
fn bad_arguments_are_kernel_errors() {
    let d = dev();
    let table = RopeTable::new(8, 4, BASE).unwrap();
    let (c, s) = (table.cos(), table.sin());
    let (x, _) = random(F32, &[1, 5, 4], 1, -1.0, 1.0);
    let layout = RopeLayout::Interleaved;

    let e = kernel_error(rope::run(&d, &x, c, s, 4, layout));
    assert_eq!(e.op, "rope");
    assert!(
        e.message
            .contains("positions 4..4+5 run past the tables' 8 rows"),
        "{}",
        e.message
    );
    let e = kernel_error(rope::run(&d, &x, c, s, usize::MAX, layout));
    assert!(e.message.contains("run past"), "{}", e.message);
    let (long, _) = random(F32, &[9, 4], 1, -1.0, 1.0);
    let e = kernel_error(rope_at::run(
        &d,
        &long,
        c,
        s,
        &HostTensor::scalar(0i32),
        layout,
    ));
    assert_eq!(e.op, "rope_at");
    assert!(
        e.message.contains("9 positions but the tables only 8"),
        "{}",
        e.message
    );
    let wide = RopeTable::new(8, 6, BASE).unwrap();
    let e = kernel_error(rope::run(&d, &x, wide.cos(), wide.sin(), 0, layout));
    assert!(
        e.message.contains("rotate 6 features, but x has 4"),
        "{}",
        e.message
    );
    let e = kernel_error(rope::run(&d, &x, c, wide.sin(), 0, layout));
    assert!(e.message.contains("one shape and dtype"), "{}", e.message);
    let (flat, _) = random(F32, &[4], 1, -1.0, 1.0);
    let e = kernel_error(rope::run(&d, &flat, c, s, 0, layout));
    assert!(e.message.contains("rank 2 or more"), "{}", e.message);
    let ints = HostTensor::from_vec(vec![1i32; 20], [1, 5, 4]).unwrap();
    let e = kernel_error(rope::run(&d, &ints, c, s, 0, layout));
    assert!(e.message.contains("needs a float input"), "{}", e.message);
    let e = kernel_error(rope_at::run(
        &d,
        &x,
        c,
        s,
        &HostTensor::scalar(1.0f32),
        layout,
    ));
    assert!(
        e.message.contains("offset must be an integer scalar"),
        "{}",
        e.message
    );
}

#[test]
fn traced_offsets_take_both_position_shapes_and_are_checked() {
    let d = dev();
    let table = RopeTable::new(8, 4, BASE).unwrap();
    let (c, s) = (table.cos(), table.sin());
    let (x, _) = random(F32, &[1, 3, 4], 2, -1.0, 1.0);
    let layout = RopeLayout::HalfSplit;
    let scalar = rope_at::run(&d, &x, c, s, &HostTensor::scalar(5i32), layout).unwrap();
    let vector = HostTensor::from_vec(vec![5i32], [1]).unwrap();
    let one = rope_at::run(&d, &x, c, s, &vector, layout).unwrap();
    assert_eq!(scalar, one);
    for bad in [6i32, -1, i32::MAX] {
        let e = rope_at::run(&d, &x, c, s, &HostTensor::scalar(bad), layout).unwrap_err();
        assert!(matches!(e, Error::Check(_)), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("offset {bad} with 3 positions is not in 0..=5")),
            "{e}"
        );
    }
}

/// One decoding step of attention inputs: q and k rotated at the same
/// traced position, inside a user kernel.
#[cpu_kernel]
fn rotate_qk(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, pos: Tensor) -> (Tensor, Tensor) {
    (
        rope_at(q, cos, sin, pos, RopeLayout::HalfSplit),
        rope_at(k, cos, sin, pos, RopeLayout::HalfSplit),
    )
}

#[test]
fn rope_inlines_into_user_kernels() {
    let d = dev();
    let table = RopeTable::new(128, 8, BASE).unwrap();
    let (q, qv) = random(F32, &[4, 1, 8], 1, -1.0, 1.0);
    let (k, kv) = random(F32, &[2, 1, 8], 2, -1.0, 1.0);
    let (yq, yk) = rotate_qk::run(
        &d,
        &q,
        &k,
        table.cos(),
        table.sin(),
        &HostTensor::scalar(77i32),
    )
    .unwrap();
    assert_close(
        &yq,
        &reference(&qv, &[4, 1, 8], 8, 77, RopeLayout::HalfSplit),
        tol(F32),
        "q",
    );
    assert_close(
        &yk,
        &reference(&kv, &[2, 1, 8], 8, 77, RopeLayout::HalfSplit),
        tol(F32),
        "k",
    );
}

/// `x` `[.., D]` with each row rotated (all `D` features) at its own
/// position `pos[row]`, directly in f64.
fn reference_rows(x: &[f64], d: usize, pos: &[f64], layout: RopeLayout) -> Vec<f64> {
    rotate_rows(x, d, d, |row| pos[row], layout)
}

/// The position of every row of `x` (`shape`'s leading axes), read from
/// `pos` of shape `pshape` broadcast as `rope_positions` does: aligned with
/// the leading axes, a dimension of 1 repeated.
fn row_positions(shape: &[usize], pshape: &[usize], pos: &[i32]) -> Vec<f64> {
    let lead = &shape[..shape.len() - 1];
    let rows: usize = lead.iter().product();
    (0..rows)
        .map(|r| {
            // The row's index along each leading axis.
            let mut rest = r;
            let mut index = vec![0; lead.len()];
            for (j, &n) in lead.iter().enumerate().rev() {
                index[j] = rest % n;
                rest /= n;
            }
            let mut at = 0;
            for (j, &p) in pshape.iter().enumerate() {
                at = at * p + if p == 1 { 0 } else { index[j] };
            }
            f64::from(pos[at])
        })
        .collect()
}

/// The f32 angle `position · frequency` is formed in the program: two
/// roundings of 2⁻²⁴ relative each, so up to `max_pos · 2⁻²³` radians,
/// times `|a| + |b| <= 4` for inputs in [-2, 2).
fn angle_tol(max_pos: i32) -> Tol {
    let t = tol(F32);
    Tol {
        rtol: t.rtol,
        atol: t.atol + 4.0 * f64::from(max_pos) * 2f64.powi(-23),
    }
}

#[test]
fn per_row_positions_match_a_direct_rotation() {
    let d = dev();
    // (x shape, positions shape): [T, H, D] by [T]; [B, S, H, D] by [B, S];
    // [B, H, S, D] by [B, 1, S]; [S, D] by a scalar; odd T, D of 2 and 10.
    let cases: [(&[usize], &[usize]); 5] = [
        (&[7, 3, 16], &[7]),
        (&[2, 5, 4, 8], &[2, 5]),
        (&[2, 3, 5, 10], &[2, 1, 5]),
        (&[9, 2], &[]),
        (&[1, 1, 64], &[1]),
    ];
    for (k, (shape, pshape)) in cases.into_iter().enumerate() {
        let dim = shape[shape.len() - 1];
        let (x, xv) = random(F32, shape, 20 + k as u64, -2.0, 2.0);
        let n: usize = pshape.iter().product();
        let pos: Vec<i32> = (0..n).map(|i| ((i * 37 + k * 11) % 500) as i32).collect();
        let p = HostTensor::from_vec(pos.clone(), pshape).unwrap();
        let max = pos.iter().copied().max().unwrap();
        let want = reference_rows(
            &xv,
            dim,
            &row_positions(shape, pshape, &pos),
            RopeLayout::HalfSplit,
        );
        for layout in LAYOUTS {
            let y = rope_positions::run(&d, &x, &p, BASE, layout).unwrap();
            let want = if layout == RopeLayout::HalfSplit {
                want.clone()
            } else {
                reference_rows(&xv, dim, &row_positions(shape, pshape, &pos), layout)
            };
            assert_close(
                &y,
                &want,
                angle_tol(max),
                &format!("{layout:?} {shape:?} by {pshape:?}"),
            );
        }
    }
}

#[test]
fn per_row_positions_agree_with_the_table_and_keep_narrow_dtypes() {
    let d = dev();
    // Contiguous positions 0..S are what `rope` at offset 0 rotates by.
    let shape = [2, 3, 11, 16];
    let table = RopeTable::new(32, 16, BASE).unwrap();
    let p = HostTensor::from_vec((0..11).collect::<Vec<i32>>(), [1, 1, 11]).unwrap();
    for dtype in [F32, BF16, F16, F64] {
        let (x, xv) = random(dtype, &shape, 30, -2.0, 2.0);
        for layout in LAYOUTS {
            let y = rope_positions::run(&d, &x, &p, BASE, layout).unwrap();
            assert_eq!(y.dtype(), dtype);
            let want = reference(&xv, &shape, 16, 0, layout);
            let t = if dtype == F64 { tol(F64) } else { tol(dtype) };
            assert_close(&y, &want, t, &format!("{dtype} {layout:?}"));
            if dtype == F32 {
                let s = rope::run(&d, &x, table.cos(), table.sin(), 0, layout).unwrap();
                assert_close(&y, &s.to_f64_vec(), angle_tol(10), "positions vs table");
            }
        }
    }
    // Other integer dtypes are positions too.
    let (x, xv) = random(F32, &[3, 1, 4], 31, -1.0, 1.0);
    let p = HostTensor::from_vec(vec![4u8, 0, 9], [3]).unwrap();
    let y = rope_positions::run(&d, &x, &p, BASE, RopeLayout::Interleaved).unwrap();
    let want = reference_rows(&xv, 4, &[4.0, 0.0, 9.0], RopeLayout::Interleaved);
    assert_close(&y, &want, tol(F32), "u8 positions");
}

/// The cotangent of `rope_positions`' `x`, by reverse-mode autodiff.
#[cpu_kernel]
fn rope_positions_dx(x: Tensor, pos: Tensor, dout: Tensor) -> Tensor {
    let (_, pb) = vjp(
        |x: Tensor| rope_positions(x, pos, BASE, RopeLayout::HalfSplit),
        x,
    );
    pb.call(dout)
}

#[test]
fn per_row_positions_differentiate_to_the_inverse_rotation() {
    let d = dev();
    let shape = [5, 2, 8];
    let (x, _) = random(F32, &shape, 40, -1.0, 1.0);
    let (dout, dv) = random(F32, &shape, 41, -1.0, 1.0);
    let pos = vec![0i32, 3, 17, 2, 40];
    let p = HostTensor::from_vec(pos.clone(), [5]).unwrap();
    let dx = rope_positions_dx::run(&d, &x, &p, &dout).unwrap();
    // A rotation's transpose is the rotation by −θ.
    let back: Vec<i32> = pos.iter().map(|&q| -q).collect();
    let want = reference_rows(
        &dv,
        8,
        &row_positions(&shape, &[5], &back),
        RopeLayout::HalfSplit,
    );
    assert_close(&dx, &want, angle_tol(40), "dx");
}

#[test]
fn bad_positions_are_kernel_errors() {
    let d = dev();
    let (x, _) = random(F32, &[4, 2, 6], 50, -1.0, 1.0);
    let layout = RopeLayout::HalfSplit;
    let floats = HostTensor::from_vec(vec![1.0f32; 4], [4]).unwrap();
    let e = kernel_error(rope_positions::run(&d, &x, &floats, BASE, layout));
    assert_eq!(e.op, "rope_positions");
    assert!(
        e.message
            .contains("positions must be integers shaped like the leading axes"),
        "{}",
        e.message
    );
    for bad in [&[3][..], &[4, 2, 6], &[2, 2]] {
        let n = bad.iter().product();
        let p = HostTensor::from_vec(vec![0i32; n], bad).unwrap();
        let e = kernel_error(rope_positions::run(&d, &x, &p, BASE, layout));
        assert!(e.message.contains("f32[4,2,6]"), "{}", e.message);
    }
    let p = HostTensor::from_vec(vec![0i32; 4], [4]).unwrap();
    let (odd, _) = random(F32, &[4, 5], 51, -1.0, 1.0);
    let e = kernel_error(rope_positions::run(&d, &odd, &p, BASE, layout));
    assert!(
        e.message.contains("even, nonzero feature count"),
        "{}",
        e.message
    );
    let ints = HostTensor::from_vec(vec![1i32; 8], [4, 2]).unwrap();
    let e = kernel_error(rope_positions::run(&d, &ints, &p, BASE, layout));
    assert!(e.message.contains("needs a float input"), "{}", e.message);
    for base in [0.0, -1.0, f64::INFINITY] {
        let e = kernel_error(rope_positions::run(&d, &x, &p, base, layout));
        assert!(
            e.message.contains("base must be finite and positive"),
            "{}",
            e.message
        );
    }
}

/// The table read at per-row positions: the direct f64 rotation to f32's
/// tolerance (the table's f64 angles, not `angle_tol`), over the position
/// shapes `rope_positions` takes and a partial rotary dimension; positions
/// past the table are a check error, bad shapes kernel errors.
#[test]
fn table_rows_at_per_row_positions_match_a_direct_rotation() {
    let d = dev();
    let cases: [(&[usize], &[usize], usize); 4] = [
        (&[7, 3, 16], &[7], 16),
        (&[2, 5, 4, 8], &[2, 5], 8),
        (&[2, 3, 5, 10], &[2, 1, 5], 6),
        (&[9, 2], &[9], 2),
    ];
    for (k, (shape, pshape, r)) in cases.into_iter().enumerate() {
        let dim = shape[shape.len() - 1];
        let table = RopeTable::new(4096, r, BASE).unwrap();
        let (x, xv) = random(F32, shape, 60 + k as u64, -2.0, 2.0);
        let n: usize = pshape.iter().product();
        let pos: Vec<i32> = (0..n)
            .map(|i| ((i * 1237 + k * 11) % 4096) as i32)
            .collect();
        let p = HostTensor::from_vec(pos.clone(), pshape).unwrap();
        let rows = row_positions(shape, pshape, &pos);
        for layout in LAYOUTS {
            let y = rope_at_positions::run(&d, &x, table.cos(), table.sin(), &p, layout).unwrap();
            let want = rotate_rows(&xv, dim, r, |row| rows[row], layout);
            assert_close(
                &y,
                &want,
                tol(F32),
                &format!("{layout:?} {shape:?} by {pshape:?}, R = {r}"),
            );
        }
    }
    let table = RopeTable::new(8, 4, BASE).unwrap();
    let (x, _) = random(F32, &[3, 1, 4], 70, -1.0, 1.0);
    let layout = RopeLayout::HalfSplit;
    let run = |pos: &[i32], shape: &[usize]| {
        let p = HostTensor::from_vec(pos.to_vec(), shape).unwrap();
        rope_at_positions::run(&d, &x, table.cos(), table.sin(), &p, layout)
    };
    // The first bad position is named.
    for (bad, what) in [
        ([0, 8, 1], "position 8 (row 1"),
        ([-1, 0, 9], "position -1 (row 0"),
    ] {
        let e = run(&bad, &[3]).unwrap_err();
        assert!(matches!(e, Error::Check(_)), "{e}");
        let m = e.to_string();
        assert!(
            m.contains(what) && m.contains("is not in 0..=7 (tables of 8 rows)"),
            "{m}"
        );
    }
    let e = kernel_error(run(&[0, 1], &[2]));
    assert_eq!(e.op, "rope_at_positions");
    assert!(
        e.message.contains("positions must be integers shaped like"),
        "{}",
        e.message
    );
    // The queries and keys of a step share one range check.
    let spec = |shape: &[usize], dtype| TensorSpec::new(shape.to_vec(), dtype);
    let specs = [
        ("x", spec(&[3, 1, 4], F32)),
        ("c", spec(&[8, 2], F32)),
        ("p", spec(&[3], S32)),
    ];
    let specs = specs.map(|(n, s)| (n.to_string(), s));
    let g = tessel::trace("qk", &specs, tessel::kernel::KernelConfig::default(), |a| {
        let r = |x: Tensor| rope_at_positions(x, a[1], a[1], a[2], layout);
        vec![r(a[0]), r(a[0] * 2.0)]
    });
    assert_eq!(g.unwrap().checks.len(), 1);
    let (wide, _) = random(F32, &[3, 1, 2], 71, -1.0, 1.0);
    let p = HostTensor::from_vec(vec![0i32; 3], [3]).unwrap();
    let e = kernel_error(rope_at_positions::run(
        &d,
        &wide,
        table.cos(),
        table.sin(),
        &p,
        layout,
    ));
    assert!(
        e.message
            .contains("the tables rotate 4 features, but x has 2"),
        "{}",
        e.message
    );
}
