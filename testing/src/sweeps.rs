//! Shape and dtype sweeps, and integer helpers of the elementwise tests.

use tessel_dsl::{DType, HostTensor};

use crate::{spec, Rng};

/// The full shape sweep: rank 0, size 1, odd and non-block-multiple extents.
/// f32 and s32 run it; other dtypes run [`SHORT_SHAPES`] to keep the number
/// of compiled ops down (XLA:CPU compiles each op separately, ~10 ms apiece).
pub const SHAPES: &[&[usize]] = &[&[], &[1], &[7], &[3, 5], &[2, 1, 33], &[129]];
/// The shorter sweep of the other dtypes.
pub const SHORT_SHAPES: &[&[usize]] = &[&[], &[2, 1, 33], &[129]];

/// The shape sweep `dtype` runs.
pub fn shapes_for(dtype: DType) -> &'static [&'static [usize]] {
    if dtype == DType::F32 || dtype == DType::S32 {
        SHAPES
    } else {
        SHORT_SHAPES
    }
}

/// The float dtypes of the elementwise sweeps.
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::BF16, DType::F16];
/// The integer dtypes of the elementwise sweeps.
pub const INTS: [DType; 7] = [
    DType::S32,
    DType::U32,
    DType::S8,
    DType::U8,
    DType::S16,
    DType::U16,
    DType::U64,
];

/// An integer result wrapped into `dtype`'s range (two's complement).
pub fn wrap(v: i128, dtype: DType) -> f64 {
    match dtype {
        DType::S8 => v as i8 as f64,
        DType::U8 => v as u8 as f64,
        DType::S16 => v as i16 as f64,
        DType::U16 => v as u16 as f64,
        DType::S32 => v as i32 as f64,
        DType::U32 => v as u32 as f64,
        DType::U64 => v as u64 as f64,
        _ => v as i64 as f64,
    }
}

/// The width of an integer dtype in bits.
pub fn bits(dtype: DType) -> u32 {
    (dtype.size_in_bytes() * 8) as u32
}

/// The two's complement bit pattern of an integer value, zero-extended.
pub fn to_bits(v: f64, dtype: DType) -> u64 {
    (v as i64 as u64) & (u64::MAX >> (64 - bits(dtype)))
}

/// A bit pattern read back as a value of `dtype`.
pub fn from_bits(b: u64, dtype: DType) -> f64 {
    wrap(b as i128, dtype)
}

/// Random floats with `|x|` in `[0.5, 4)` and a random sign (safe divisors).
pub fn away_from_zero(rng: &mut Rng, shape: &[usize], dtype: DType) -> HostTensor {
    HostTensor::from_fn(spec(shape, dtype), |_| {
        let m = rng.uniform(0.5, 4.0);
        if rng.next_u64() & 1 == 0 {
            m
        } else {
            -m
        }
    })
}
