//! Counter-based random numbers for dropout and sampling.
//!
//! Bits are a pure function of (seed, flat element index): the murmur3
//! finalizer of `index * 0x9E3779B9 + mix(seed)` in wrapping u32 arithmetic.
//! The same seed gives the same bits on every backend and block size, and
//! [`random_bits_reference`] computes them on the host.

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::constant::full_at;
use crate::ops::elementwise::{binary_at, Operand};
use crate::ops::BinaryOp;
use crate::shape::Shape;
use crate::trace::tensor::Tensor;

const GOLDEN: u32 = 0x9E37_79B9;

/// murmur3's 32-bit finalizer.
pub fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The bits [`random_bits`] gives element `index` for `seed`, computed on the host.
///
/// ```
/// use tessel_dsl::ops::random::random_bits_reference;
/// assert_ne!(random_bits_reference(1, 0), random_bits_reference(1, 1));
/// assert_eq!(random_bits_reference(7, 3), random_bits_reference(7, 3));
/// ```
pub fn random_bits_reference(seed: u32, index: u32) -> u32 {
    mix32(index.wrapping_mul(GOLDEN).wrapping_add(mix32(seed)))
}

fn mix_traced(h: Tensor, loc: &Location) -> Tensor {
    let k = |v: u32| full_at(Vec::new(), f64::from(v), DType::U32, loc.clone());
    let shr = |x: Tensor, n: u32| binary_at(x, k(n), BinaryOp::ShiftRightLogical, loc.clone());
    let xor = |a: Tensor, b: Tensor| binary_at(a, b, BinaryOp::Xor, loc.clone());
    let mul = |a: Tensor, v: u32| binary_at(a, k(v), BinaryOp::Mul, loc.clone());
    let h = xor(h, shr(h, 16));
    let h = mul(h, 0x85eb_ca6b);
    let h = xor(h, shr(h, 13));
    let h = mul(h, 0xc2b2_ae35);
    xor(h, shr(h, 16))
}

/// Random u32 bits of `shape` for `seed` (a u32 scalar tensor or a Rust integer).
#[track_caller]
pub fn random_bits(seed: impl Operand, shape: impl Into<Shape>) -> Tensor {
    let loc = Location::caller();
    let shape: Shape = shape.into();
    let like = full_at(Vec::new(), 0.0, DType::U32, loc.clone());
    let seed = seed.to_tensor(like, &loc).cast(DType::U32);
    let n = shape.iter().product::<usize>();
    let idx = Tensor::iota(vec![n], 0, DType::U32);
    let golden = full_at(Vec::new(), f64::from(GOLDEN), DType::U32, loc.clone());
    let x = binary_at(idx, golden, BinaryOp::Mul, loc.clone());
    let x = binary_at(x, mix_traced(seed, &loc), BinaryOp::Add, loc.clone());
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    mix_traced(x, &loc).reshape(&dims)
}

/// Uniform random numbers in `[0, 1)` of `shape` and float `dtype`: 24
/// random bits each, or as many as the dtype's significand holds (8 for
/// bf16, 11 for f16), so that no sample rounds up to 1.
#[track_caller]
pub fn uniform(seed: impl Operand, shape: impl Into<Shape>, dtype: DType) -> Tensor {
    let loc = Location::caller();
    let digits: u32 = match dtype {
        DType::F16 => 11,
        DType::BF16 => 8,
        DType::F8E4M3FN => 4,
        DType::F8E5M2 => 3,
        _ => 24,
    };
    let bits = random_bits(seed, shape);
    let shift = full_at(Vec::new(), f64::from(32 - digits), DType::U32, loc.clone());
    let top = binary_at(bits, shift, BinaryOp::ShiftRightLogical, loc.clone()).cast(DType::F32);
    let scale = full_at(
        Vec::new(),
        0.5f64.powi(digits as i32),
        DType::F32,
        loc.clone(),
    );
    binary_at(top, scale, BinaryOp::Mul, loc).cast(dtype)
}

impl Tensor {
    /// Inverted dropout: zeroes each element with probability `rate` and
    /// scales the rest by `1 / (1 - rate)`. Deterministic in `seed`.
    #[track_caller]
    pub fn dropout(self, rate: f64, seed: impl Operand) -> Tensor {
        if rate <= 0.0 {
            return self;
        }
        let u = uniform(seed, self.shape(), DType::F32);
        let keep = u.ge(rate as f32);
        let scaled = self * (1.0 / (1.0 - rate.min(1.0 - 1e-7)));
        keep.select(scaled, 0.0)
    }
}
