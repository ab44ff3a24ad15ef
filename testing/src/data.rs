//! Deterministic data: a PRNG and random host tensors of any dtype.

use tessel_dsl::{DType, HostTensor, TensorSpec};

/// SplitMix64: tiny, deterministic, good enough for test data.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

/// A spec from a slice shape.
pub fn spec(shape: &[usize], dtype: DType) -> TensorSpec {
    TensorSpec::new(shape.to_vec(), dtype)
}

/// Random values of `dtype`: floats uniform in `[lo, hi)` (then rounded to
/// the dtype), integers uniform in `lo..=hi` (clipped to the dtype's range),
/// pred fair coin flips.
pub fn random(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> HostTensor {
    HostTensor::from_fn(spec(shape, dtype), |_| {
        if dtype.is_pred() {
            (rng.next_u64() & 1) as f64
        } else if dtype.is_float() {
            rng.uniform(lo, hi)
        } else {
            let (dlo, dhi) = int_range(dtype);
            rng.int(lo.max(dlo) as i64, hi.min(dhi) as i64) as f64
        }
    })
}

/// The smallest and largest value of an integer dtype (for s64 and u64,
/// of the integers an `f64` holds exactly).
pub fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::S8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::S16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::S32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::S64 => (-(2f64.powi(53)), 2f64.powi(53)),
        DType::U64 => (0.0, 2f64.powi(53)),
        _ => (f64::MIN, f64::MAX),
    }
}

/// A tensor of `dtype` holding `values` (rounded to the dtype).
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType) -> HostTensor {
    assert_eq!(values.len(), shape.iter().product::<usize>());
    HostTensor::from_fn(spec(shape, dtype), |i| values[i])
}

/// A rank-0 s32 tensor (for traced indices and bounds).
pub fn s32(v: i32) -> HostTensor {
    HostTensor::scalar(v)
}

/// `values` as they read back after rounding to `dtype`.
pub fn rounded(values: &[f64], dtype: DType) -> Vec<f64> {
    values
        .iter()
        .map(|&v| dtype.decode_f64(&dtype.encode_f64(v)))
        .collect()
}

/// `n` deterministic pseudo-random values in `[lo, hi)` (a 64-bit LCG keyed
/// by `seed`), the data the kernel library's tests were calibrated on.
pub fn lcg_data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let step = |s: u64| {
        s.wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407)
    };
    let mut s = step(seed);
    (0..n)
        .map(|_| {
            s = step(s);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}
