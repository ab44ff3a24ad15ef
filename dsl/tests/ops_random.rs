//! Counter-based random numbers: bit-exact against the host reference,
//! uniform samples, dropout statistics and seed determinism.

mod common;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::random::{random_bits, random_bits_reference, uniform};
use tessel_dsl::{DType, HostTensor, Tensor, BF16, F16, F32, F64, F8E4M3FN, U32};

#[test]
fn random_bits_match_the_host_reference_bit_for_bit() {
    let x = tensor(&[0.0], &[1], F32);
    let shapes: [&[usize]; 4] = [&[], &[7], &[3, 5], &[1000]];
    for seed in [0u32, 1, 12345, u32::MAX] {
        let out = run(
            |_| {
                shapes
                    .iter()
                    .map(|s| random_bits(seed, s.to_vec()))
                    .collect::<Vec<_>>()
            },
            &[&x],
        );
        for (o, s) in out.iter().zip(shapes) {
            assert_eq!(o.dtype(), U32);
            assert_eq!(o.shape(), s);
            let want: Vec<u32> = (0..o.num_elements() as u32)
                .map(|i| random_bits_reference(seed, i))
                .collect();
            assert_eq!(o.to_vec::<u32>().unwrap(), want, "seed {seed} shape {s:?}");
        }
    }
}

#[test]
fn traced_seeds_give_the_same_bits_as_static_ones() {
    let k = Kernel::new(fresh_name("bits"), |a: &[Tensor]| {
        vec![random_bits(a[0], [4, 25]), random_bits(a[1], [4, 25])]
    });
    for seed in [3u32, 77, 4_000_000_000] {
        let out = k
            .run(
                &device(),
                &[&HostTensor::scalar(seed), &HostTensor::scalar(seed as i32)],
            )
            .unwrap();
        let want: Vec<u32> = (0..100).map(|i| random_bits_reference(seed, i)).collect();
        assert_eq!(out[0].to_vec::<u32>().unwrap(), want, "u32 seed {seed}");
        assert_eq!(
            out[1].to_vec::<u32>().unwrap(),
            want,
            "s32 seed {seed} (cast to u32)"
        );
    }
}

#[test]
fn uniform_samples_lie_in_0_1_with_mean_one_half() {
    let x = tensor(&[0.0], &[1], F32);
    let n = 10_000;
    let dtypes = [F32, F64, BF16, F16, F8E4M3FN];
    let out = run(
        |_| {
            dtypes
                .iter()
                .map(|&d| uniform(9u32, [100, 100], d))
                .collect::<Vec<_>>()
        },
        &[&x],
    );
    for (o, d) in out.iter().zip(dtypes) {
        assert_eq!(o.dtype(), d);
        assert_eq!(o.shape(), &[100, 100]);
        let v = o.to_f64_vec();
        assert!(
            v.iter().all(|&u| (0.0..1.0).contains(&u)),
            "{d}: a sample outside [0, 1): {:?}",
            v.iter().find(|&&u| !(0.0..1.0).contains(&u))
        );
        let mean = v.iter().sum::<f64>() / n as f64;
        // The standard error of the mean is 0.29 / 100; allow five of them
        // plus the dtype's quantization.
        assert!(
            (mean - 0.5).abs() < 0.015 + 2f64.powi(-(mantissa_digits(d) as i32)),
            "{d}: mean {mean}"
        );
        let var = v.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((var - 1.0 / 12.0).abs() < 0.01, "{d}: variance {var}");
    }
    // f32 samples are exactly the top 24 bits of the random bits.
    let want: Vec<f64> = (0..n as u32)
        .map(|i| f64::from(random_bits_reference(9, i) >> 8) / 16_777_216.0)
        .collect();
    check(
        &out[0],
        F32,
        &[100, 100],
        &want,
        Class::Exact,
        "f32 uniform",
    );
}

fn mantissa_digits(d: DType) -> u32 {
    match d {
        DType::BF16 => 8,
        DType::F16 => 11,
        DType::F8E4M3FN => 4,
        DType::F8E5M2 => 3,
        _ => 24,
    }
}

#[test]
fn dropout_zeroes_about_rate_and_scales_the_rest() {
    let shape = [50, 200];
    let n = 10_000;
    let x = HostTensor::from_fn(spec(&shape, F32), |i| 1.0 + (i % 7) as f64);
    let k = Kernel::new(fresh_name("dropout"), |a: &[Tensor]| {
        vec![a[0].dropout(0.3, a[1]), a[0].dropout(0.0, a[1])]
    });
    let runs: Vec<Vec<HostTensor>> = [5u32, 5, 6]
        .iter()
        .map(|&s| k.run(&device(), &[&x, &HostTensor::scalar(s)]).unwrap())
        .collect();
    let xv = x.to_f64_vec();
    for (seed, out) in [5u32, 5, 6].iter().zip(&runs) {
        let y = out[0].to_f64_vec();
        let zeros = y.iter().filter(|&&v| v == 0.0).count();
        let frac = zeros as f64 / n as f64;
        // Binomial(10000, 0.3): standard deviation 0.0046.
        assert!(
            (frac - 0.3).abs() < 0.025,
            "seed {seed}: zero fraction {frac}"
        );
        // The mask is exactly `uniform >= rate` and kept values are x / (1 - rate).
        for i in 0..n {
            let u = (random_bits_reference(*seed, i as u32) >> 8) as f32 / 16_777_216.0;
            let want = if u >= 0.3f32 {
                (xv[i] as f32 * (1.0 / (1.0 - 0.3f64)) as f32) as f64
            } else {
                0.0
            };
            assert!(
                close(y[i], want, tol(F32, Class::Simple)),
                "seed {seed} [{i}]: got {}, want {want}",
                y[i]
            );
        }
        check(
            &out[1],
            F32,
            &shape,
            &xv,
            Class::Exact,
            "rate 0 is the identity",
        );
    }
    assert_eq!(runs[0][0], runs[1][0], "same seed, same mask");
    assert_ne!(runs[0][0], runs[2][0], "different seeds, different masks");
    let same = runs[0][0]
        .to_f64_vec()
        .iter()
        .zip(runs[2][0].to_f64_vec())
        .filter(|(a, b)| (**a == 0.0) == (*b == 0.0))
        .count();
    // Independent masks agree on 0.7^2 + 0.3^2 = 58% of positions.
    assert!(
        (same as f64 / n as f64 - 0.58).abs() < 0.03,
        "masks agree on {same}"
    );
}

#[test]
fn different_seeds_give_different_streams() {
    let x = tensor(&[0.0], &[1], F32);
    let out = run(
        |_| {
            vec![
                random_bits(1u32, [256]),
                random_bits(2u32, [256]),
                uniform(1u32, [256], F32),
            ]
        },
        &[&x],
    );
    let (a, b) = (
        out[0].to_vec::<u32>().unwrap(),
        out[1].to_vec::<u32>().unwrap(),
    );
    let equal = a.iter().zip(&b).filter(|(p, q)| p == q).count();
    assert!(equal <= 1, "{equal} equal words between seeds 1 and 2");
    // All 256 words of one stream are distinct (a bijection of the index for a fixed seed).
    let mut s = a.clone();
    s.sort_unstable();
    s.dedup();
    assert_eq!(s.len(), 256);
}
