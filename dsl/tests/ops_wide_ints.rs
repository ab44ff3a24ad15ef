//! The 16-bit and unsigned 64-bit integer types (u16, s16, u64) on the CPU
//! plugin and on the interpreter, which must give the same bytes: host →
//! device → host round trips of their extremes, casts to floats and other
//! integers and back, wrapping arithmetic, comparisons, and the unsigned
//! order of u64 values from 2^63 up, against plain Rust.

mod common;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::Device;
use tessel_dsl::trace::Outputs;
use tessel_dsl::{Element, HostTensor, Tensor, F32, F64, PRED, S16, S32, S64, U16, U32, U64, U8};

fn all_comparisons(a: Tensor, b: Tensor) -> Vec<Tensor> {
    vec![a.eq(b), a.ne(b), a.lt(b), a.le(b), a.gt(b), a.ge(b)]
}
/// Runs `body` on the CPU plugin and on the interpreter, checks that both
/// give the same bytes, and returns the plugin's results.
#[track_caller]
fn on_both<O: Outputs>(body: impl Fn(&[Tensor]) -> O, args: &[&HostTensor]) -> Vec<HostTensor> {
    let k = Kernel::new(fresh_name("wide_ints"), body);
    let xla = k.run(&device(), args).expect("the plugin runs");
    let interp = k
        .run(&Device::interpreter(), args)
        .expect("the interpreter runs");
    assert_eq!(xla.len(), interp.len());
    for (i, (x, e)) in xla.iter().zip(&interp).enumerate() {
        assert_eq!(x.spec(), e.spec(), "output {i}");
        assert_eq!(
            x.as_bytes(),
            e.as_bytes(),
            "output {i}: plugin {x:?}, interpreter {e:?}"
        );
    }
    xla
}

/// Extremes and a few ordinary values of u16, s16 and u64.
fn extremes() -> (Vec<u16>, Vec<i16>, Vec<u64>) {
    (
        vec![0, 1, 2, 255, 256, 32767, 32768, 65534, 65535],
        vec![-32768, -32767, -256, -1, 0, 1, 255, 32766, 32767],
        vec![
            0,
            1,
            3,
            (1 << 53) + 1,
            (1 << 63) - 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX - 1,
            u64::MAX,
        ],
    )
}

/// `got` read back as `T`, which must be its dtype.
#[track_caller]
fn values<T: Element>(got: &HostTensor) -> Vec<T> {
    got.to_vec::<T>().expect("the expected dtype")
}

#[test]
fn u16_s16_u64_round_trip_host_device_host() {
    let (u, s, w) = extremes();
    let tensors = [
        HostTensor::from_slice(&u, [3, 3]).unwrap(),
        HostTensor::from_slice(&s, [3, 3]).unwrap(),
        HostTensor::from_slice(&w, [3, 3]).unwrap(),
    ];
    for (t, d) in tensors.iter().zip([U16, S16, U64]) {
        assert_eq!(t.dtype(), d);
        let back = device().to_device(t).unwrap().to_host().unwrap();
        assert_eq!(&back, t, "{d} through a device buffer");
        let back = Device::interpreter()
            .to_device(t)
            .unwrap()
            .to_host()
            .unwrap();
        assert_eq!(&back, t, "{d} through an interpreter buffer");
        // Through a compiled kernel, and reshaped there.
        let out = on_both(|a| vec![a[0], a[0].reshape(&[9])], &[t]);
        assert_eq!(out[0], *t, "{d} identity");
        assert_eq!(out[1].as_bytes(), t.as_bytes(), "{d} reshape");
    }
    assert_eq!(values::<u16>(&tensors[0]), u);
    assert_eq!(values::<i16>(&tensors[1]), s);
    assert_eq!(values::<u64>(&tensors[2]), w);
}

