//! GEMM with transposes, mixed precision and a fused epilogue (the
//! quantized matmuls are in [`quantized`](crate::quantized); the argument
//! checks both share are in `checks.rs`).

use tessel::kernel::distinct_candidates;
use tessel::prelude::*;
use tessel::tensor::trace_error;
use tessel::tile::blocks::block_size_problem;

pub(crate) mod checks;

use self::checks::{broadcast, product_shape};

/// The activation applied in a GEMM's epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activation {
    /// None.
    #[default]
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// GELU, erf form.
    Gelu,
    /// GELU, tanh approximation.
    GeluTanh,
    /// `x · sigmoid(x)`.
    Silu,
}

tessel::static_arg!(Activation);

/// Options of [`gemm`](fn@gemm) and [`gemm_bias`](fn@gemm_bias) (a static argument: each distinct
/// value is its own compiled program).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmOptions {
    /// Use `aᵀ` (the last two axes swapped).
    pub transpose_a: bool,
    /// Use `bᵀ`.
    pub transpose_b: bool,
    /// The result dtype (`None`: the inputs' dtype, or f32 for fp8 and integer inputs).
    pub out_dtype: Option<DType>,
    /// The dot's precision (`None`: the kernel's).
    pub precision: Option<Precision>,
    /// Epilogue activation.
    pub activation: Activation,
    /// Accumulate over K in blocks of this size in a traced loop (`None`: one
    /// `dot_general`, which XLA tiles for the hardware itself — the fastest
    /// form on CPU and GPU; blocks bound the live K slab on TPU).
    pub block_k: Option<usize>,
}

impl Default for GemmOptions {
    fn default() -> Self {
        GemmOptions {
            transpose_a: false,
            transpose_b: false,
            out_dtype: None,
            precision: None,
            activation: Activation::Identity,
            block_k: None,
        }
    }
}

impl StaticArg for GemmOptions {
    fn write_key(&self, key: &mut StaticKey) {
        key.push_hash(self);
    }

    /// Autotuning times one `dot_general` against K blocks of 256, 512,
    /// 1024 and 2048 (those shorter than K), besides the value given.
    fn tuning_candidates(&self, inputs: &[TensorSpec]) -> Vec<Self> {
        let Some(a) = inputs.first().filter(|a| a.rank() >= 2) else {
            return Vec::new();
        };
        let r = a.rank();
        let k = if self.transpose_a {
            a.shape[r - 2]
        } else {
            a.shape[r - 1]
        };
        let variants = [None, Some(256), Some(512), Some(1024), Some(2048)]
            .into_iter()
            .filter(|block_k| block_k.is_none_or(|b| b < k))
            .map(|block_k| GemmOptions { block_k, ..*self });
        distinct_candidates(*self, variants)
    }

    fn tuning_label(&self) -> String {
        match self.block_k {
            None => "block_k = none (one dot_general)".into(),
            Some(b) => format!("block_k = {b}"),
        }
    }
}

/// The dtype the operands are multiplied in: fp8 operands are widened to
/// bf16 (exactly) so every backend can run the dot.
fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F8E4M3FN | DType::F8E5M2 => DType::BF16,
        other => other,
    }
}

/// The accumulation dtype: f32 for floats below f64, s32 for 8-bit integers.
fn accumulate_dtype(d: DType) -> DType {
    match d {
        DType::F64 => DType::F64,
        DType::S8 | DType::U8 | DType::S32 => DType::S32,
        DType::S64 => DType::S64,
        _ => DType::F32,
    }
}

fn activate(y: Tensor, act: Activation) -> Tensor {
    match act {
        Activation::Identity => y,
        Activation::Relu => y.relu(),
        Activation::Gelu => crate::activation::gelu(y, false),
        Activation::GeluTanh => crate::activation::gelu(y, true),
        Activation::Silu => crate::activation::silu(y),
    }
}

/// The most K blocks `block_k` may make (they are unrolled while tracing).
pub const MAX_K_BLOCKS: usize = 4096;

/// The product in the accumulation dtype, before the epilogue.
fn product(a: Tensor, b: Tensor, opts: GemmOptions) -> Tensor {
    let a = if opts.transpose_a { a.t() } else { a };
    let b = if opts.transpose_b { b.t() } else { b };
    let a = a.cast(compute_dtype(a.dtype()));
    let b = b.cast(compute_dtype(b.dtype()));
    let acc = accumulate_dtype(a.dtype());
    let dot = |x: Tensor, y: Tensor| x.matmul_with(y, opts.precision, Some(acc));
    match opts.block_k {
        None => dot(a, b),
        Some(bk) => {
            let k = a.dim(-1);
            // A block longer than K is all of K (not K padded to the block);
            // `problem` has bounded the blocks' count.
            let bk = if bk > k { k.max(1) } else { bk };
            let mut out_shape = a.shape();
            let last = out_shape.len() - 1;
            out_shape[last] = b.dim(-1);
            let mut y = Tensor::zeros(out_shape, acc);
            for kb in blocks_of(k, bk) {
                y = y + dot(
                    a.block_sized(-1, kb, bk, 0.0),
                    b.block_sized(-2, kb, bk, 0.0),
                );
            }
            y
        }
    }
}

