//! Scalar functions the standard library lacks: `erf`, and XLA's integer
//! power.

/// `exp(-a * a)`, with the rounding error of `a * a` taken into account
/// (it would otherwise cost `a^2` ulps).
fn exp_neg_square(a: f64) -> f64 {
    let hi = a * a;
    let lo = a.mul_add(a, -hi);
    (-hi).exp() * (1.0 - lo)
}

/// The error function, to a few ulps of `f64`: its Taylor series below
/// |x| = 0.8, a series of positive terms (summed with compensation) below
/// 2.5, the continued fraction of `erfc` above.
pub(crate) fn erf(x: f64) -> f64 {
    use std::f64::consts::FRAC_2_SQRT_PI;
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a < 0.8 {
        // erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = a * a;
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        loop {
            n += 1.0;
            term *= -x2 / n;
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-18 * sum || n > 60.0 {
                break;
            }
        }
        return (sum * FRAC_2_SQRT_PI).copysign(x);
    }
    if a < 2.5 {
        // erf(x) = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (1 3 5 ... (2n+1)).
        let x2 = a * a;
        let (mut term, mut sum, mut carry, mut n) = (a, a, 0.0, 0.0);
        while term > 1e-18 * sum && n < 200.0 {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            let y = term - carry;
            let t = sum + y;
            carry = (t - sum) - y;
            sum = t;
        }
        return (FRAC_2_SQRT_PI * exp_neg_square(a) * sum).copysign(x);
    }
    if a > 6.5 {
        return 1.0f64.copysign(x);
    }
    // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
    let mut t = a;
    for k in (1..=200).rev() {
        t = a + (f64::from(k) / 2.0) / t;
    }
    let erfc = exp_neg_square(a) * (FRAC_2_SQRT_PI / 2.0) / t;
    (1.0 - erfc).copysign(x)
}

/// `base` to the power `exp` in wrapping integer arithmetic, as XLA
/// computes it: by squaring for `exp >= 0`; for `exp < 0`, 1 when `base` is
/// 1 and 0 otherwise.
pub(crate) fn int_pow(base: i64, exp: i64, wrap: fn(i64) -> i64) -> i64 {
    if exp < 0 {
        return i64::from(base == 1);
    }
    int_pow_unsigned(base, exp as u64, wrap)
}

/// `base` to the power `exp` by squaring, in wrapping integer arithmetic
/// (the exponent of an unsigned type, which is never negative).
pub(crate) fn int_pow_unsigned(base: i64, exp: u64, wrap: fn(i64) -> i64) -> i64 {
    let (mut acc, mut b, mut e) = (1i64, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            acc = wrap(acc.wrapping_mul(b));
        }
        b = wrap(b.wrapping_mul(b));
        e >>= 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Correctly rounded values.
        let cases = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (0.79, 0.736_103_453_820_691_1),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (2.49, 0.999_570_712_132_266_1),
            (2.5, 0.999_593_047_982_555),
            (3.0, 0.999_977_909_503_001_4),
            (4.0, 0.999_999_984_582_742_1),
            (-1.5, -0.966_105_146_475_310_7),
        ];
        for (x, want) in cases {
            let got: f64 = erf(x);
            let ulps = (got - want).abs() / (f64::EPSILON * want.abs().max(f64::MIN_POSITIVE));
            assert!(ulps <= 2.0, "erf({x}) = {got}, want {want} ({ulps} ulps)");
        }
        assert_eq!(erf(10.0), 1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn int_pow_wraps_and_handles_negative_exponents() {
        let w: fn(i64) -> i64 = |x| i64::from(x as i32);
        assert_eq!(int_pow(3, 4, w), 81);
        assert_eq!(int_pow(2, 31, w), i64::from(i32::MIN));
        assert_eq!(int_pow(5, -1, w), 0);
        assert_eq!(int_pow(1, -3, w), 1);
        // A u64 exponent from 2^63 up is not negative.
        let id: fn(i64) -> i64 = |x| x;
        assert_eq!(int_pow_unsigned(2, (1u64 << 63) + 1, id), 0);
        assert_eq!(int_pow_unsigned(-1, (1u64 << 63) + 1, id), -1);
        assert_eq!(int_pow_unsigned(3, 2, id), 9);
    }
}