#[test]
fn u16_s16_u64_casts_to_floats_and_back() {
    let (u, s, w) = extremes();
    let (u, s, w) = (
        HostTensor::from_slice(&u, [9]).unwrap(),
        HostTensor::from_slice(&s, [9]).unwrap(),
        HostTensor::from_slice(&w, [9]).unwrap(),
    );
    // Every u16 and s16 is exact in f32: there and back is the identity.
    for (x, d) in [(&u, U16), (&s, S16)] {
        let out = on_both(
            |t| {
                vec![
                    t[0].cast(F32),
                    t[0].cast(F32).cast(d),
                    t[0].cast(F64).cast(d),
                ]
            },
            &[x],
        );
        assert_eq!(out[0].to_f64_vec(), x.to_f64_vec(), "{d} -> f32");
        assert_eq!(out[1], *x, "{d} -> f32 -> {d}");
        assert_eq!(out[2], *x, "{d} -> f64 -> {d}");
    }
    // u64 to f64 and f32 rounds to nearest (read unsigned: 2^63 and up
    // stay positive); back from f64, values f64 holds come back exactly and
    // 2^64 (the rounding of u64::MAX) saturates to u64::MAX.
    let out = on_both(
        |t| vec![t[0].cast(F64), t[0].cast(F32), t[0].cast(F64).cast(U64)],
        &[&w],
    );
    let wv = values::<u64>(&w);
    let want64: Vec<f64> = wv.iter().map(|&v| v as f64).collect();
    let want32: Vec<f32> = wv.iter().map(|&v| v as f32).collect();
    assert_eq!(values::<f64>(&out[0]), want64, "u64 -> f64");
    assert_eq!(values::<f32>(&out[1]), want32, "u64 -> f32");
    let back: Vec<u64> = want64.iter().map(|&v| v as u64).collect();
    assert_eq!(values::<u64>(&out[2]), back, "u64 -> f64 -> u64");
    assert_eq!(back[5], 1 << 63);
    assert_eq!(back[8], u64::MAX);
    // Floats out of range saturate, negative ones to 0 for unsigned types.
    let f = tensor(&[-5.0, -0.7, 0.9, 40000.5, 70000.0, 1e20], &[6], F32);
    let out = on_both(
        |t| vec![t[0].cast(U16), t[0].cast(S16), t[0].cast(U64)],
        &[&f],
    );
    assert_eq!(values::<u16>(&out[0]), vec![0, 0, 0, 40000, 65535, 65535]);
    assert_eq!(values::<i16>(&out[1]), vec![-5, 0, 0, 32767, 32767, 32767]);
    let big = 1e20f32 as u64;
    assert_eq!(values::<u64>(&out[2]), vec![0, 0, 0, 40000, 70000, big]);
}

#[test]
fn u16_s16_u64_integer_casts_keep_the_low_bits() {
    let (u, s, w) = extremes();
    let (ut, st, wt) = (
        HostTensor::from_slice(&u, [9]).unwrap(),
        HostTensor::from_slice(&s, [9]).unwrap(),
        HostTensor::from_slice(&w, [9]).unwrap(),
    );
    let out = on_both(
        |t| {
            vec![
                t[0].cast(S16),
                t[0].cast(U64),
                t[0].cast(U8),
                t[0].cast(PRED),
            ]
        },
        &[&ut],
    );
    let want: Vec<i16> = u.iter().map(|&v| v as i16).collect();
    assert_eq!(values::<i16>(&out[0]), want, "u16 -> s16");
    let want: Vec<u64> = u.iter().map(|&v| u64::from(v)).collect();
    assert_eq!(values::<u64>(&out[1]), want, "u16 -> u64");
    let want: Vec<u8> = u.iter().map(|&v| v as u8).collect();
    assert_eq!(values::<u8>(&out[2]), want, "u16 -> u8");
    let want: Vec<bool> = u.iter().map(|&v| v != 0).collect();
    assert_eq!(values::<bool>(&out[3]), want, "u16 -> pred");
    let out = on_both(
        |t| vec![t[0].cast(U16), t[0].cast(U64), t[0].cast(S32)],
        &[&st],
    );
    let want: Vec<u16> = s.iter().map(|&v| v as u16).collect();
    assert_eq!(values::<u16>(&out[0]), want, "s16 -> u16");
    let want: Vec<u64> = s.iter().map(|&v| v as u64).collect();
    assert_eq!(values::<u64>(&out[1]), want, "s16 -> u64 sign-extends");
    let want: Vec<i32> = s.iter().map(|&v| i32::from(v)).collect();
    assert_eq!(values::<i32>(&out[2]), want, "s16 -> s32");
    let out = on_both(
        |t| {
            vec![
                t[0].cast(S64),
                t[0].cast(U16),
                t[0].cast(S16),
                t[0].cast(U32),
            ]
        },
        &[&wt],
    );
    let want: Vec<i64> = w.iter().map(|&v| v as i64).collect();
    assert_eq!(values::<i64>(&out[0]), want, "u64 -> s64");
    let want: Vec<u16> = w.iter().map(|&v| v as u16).collect();
    assert_eq!(values::<u16>(&out[1]), want, "u64 -> u16");
    let want: Vec<i16> = w.iter().map(|&v| v as i16).collect();
    assert_eq!(values::<i16>(&out[2]), want, "u64 -> s16");
    let want: Vec<u32> = w.iter().map(|&v| v as u32).collect();
    assert_eq!(values::<u32>(&out[3]), want, "u64 -> u32");
}