/// What is wrong with the arguments of [`gemm`](fn@gemm) or
/// [`gemm_bias`](fn@gemm_bias), found before any op is built.
fn problem(
    a: &TensorSpec,
    b: &TensorSpec,
    bias: Option<&TensorSpec>,
    opts: GemmOptions,
) -> Option<String> {
    if a.dtype.is_pred() || compute_dtype(a.dtype) != compute_dtype(b.dtype) {
        return Some(format!(
            "a and b must have one numeric dtype (the two fp8 kinds may mix), got {} and {}; cast first",
            a.dtype, b.dtype
        ));
    }
    let out = match product_shape(a, b, opts.transpose_a, opts.transpose_b) {
        Ok(out) => out,
        Err(m) => return Some(m),
    };
    if let Some(bk) = opts.block_k {
        // (0, and too many blocks, are refused with the blocks' count.)
        if a.rank() < 2 || b.rank() < 2 {
            return Some(format!(
                "block_k needs matrices (rank 2 or more), got {a} and {b}"
            ));
        }
        let k = a.shape[a.rank() - if opts.transpose_a { 2 } else { 1 }];
        // The K blocks are unrolled while tracing: bound their count before
        // anything is built.
        let count = (bk > 0).then(|| k.div_ceil(bk.min(k).max(1)));
        if count.is_none_or(|c| c > MAX_K_BLOCKS) {
            let made = match count {
                Some(c) => format!("makes {c} blocks, unrolled while tracing"),
                None => "makes no block".to_string(),
            };
            return Some(format!(
                "block_k = {bk} over K = {k} {made}: block_k must be at least 1 and K / block_k at \
                 most {MAX_K_BLOCKS}; raise block_k or leave it unset (one dot over K)"
            ));
        }
        // The blocks run along a's last axis and b's second-to-last (after
        // the transposes), under the rules of the platform being traced for
        // (TPU: a multiple of 128 on a's). A block longer than K is K.
        let tiles = |rank: usize, axis: usize| block_size_problem(bk.min(k).max(1), axis, rank, k);
        if let Some(m) = tiles(a.rank(), a.rank() - 1).or_else(|| tiles(b.rank(), b.rank() - 2)) {
            return Some(format!("block_k = {bk} does not tile K = {k}: {m}"));
        }
    }
    match bias {
        Some(bias) if broadcast(&bias.shape, &out).as_deref() != Some(&out[..]) => Some(format!(
            "the bias {bias} does not broadcast to the product's shape {out:?}"
        )),
        _ => None,
    }
}

fn out_dtype(input: DType, opts: GemmOptions) -> DType {
    opts.out_dtype.unwrap_or(match input {
        DType::F8E4M3FN | DType::F8E5M2 | DType::S8 | DType::U8 => DType::F32,
        other => other,
    })
}

/// `a · b` for `[.., M, K] × [.., K, N]` (batch axes broadcast), with
/// optional transposes, accumulation in f32 (s32 for int8), an activation
/// epilogue and a chosen output dtype.
///
/// ```
/// use tessel_kernels::gemm::{gemm, Activation, GemmOptions};
/// use tessel_dsl::prelude::*;
/// let dev = Device::cpu()?;
/// let a = HostTensor::from_vec(vec![1.0f32, -2.0, 3.0, 4.0], [2, 2])?;
/// let opts = GemmOptions { activation: Activation::Relu, ..GemmOptions::default() };
/// let y = gemm::run(&dev, &a, &a, opts)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 0.0, 15.0, 10.0]);
/// # Ok::<(), tessel_dsl::Error>(())
/// ```
#[tpu_kernel]
#[track_caller]
pub fn gemm(a: Tensor, b: Tensor, opts: GemmOptions) -> Tensor {
    if let Some(m) = problem(&a.spec(), &b.spec(), None, opts) {
        return trace_error("gemm", &[a, b], m);
    }
    let dt = out_dtype(a.dtype(), opts);
    activate(product(a, b, opts), opts.activation).cast(dt)
}

/// `activation(a · b + bias)`, the bias broadcast over the rows (`[N]` or any
/// shape that broadcasts to the result), fused into one program.
#[tpu_kernel]
#[track_caller]
pub fn gemm_bias(a: Tensor, b: Tensor, bias: Tensor, opts: GemmOptions) -> Tensor {
    if let Some(m) = problem(&a.spec(), &b.spec(), Some(&bias.spec()), opts) {
        return trace_error("gemm_bias", &[a, b, bias], m);
    }
    let y = product(a, b, opts);
    let dt = out_dtype(a.dtype(), opts);
    activate(y + bias.cast(y.dtype()), opts.activation).cast(dt)
}
