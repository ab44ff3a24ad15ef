//! Gather (`take`, general `gather`) and scatter (`index_update`, general
//! `scatter`) against index-arithmetic references, including duplicate and
//! out-of-range indices.

mod common;

use common::*;
use tessel_dsl::ops::{GatherDims, ScatterCombine, ScatterDims};
use tessel_dsl::{HostTensor, TakeMode, F32, S32, S64, U8};

/// numpy `take` under `mode`: an index in `-n .. 0` counts from the end
/// (except `PromiseInBounds`, which clamps as XLA's gather does); `Fill`
/// reads `fill` outside `-n .. n`, `Clip` clamps, `Wrap` takes the index
/// modulo `n`.
fn take_ref(
    x: &HostTensor,
    idx: &HostTensor,
    axis: usize,
    mode: TakeMode,
    fill: f64,
) -> (Vec<f64>, Vec<usize>) {
    let (xs, is) = (x.shape(), idx.shape());
    let mut out: Vec<usize> = xs[..axis].to_vec();
    out.extend_from_slice(is);
    out.extend_from_slice(&xs[axis + 1..]);
    let (xv, iv) = (x.to_f64_vec(), idx.to_f64_vec());
    let n = xs[axis] as i64;
    let v = (0..out.iter().product())
        .map(|o| {
            let oi = unravel(o, &out);
            let k = iv[ravel(&oi[axis..axis + is.len()], is)] as i64;
            let from_end = if k < 0 { k + n } else { k };
            let k = match mode {
                TakeMode::Fill if !(0..n).contains(&from_end) => return fill,
                TakeMode::Fill => from_end,
                TakeMode::Clip => from_end.clamp(0, n - 1),
                TakeMode::Wrap => k.rem_euclid(n),
                TakeMode::PromiseInBounds => k.clamp(0, n - 1),
            };
            let mut src: Vec<usize> = oi[..axis].to_vec();
            src.push(k as usize);
            src.extend_from_slice(&oi[axis + is.len()..]);
            xv[ravel(&src, xs)]
        })
        .collect();
    (v, out)
}

fn combine(c: ScatterCombine, old: f64, new: f64) -> f64 {
    match c {
        ScatterCombine::Set => new,
        ScatterCombine::Add => old + new,
        ScatterCombine::Mul => old * new,
        ScatterCombine::Max => old.max(new),
        ScatterCombine::Min => old.min(new),
    }
}

/// `index_update` on the host: every update lands in order; indices outside
/// the axis are skipped.
fn index_update_ref(
    x: &HostTensor,
    axis: usize,
    idx: &HostTensor,
    upd: &HostTensor,
    c: ScatterCombine,
) -> Vec<f64> {
    let (xs, is) = (x.shape(), idx.shape());
    let mut out = x.to_f64_vec();
    let (iv, uv) = (idx.to_f64_vec(), upd.to_f64_vec());
    for (u, &val) in uv.iter().enumerate() {
        let ui = unravel(u, upd.shape());
        let k = iv[ravel(&ui[axis..axis + is.len()], is)] as i64;
        if k < 0 || k >= xs[axis] as i64 {
            continue;
        }
        let mut dst: Vec<usize> = ui[..axis].to_vec();
        dst.push(k as usize);
        dst.extend_from_slice(&ui[axis + is.len()..]);
        let d = ravel(&dst, xs);
        out[d] = combine(c, out[d], val);
    }
    out
}

