//! Broadcasts, reshapes, transposes, slices, dynamic slices, concat, pad.

use tessel_dsl::{concat, Tensor, S32};

use crate::fd::{check, data};

#[test]
fn broadcast_reshape_transpose() {
    let x = data(1, &[3, 1, 2], -1.0, 1.0);
    check(
        "broadcast_to",
        |a| vec![a[0].broadcast_to([4, 3, 5, 2]) * 1.5],
        &[x.clone()],
    );
    check(
        "broadcast_in_dim",
        |a| vec![a[0].reshape(&[3, 2]).broadcast_in_dim([3, 7, 2], &[0, 2])],
        &[data(2, &[3, 2], -1.0, 1.0)],
    );
    check(
        "reshape",
        |a| vec![a[0].reshape(&[2, 3]).exp()],
        &[x.clone()],
    );
    check(
        "transpose",
        |a| vec![a[0].transpose(&[2, 0, 1]).sin()],
        &[x.clone()],
    );
    check(
        "expand_squeeze",
        |a| vec![a[0].squeeze(1).expand_dims(0)],
        &[x],
    );
}

#[test]
fn static_and_dynamic_slices() {
    let x = data(3, &[7, 5], -1.0, 1.0);
    check(
        "slice_strided",
        |a| vec![a[0].slice(&[1, 0], &[7, 5], &[2, 3]).square()],
        &[x.clone()],
    );
    check(
        "slice_empty",
        |a| vec![a[0].slice(&[2, 1], &[2, 4], &[1, 1]), a[0] * 2.0],
        &[x.clone()],
    );
    check(
        "slice_axis",
        |a| vec![a[0].slice_axis(-1, 1, 4).exp(), a[0].narrow(0, 1, 1) * 3.0],
        &[x.clone()],
    );
    // Traced starts, one of them out of range (XLA clamps it).
    check(
        "dynamic_slice",
        |a| {
            let i = Tensor::scalar(2.0, S32);
            let j = Tensor::scalar(9.0, S32);
            vec![a[0].dynamic_slice(&[i, j], &[3, 2]).tanh()]
        },
        &[x.clone()],
    );
    check(
        "dynamic_update_slice",
        |a| {
            let i = Tensor::scalar(4.0, S32);
            let j = Tensor::scalar(1.0, S32);
            vec![a[0].dynamic_update_slice(a[1].square(), &[i, j]).exp()]
        },
        &[x, data(4, &[2, 3], -1.0, 1.0)],
    );
}

#[test]
fn concat_and_pad() {
    let a0 = data(5, &[2, 3], -1.0, 1.0);
    let a1 = data(6, &[2, 1], -1.0, 1.0);
    check(
        "concat",
        |a| vec![concat(&[a[0], a[1], a[0]], 1).sin()],
        &[a0.clone(), a1],
    );
    check(
        "pad",
        |a| {
            vec![a[0]
                .pad(a[1].sum(&[0, 1]), &[1, -1], &[2, 0], &[1, 2])
                .square()]
        },
        &[a0, data(7, &[1, 1], -1.0, 1.0)],
    );
}