/// Rust's wrapping `+`, `-`, `*` and unsigned/signed `/`, `%` (XLA's `x / 0`
/// is all ones and `x % 0` is `x`), max and min of `a` and `b`, lane by lane.
macro_rules! int_refs {
    ($a:expr, $b:expr) => {{
        let z = $a.iter().zip($b.iter());
        [
            z.clone()
                .map(|(x, y)| x.wrapping_add(*y))
                .collect::<Vec<_>>(),
            z.clone().map(|(x, y)| x.wrapping_sub(*y)).collect(),
            z.clone().map(|(x, y)| x.wrapping_mul(*y)).collect(),
            z.clone()
                .map(|(x, y)| x.checked_div(*y).unwrap_or(if *y == 0 { !0 } else { *x }))
                .collect(),
            z.clone()
                .map(|(x, y)| if *y == 0 { *x } else { x.wrapping_rem(*y) })
                .collect(),
            z.clone().map(|(x, y)| *x.max(y)).collect(),
            z.map(|(x, y)| *x.min(y)).collect(),
        ]
    }};
}

fn arithmetic(t: &[Tensor]) -> Vec<Tensor> {
    let (a, b) = (t[0], t[1]);
    vec![
        a + b,
        a - b,
        a * b,
        a / b,
        a % b,
        a.maximum(b),
        a.minimum(b),
    ]
}

fn comparisons(t: &[Tensor]) -> Vec<Tensor> {
    all_comparisons(t[0], t[1])
}

/// The six comparisons of `a` and `b` in Rust, lane by lane.
fn compare_refs<T: PartialOrd>(a: &[T], b: &[T]) -> Vec<Vec<bool>> {
    let fs: [fn(&T, &T) -> bool; 6] = [
        |x, y| x == y,
        |x, y| x != y,
        |x, y| x < y,
        |x, y| x <= y,
        |x, y| x > y,
        |x, y| x >= y,
    ];
    fs.iter()
        .map(|f| a.iter().zip(b).map(|(x, y)| f(x, y)).collect())
        .collect()
}