#[test]
fn take_along_several_axes_with_vector_and_multi_d_indices() {
    let mut rng = Rng::new(60);
    let shape = [4, 5, 6];
    let modes = [
        TakeMode::Fill,
        TakeMode::Clip,
        TakeMode::Wrap,
        TakeMode::PromiseInBounds,
    ];
    for dtype in [F32, S32, U8] {
        // What `Fill` reads outside the axis.
        let fill = match dtype {
            F32 => f64::NAN,
            S32 => f64::from(i32::MIN),
            _ => f64::from(u8::MAX),
        };
        let x = random(&mut rng, &shape, dtype, 0.0, 100.0);
        // Out-of-range entries: -3 (from the end), 10 and -12 (outside).
        let i1 = tensor(&[3.0, 0.0, -3.0, 2.0, 10.0, -12.0, 1.0], &[7], S32);
        let i2 = tensor(&[1.0, 4.0, -1.0, 5.0, 5.0, 3.0], &[2, 3], S64);
        let i0 = tensor(&[-2.0], &[], S32);
        for mode in modes {
            let out = run(
                |t| {
                    let (x, i1, i2, i0) = (t[0], t[1], t[2], t[3]);
                    vec![
                        x.take_with(i1, 0, mode),
                        x.take_with(i1, 1, mode),
                        x.take_with(i1, -1, mode),
                        x.take_with(i2, 1, mode),
                        x.take_with(i2, 2, mode),
                        x.take_with(i0, 0, mode),
                        x.take_with(i2, 0, mode),
                    ]
                },
                &[&x, &i1, &i2, &i0],
            );
            let cases = [
                (&i1, 0),
                (&i1, 1),
                (&i1, 2),
                (&i2, 1),
                (&i2, 2),
                (&i0, 0),
                (&i2, 0),
            ];
            for (o, (idx, axis)) in out.iter().zip(cases) {
                let (w, s) = take_ref(&x, idx, axis, mode, fill);
                let what = format!(
                    "take {mode:?} {dtype} axis {axis} indices {:?}",
                    idx.shape()
                );
                assert_eq!(o.shape(), s.as_slice(), "{what}");
                let got = o.to_f64_vec();
                for (i, (g, w)) in got.iter().zip(&w).enumerate() {
                    assert!(
                        g == w || (g.is_nan() && w.is_nan()),
                        "{what}: element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn take_defaults_to_fill_and_refuses_float_indices() {
    let x = tensor(&[10.0, 20.0, 30.0], &[3], S32);
    let i = tensor(&[-1.0, 5.0], &[2], S32);
    let out = run(|t| vec![t[0].take(t[1], 0)], &[&x, &i]);
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [30, i32::MIN]);
    let f = tensor(&[0.0], &[1], F32);
    let e = tessel_dsl::trace(
        "k",
        &[
            ("x".into(), x.spec().clone()),
            ("i".into(), f.spec().clone()),
        ],
        Default::default(),
        |a| a[0].take(a[1], 0),
    )
    .unwrap_err();
    let k = e.as_kernel_error().unwrap();
    assert_eq!(k.op, "take");
    assert!(k.message.contains("must be integers"), "{}", k.message);
}

#[test]
fn general_gather_of_windows_clamps_starts() {
    let mut rng = Rng::new(61);
    let x = random(&mut rng, &[5, 7], F32, -9.0, 9.0);
    // (row, col) start vectors; the last ones must be clamped to fit the window.
    let idx = tensor(&[0.0, 0.0, 1.0, 2.0, 4.0, 6.0, -2.0, 3.0], &[4, 2], S32);
    let y = random(&mut rng, &[5, 7, 4], F32, -9.0, 9.0);
    // Index vectors along axis 0 of the indices: [[rows...], [cols...]].
    let idx_t = tensor(&[0.0, 4.0, 2.0, 9.0, 1.0, 6.0, 3.0, -1.0], &[2, 4], S32);
    let out = run(
        |t| {
            let windows = GatherDims {
                offset_dims: vec![1, 2],
                collapsed_slice_dims: vec![],
                start_index_map: vec![0, 1],
                index_vector_dim: 1,
            };
            let points = GatherDims {
                offset_dims: vec![1],
                collapsed_slice_dims: vec![0, 1],
                start_index_map: vec![0, 1],
                index_vector_dim: 0,
            };
            vec![
                t[0].gather(t[1], windows, &[2, 3]),
                t[2].gather(t[3], points, &[1, 1, 4]),
            ]
        },
        &[&x, &idx, &y, &idx_t],
    );
    let (xv, iv) = (x.to_f64_vec(), idx.to_f64_vec());
    let mut w = Vec::new();
    for b in 0..4 {
        let r0 = (iv[2 * b] as i64).clamp(0, 3) as usize;
        let c0 = (iv[2 * b + 1] as i64).clamp(0, 4) as usize;
        for i in 0..2 {
            for j in 0..3 {
                w.push(xv[(r0 + i) * 7 + c0 + j]);
            }
        }
    }
    check(&out[0], F32, &[4, 2, 3], &w, Class::Exact, "window gather");
    let (yv, tv) = (y.to_f64_vec(), idx_t.to_f64_vec());
    let mut w = Vec::new();
    for b in 0..4 {
        let r = (tv[b] as i64).clamp(0, 4) as usize;
        let c = (tv[4 + b] as i64).clamp(0, 6) as usize;
        for k in 0..4 {
            w.push(yv[(r * 7 + c) * 4 + k]);
        }
    }
    check(
        &out[1],
        F32,
        &[4, 4],
        &w,
        Class::Exact,
        "point gather, index_vector_dim 0",
    );
}

const COMBINES: [ScatterCombine; 5] = [
    ScatterCombine::Set,
    ScatterCombine::Add,
    ScatterCombine::Mul,
    ScatterCombine::Max,
    ScatterCombine::Min,
];

#[test]
fn index_update_combines_duplicates_and_skips_out_of_range() {
    let mut rng = Rng::new(62);
    for dtype in [F32, S32] {
        let x = random(&mut rng, &[6, 4], dtype, -5.0, 5.0);
        // Duplicates (1 three times, 4 twice) and out-of-range 6 and -1.
        let dup = tensor(&[1.0, 4.0, 1.0, 6.0, 0.0, -1.0, 1.0, 4.0], &[8], S32);
        // Distinct in-range indices for Set, whose winner among duplicates is unspecified.
        let uniq = tensor(&[5.0, 0.0, 7.0, 2.0], &[4], S32);
        let u = random(&mut rng, &[8, 4], dtype, -3.0, 3.0);
        let us = random(&mut rng, &[4, 4], dtype, -3.0, 3.0);
        let out = run(
            |t| {
                let mut r = vec![t[0].index_update(0, t[2], t[4], ScatterCombine::Set)];
                for c in &COMBINES[1..] {
                    r.push(t[0].index_update(0, t[1], t[3], *c));
                }
                r
            },
            &[&x, &dup, &uniq, &u, &us],
        );
        let w = index_update_ref(&x, 0, &uniq, &us, ScatterCombine::Set);
        check(
            &out[0],
            dtype,
            &[6, 4],
            &w,
            Class::Exact,
            &format!("Set {dtype}"),
        );
        for (o, c) in out[1..].iter().zip(&COMBINES[1..]) {
            let w = index_update_ref(&x, 0, &dup, &u, *c);
            check(
                o,
                dtype,
                &[6, 4],
                &w,
                Class::Simple,
                &format!("{c:?} {dtype}"),
            );
        }
    }
}

#[test]
fn index_update_on_inner_axes_with_multi_d_indices() {
    let mut rng = Rng::new(63);
    let x = random(&mut rng, &[3, 5, 4], F32, -5.0, 5.0);
    let idx = tensor(&[0.0, 4.0, 2.0, 2.0, 9.0, 0.0], &[2, 3], S32);
    let u1 = random(&mut rng, &[3, 2, 3, 4], F32, -3.0, 3.0);
    let idx2 = tensor(&[3.0, 0.0, 3.0], &[3], S32);
    let u2 = random(&mut rng, &[3, 5, 3], F32, -3.0, 3.0);
    let out = run(
        |t| {
            vec![
                t[0].index_update(1, t[1], t[2], ScatterCombine::Add),
                t[0].index_update(-1, t[3], t[4], ScatterCombine::Add),
                t[0].index_update(2, t[3], t[4], ScatterCombine::Max),
            ]
        },
        &[&x, &idx, &u1, &idx2, &u2],
    );
    let w = index_update_ref(&x, 1, &idx, &u1, ScatterCombine::Add);
    check(
        &out[0],
        F32,
        &[3, 5, 4],
        &w,
        Class::Simple,
        "axis 1, [2,3] indices",
    );
    let w = index_update_ref(&x, 2, &idx2, &u2, ScatterCombine::Add);
    check(&out[1], F32, &[3, 5, 4], &w, Class::Simple, "axis -1");
    let w = index_update_ref(&x, 2, &idx2, &u2, ScatterCombine::Max);
    check(&out[2], F32, &[3, 5, 4], &w, Class::Exact, "axis 2 max");
}

#[test]
fn general_scatter_of_points() {
    let mut rng = Rng::new(64);
    for dtype in [F32, S32] {
        let x = random(&mut rng, &[4, 5], dtype, -5.0, 5.0);
        // (row, col) points: (1, 2) twice, (3, 4), (4, 0) out of range, (0, 0).
        let idx = tensor(
            &[1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 4.0, 0.0, 0.0, 0.0],
            &[5, 2],
            S32,
        );
        let u = random(&mut rng, &[5], dtype, 1.0, 4.0);
        let dims = ScatterDims {
            update_window_dims: vec![],
            inserted_window_dims: vec![0, 1],
            scatter_dims_to_operand_dims: vec![0, 1],
            index_vector_dim: 1,
        };
        let out = run(
            |t| {
                COMBINES[1..]
                    .iter()
                    .map(|&c| t[0].scatter(t[1], t[2], dims.clone(), c))
                    .collect::<Vec<_>>()
            },
            &[&x, &idx, &u],
        );
        let (iv, uv) = (idx.to_f64_vec(), u.to_f64_vec());
        for (o, &c) in out.iter().zip(&COMBINES[1..]) {
            let mut w = x.to_f64_vec();
            for p in 0..5 {
                let (r, col) = (iv[2 * p] as usize, iv[2 * p + 1] as usize);
                if r < 4 && col < 5 {
                    w[r * 5 + col] = combine(c, w[r * 5 + col], uv[p]);
                }
            }
            check(
                o,
                dtype,
                &[4, 5],
                &w,
                Class::Simple,
                &format!("scatter {c:?} {dtype}"),
            );
        }
    }
}

/// Pins what out-of-range indices give, as `take` and `gather` document
/// (XLA's clamp), with literal expected values rather than a reference.
#[test]
fn out_of_range_indices_clamp_as_documented() {
    use tessel_dsl::{S64, U32};
    let x = tensor(&[10.0, 11.0, 12.0, 13.0], &[4], F32);
    let big = f64::from(i32::MAX);
    let small = f64::from(i32::MIN);
    let signed = tensor(&[-1.0, 4.0, 100.0, small, big, 2.0], &[6], S32);
    let wide = tensor(&[-1e15, 1e15, 3.0], &[3], S64);
    let unsigned = tensor(&[f64::from(u32::MAX), 0.0], &[2], U32);
    // Window starts along the 5 rows of a 5 x 2 matrix, windows of 2 rows.
    let m = tensor(
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[5, 2],
        F32,
    );
    let starts = tensor(&[-7.0, 4.0, 3.0], &[3, 1], S32);
    let out = run(
        |t| {
            let windows = GatherDims {
                offset_dims: vec![1, 2],
                collapsed_slice_dims: vec![],
                start_index_map: vec![0],
                index_vector_dim: 1,
            };
            vec![
                t[0].take_with(t[1], 0, TakeMode::PromiseInBounds),
                t[0].take_with(t[2], 0, TakeMode::PromiseInBounds),
                t[0].take_with(t[3], 0, TakeMode::PromiseInBounds),
                t[4].gather(t[5], windows, &[2, 2]),
                t[0].take(t[1], 0),
                t[0].take(t[2], 0),
                t[0].take(t[3], 0),
            ]
        },
        &[&x, &signed, &wide, &unsigned, &m, &starts],
    );
    // The default fill: -1 counts from the end, the rest read NaN.
    let nan = |v: Vec<f32>| v.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
    assert_eq!(
        nan(out[4].to_vec::<f32>().unwrap()),
        [false, true, true, true, true, false]
    );
    assert_eq!(out[4].to_vec::<f32>().unwrap()[0], 13.0);
    assert_eq!(out[4].to_vec::<f32>().unwrap()[5], 12.0);
    assert_eq!(nan(out[5].to_vec::<f32>().unwrap()), [true, true, false]);
    assert_eq!(out[5].to_vec::<f32>().unwrap()[2], 13.0);
    assert_eq!(nan(out[6].to_vec::<f32>().unwrap()), [true, false]);
    // Promised in bounds, XLA's gather clamps: below 0 reads element 0
    // (-1 does not count from the end); n or more reads element n - 1.
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        [10.0, 13.0, 13.0, 10.0, 13.0, 12.0]
    );
    assert_eq!(out[1].to_vec::<f32>().unwrap(), [10.0, 13.0, 13.0]);
    assert_eq!(out[2].to_vec::<f32>().unwrap(), [13.0, 10.0]);
    // A window start is clamped so the whole window fits: start 4 of a
    // 2-row window over 5 rows reads rows 3 and 4, like start 3.
    assert_eq!(
        out[3].to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 6.0, 7.0, 8.0, 9.0]
    );
    // No element to clamp to: a kernel error.
    let e = trace_error(
        |t| t[0].take(t[1], 0),
        &[spec(&[0, 3], F32), spec(&[2], S32)],
    );
    assert!(e.message.contains("has no element"), "{}", e.message);
}

/// Taking along an axis with no elements: no indices give an empty result;
/// any index is a kernel error (there is no element to clamp to).
#[test]
fn take_along_an_empty_axis() {
    let mut rng = Rng::new(61);
    let x = random(&mut rng, &[0, 3], F32, 0.0, 1.0);
    let none = tensor(&[], &[0], S32);
    let some = tensor(&[0.0, 1.0], &[2], S32);
    let out = run(
        |t| vec![t[0].take(t[1], 0), t[1].take(t[1], 0)],
        &[&x, &none],
    );
    assert_eq!(out[0].shape(), &[0, 3]);
    assert_eq!(out[1].shape(), &[0]);
    let e = trace_error(
        |a| a[0].take(a[1], 0),
        &[x.spec().clone(), some.spec().clone()],
    );
    assert!(e.message.contains("has no element"), "{}", e.message);
}
