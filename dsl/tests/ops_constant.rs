//! Constants (`zeros`, `ones`, `full`, `scalar`, `constant`, `zeros_like`)
//! and index generators (`iota`, `arange`) for every dtype.

mod common;

use common::*;
use tessel_dsl::{
    DType, HostTensor, Tensor, BF16, F16, F32, F64, F8E4M3FN, PRED, S32, S8, U32, U8,
};

/// A value every dtype holds: true, a positive or a negative number.
fn scalar_value(d: DType) -> f64 {
    if d.is_pred() {
        1.0
    } else if d.is_unsigned() {
        2.0
    } else {
        -1.0
    }
}

#[test]
fn constants_of_every_kind() {
    let dtypes = [F32, F64, BF16, F16, F8E4M3FN, S32, S8, U8, U32, PRED];
    let hosts: Vec<HostTensor> = dtypes
        .iter()
        .map(|&d| {
            HostTensor::from_fn(spec(&[2, 3], d), |i| {
                if d.is_pred() {
                    (i % 2) as f64
                } else {
                    i as f64 * 1.5 - 2.0
                }
            })
        })
        .collect();
    let splat = tensor(&[2.5], &[1], BF16);
    let rank0 = HostTensor::scalar(-4i32);
    let x = tensor(&[1.0, 2.0], &[2], F32);
    let out = run(
        |t| {
            let mut r = Vec::new();
            for &d in &dtypes {
                r.push(Tensor::zeros([2, 3], d));
                r.push(Tensor::ones(vec![4], d));
                r.push(Tensor::full([3, 1], if d.is_pred() { 1.0 } else { 3.0 }, d));
                r.push(Tensor::scalar(scalar_value(d), d));
            }
            r.extend(hosts.iter().map(Tensor::constant));
            r.push(Tensor::constant(&splat));
            r.push(Tensor::constant(&rank0));
            r.push(t[0].zeros_like());
            r
        },
        &[&x],
    );
    let mut k = 0;
    for &d in &dtypes {
        let s = scalar_value(d);
        let f = if d.is_pred() { 1.0 } else { 3.0 };
        check(
            &out[k],
            d,
            &[2, 3],
            &[0.0; 6],
            Class::Exact,
            &format!("zeros {d}"),
        );
        check(
            &out[k + 1],
            d,
            &[4],
            &[1.0; 4],
            Class::Exact,
            &format!("ones {d}"),
        );
        check(
            &out[k + 2],
            d,
            &[3, 1],
            &[f; 3],
            Class::Exact,
            &format!("full {d}"),
        );
        check(
            &out[k + 3],
            d,
            &[],
            &[s],
            Class::Exact,
            &format!("scalar {d}"),
        );
        k += 4;
    }
    for h in &hosts {
        check(
            &out[k],
            h.dtype(),
            &[2, 3],
            &h.to_f64_vec(),
            Class::Exact,
            &format!("constant {}", h.dtype()),
        );
        k += 1;
    }
    check(
        &out[k],
        BF16,
        &[1],
        &[2.5],
        Class::Exact,
        "one-element constant",
    );
    check(
        &out[k + 1],
        S32,
        &[],
        &[-4.0],
        Class::Exact,
        "rank-0 constant",
    );
    check(
        &out[k + 2],
        F32,
        &[2],
        &[0.0, 0.0],
        Class::Exact,
        "zeros_like",
    );
}

#[test]
fn iota_and_arange() {
    let x = tensor(&[0.0], &[1], F32);
    let types = [S32, F32, U32, U8, F16];
    let out = run(
        |_| {
            let mut r = Vec::new();
            for &d in &types {
                for dim in 0..3 {
                    r.push(Tensor::iota([2, 3, 4], dim, d));
                }
                r.push(Tensor::arange(7, d));
            }
            r.push(Tensor::arange(1, F64));
            r
        },
        &[&x],
    );
    let mut k = 0;
    for &d in &types {
        for dim in 0..3 {
            let w: Vec<f64> = (0..24)
                .map(|i| unravel(i, &[2, 3, 4])[dim] as f64)
                .collect();
            check(
                &out[k],
                d,
                &[2, 3, 4],
                &w,
                Class::Exact,
                &format!("iota {d} axis {dim}"),
            );
            k += 1;
        }
        let w: Vec<f64> = (0..7).map(f64::from).collect();
        check(&out[k], d, &[7], &w, Class::Exact, &format!("arange {d}"));
        k += 1;
    }
    check(&out[k], F64, &[1], &[0.0], Class::Exact, "arange 1");
}