#[test]
fn u16_s16_u64_arithmetic_wraps_and_compares_as_rust_does() {
    let (u, s, w) = extremes();
    // Each lane's partner: one, the extremes, zero (division by zero) and -1.
    let ub: Vec<u16> = vec![1, 65535, 7, 0, 65535, 2, 32768, 3, 1];
    let sb: Vec<i16> = vec![-1, 1, -32768, 0, 32767, -1, 1, 2, 1];
    let wb: Vec<u64> = vec![u64::MAX, 1 << 63, 0, 3, 1, 1 << 63, 7, 2, 1];
    let x = |v: &[u16]| HostTensor::from_slice(v, [9]).unwrap();
    let out = on_both(arithmetic, &[&x(&u), &x(&ub)]);
    for (o, want) in out.iter().zip(int_refs!(u, ub)) {
        assert_eq!(values::<u16>(o), want, "u16");
    }
    assert_eq!(values::<u16>(&out[0])[8], 0, "65535 + 1 wraps to 0");
    let cmp = on_both(comparisons, &[&x(&u), &x(&ub)]);
    for (o, want) in cmp.iter().zip(compare_refs(&u, &ub)) {
        assert_eq!(values::<bool>(o), want, "u16 compare");
    }

    let x = |v: &[i16]| HostTensor::from_slice(v, [9]).unwrap();
    let out = on_both(arithmetic, &[&x(&s), &x(&sb)]);
    for (o, want) in out.iter().zip(int_refs!(s, sb)) {
        assert_eq!(values::<i16>(o), want, "s16");
    }
    assert_eq!(values::<i16>(&out[0])[8], i16::MIN, "32767 + 1 wraps");
    assert_eq!(values::<i16>(&out[3])[0], i16::MIN, "MIN / -1 is MIN");
    let cmp = on_both(comparisons, &[&x(&s), &x(&sb)]);
    for (o, want) in cmp.iter().zip(compare_refs(&s, &sb)) {
        assert_eq!(values::<bool>(o), want, "s16 compare");
    }

    let x = |v: &[u64]| HostTensor::from_slice(v, [9]).unwrap();
    let out = on_both(arithmetic, &[&x(&w), &x(&wb)]);
    for (o, want) in out.iter().zip(int_refs!(w, wb)) {
        assert_eq!(values::<u64>(o), want, "u64");
    }
    assert_eq!(values::<u64>(&out[0])[8], 0, "u64::MAX + 1 wraps to 0");
    let cmp = on_both(comparisons, &[&x(&w), &x(&wb)]);
    for (o, want) in cmp.iter().zip(compare_refs(&w, &wb)) {
        assert_eq!(values::<bool>(o), want, "u64 compare (unsigned)");
    }
}

#[test]
fn u64_orders_unsigned_in_reductions_sorts_and_clamps() {
    let (_, _, w) = extremes();
    let mut shuffled = w.clone();
    shuffled.rotate_left(4);
    shuffled.swap(0, 7);
    let x = HostTensor::from_slice(&shuffled, [9]).unwrap();
    let out = on_both(
        |t| {
            vec![
                t[0].max(&[0]),
                t[0].min(&[0]),
                t[0].sort(0, false),
                t[0].argmax(0),
                t[0].clamp(2, 1u64 << 63),
                t[0].shift_right_logical(60u32),
                t[0].sum(&[0]),
            ]
        },
        &[&x],
    );
    assert_eq!(values::<u64>(&out[0]), vec![u64::MAX]);
    assert_eq!(values::<u64>(&out[1]), vec![0]);
    assert_eq!(values::<u64>(&out[2]), w, "ascending, unsigned");
    let at = shuffled.iter().position(|&v| v == u64::MAX).unwrap();
    assert_eq!(out[3].to_f64_vec(), vec![at as f64]);
    let want: Vec<u64> = shuffled.iter().map(|&v| v.clamp(2, 1 << 63)).collect();
    assert_eq!(values::<u64>(&out[4]), want);
    let want: Vec<u64> = shuffled.iter().map(|&v| v >> 60).collect();
    assert_eq!(values::<u64>(&out[5]), want);
    let sum = shuffled.iter().fold(0u64, |a, &b| a.wrapping_add(b));
    assert_eq!(values::<u64>(&out[6]), vec![sum], "the sum wraps");
}

#[test]
fn u64_indices_from_2_pow_63_clamp_to_the_end() {
    let x = HostTensor::from_vec(vec![10i32, 11, 12, 13, 14], [5]).unwrap();
    let idx = HostTensor::from_vec(vec![0u64, 3, 1 << 63, u64::MAX], [4]).unwrap();
    let start = HostTensor::scalar(u64::MAX - 1);
    let out = on_both(
        |t| {
            vec![
                t[0].take_with(t[1], 0, tessel_dsl::TakeMode::PromiseInBounds),
                t[0].dynamic_slice(&[t[2]], &[2]),
                t[0].take(t[1], 0),
            ]
        },
        &[&x, &idx, &start],
    );
    assert_eq!(values::<i32>(&out[0]), vec![10, 13, 14, 14]);
    assert_eq!(values::<i32>(&out[1]), vec![13, 14]);
    // The default mode reads the fill value past the end.
    assert_eq!(values::<i32>(&out[2]), vec![10, 13, i32::MIN, i32::MIN]);
}
