//! Static arguments and the cache key they make: a static argument enters
//! the compile-cache key by value (integers and strings by their bytes,
//! floats by their bits), never through its `Debug` text.

use std::fmt::Debug;
use std::hash::{Hash, Hasher};

/// The static part of a compile-cache key: the bytes of every static
/// argument, each written by its [`StaticArg::write_key`]. Two keys are equal
/// exactly when the same values were written in the same order.
///
/// ```
/// use tessel_dsl::kernel::StaticKey;
/// let mut a = StaticKey::default();
/// a.push(&0.5f32);
/// a.push(&"causal");
/// let mut b = StaticKey::default();
/// b.push(&0.5f32);
/// b.push(&"causal");
/// assert_eq!(a, b);
/// let mut c = StaticKey::default();
/// c.push(&-0.5f32);
/// c.push(&"causal");
/// assert_ne!(a, c);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StaticKey {
    bytes: Vec<u8>,
}

impl StaticKey {
    /// Writes a static value (its own fields, by value).
    pub fn push<T: StaticArg>(&mut self, value: &T) -> &mut Self {
        value.write_key(self);
        self
    }

    /// Writes a value through its `Hash` implementation: the bytes the
    /// implementation feeds a hasher are recorded as they are (so a derived
    /// `Hash` keys by every field). For types whose `Hash` is derived or
    /// otherwise writes every field that makes two values different.
    pub fn push_hash<T: Hash + ?Sized>(&mut self, value: &T) -> &mut Self {
        value.hash(&mut Recorder(&mut self.bytes));
        self
    }

    /// Writes raw bytes, length-prefixed (so `"ab","c"` and `"a","bc"` differ).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes
            .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// Writes the bytes of another key.
    pub fn extend(&mut self, other: &StaticKey) -> &mut Self {
        self.push_bytes(&other.bytes)
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl StaticArg for StaticKey {
    fn write_key(&self, key: &mut StaticKey) {
        key.extend(self);
    }
}

/// A `Hasher` that keeps every byte written to it.
struct Recorder<'a>(&'a mut Vec<u8>);

impl Hasher for Recorder<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

/// A static (compile-time) kernel argument: known while tracing, part of the
/// compile-cache key **by value**, like Pallas/Triton `constexpr`.
///
/// Implemented for `bool`, the integer and float types (floats by their
/// bits: `0.0` and `-0.0` are different keys, every NaN payload its own),
/// `char`, `&'static str`, `String`, [`DType`](crate::DType),
/// [`Precision`](crate::Precision), [`KernelConfig`](crate::config::KernelConfig),
/// `Option`s, arrays, `Vec`s and tuples of these.
///
/// For your own type, write every field that changes the program:
///
/// ```
/// use tessel_dsl::kernel::{StaticArg, StaticKey};
/// #[derive(Clone, Debug)]
/// struct Scale { factor: f32, bias: bool }
/// impl StaticArg for Scale {
///     fn write_key(&self, key: &mut StaticKey) {
///         key.push(&self.factor).push(&self.bias);
///     }
/// }
/// // or, for a type with a derived `Hash`: tessel_dsl::static_arg!(MyEnum);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a kernel parameter",
    label = "neither a `Tensor` nor a static argument",
    note = "kernel parameters are `Tensor` (traced) or static values implementing `tessel::StaticArg` \
            (bool, integers, floats, &'static str, String, DType, Precision); \
            for your own `Clone + Debug + Hash` type write `tessel::static_arg!(YourType);`"
)]
pub trait StaticArg: Clone + Debug {
    /// Writes the value's identity into the compile-cache key: everything
    /// that can change the traced program.
    fn write_key(&self, key: &mut StaticKey);

    /// Values to time instead of this one when the kernel is autotuned
    /// ([`KernelConfig::autotune`](crate::config::KernelConfig::autotune)): variants
    /// that compute the same result within the dtype's tolerance, such as
    /// other block sizes, given the specs of the kernel's tensor arguments.
    /// The default, no candidates, leaves the value as given.
    fn tuning_candidates(&self, inputs: &[crate::TensorSpec]) -> Vec<Self> {
        let _ = inputs;
        Vec::new()
    }

    /// How a tuned value is shown (in [`Profile::tuned`](crate::profile::Profile::tuned)
    /// and in the persistent cache). The default is its `Debug` text.
    fn tuning_label(&self) -> String {
        format!("{self:?}")
    }
}

/// A candidate list for [`StaticArg::tuning_candidates`]: `given` first,
/// then each of `variants` not already listed, in order (so the value given
/// is never timed twice under another spelling).
///
/// ```
/// use tessel_dsl::kernel::distinct_candidates;
/// assert_eq!(distinct_candidates(256, [128, 256, 512, 128]), vec![256, 128, 512]);
/// ```
pub fn distinct_candidates<T: PartialEq>(
    given: T,
    variants: impl IntoIterator<Item = T>,
) -> Vec<T> {
    let mut out = vec![given];
    for c in variants {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Implements [`StaticArg`] for types with a derived (or field-complete)
/// `Hash`, keying them by that hash's input bytes.
///
/// ```
/// #[derive(Clone, Debug, Hash)]
/// enum Mode { Fast, Exact }
/// tessel_dsl::static_arg!(Mode);
/// ```
#[macro_export]
macro_rules! static_arg {
    ($($t:ty),+ $(,)?) => {$(
        impl $crate::kernel::StaticArg for $t {
            fn write_key(&self, key: &mut $crate::kernel::StaticKey) {
                key.push_hash(self);
            }
        }
    )+};
}

macro_rules! by_hash {
    ($($t:ty),*) => {$(
        impl StaticArg for $t {
            fn write_key(&self, key: &mut StaticKey) {
                key.push_hash(self);
            }
        }
    )*};
}
by_hash!(
    bool,
    i8,
    i16,
    i32,
    i64,
    isize,
    u8,
    u16,
    u32,
    u64,
    usize,
    char,
    crate::DType,
    crate::Precision,
    crate::config::KernelConfig
);

impl StaticArg for f32 {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_hash(&self.to_bits());
    }
}

impl StaticArg for f64 {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_hash(&self.to_bits());
    }
}

impl StaticArg for String {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_bytes(self.as_bytes());
    }
}

impl StaticArg for &'static str {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_bytes(self.as_bytes());
    }
}

impl<T: StaticArg> StaticArg for Option<T> {
    fn write_key(&self, key: &mut StaticKey) {
        match self {
            None => key.push_hash(&0u8),
            Some(v) => key.push_hash(&1u8).push(v),
        };
    }
}

impl<T: StaticArg, const N: usize> StaticArg for [T; N] {
    fn write_key(&self, key: &mut StaticKey) {
        for v in self {
            key.push(v);
        }
    }
}

impl<T: StaticArg> StaticArg for Vec<T> {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_hash(&self.len());
        for v in self {
            key.push(v);
        }
    }
}

impl<A: StaticArg, B: StaticArg> StaticArg for (A, B) {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.0).push(&self.1);
    }
}

impl<A: StaticArg, B: StaticArg, C: StaticArg> StaticArg for (A, B, C) {
    fn write_key(&self, key: &mut StaticKey) {
        key.push(&self.0).push(&self.1).push(&self.2);
    }
}
