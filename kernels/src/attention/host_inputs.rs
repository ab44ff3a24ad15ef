//! Calling the attention kernels from the host with any combination of the
//! optional inputs (bias, mask, segment ids, dropout seed), getting the
//! output and the logsumexp.

use tessel::kernel::Kernel;
use tessel::prelude::*;

use super::block_sparse::{block_sparse_attention_with, AttentionMask};
use super::flash::flash_attention_with;
use super::optional_inputs::AttentionExtras;
use super::options::FlashOptions;
use super::reference::attention_reference_with;

/// The optional inputs of an attention call from the host (see
/// [`AttentionExtras`] for their shapes and meaning).
///
/// ```
/// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
/// use tessel::kernels::attention::{Attention, AttentionInputs, FlashOptions};
/// use tessel::prelude::*;
/// let dev = Device::cpu()?;
/// let x = HostTensor::from_fn(TensorSpec::new([2, 2, 6, 4], F32), |i| (i % 9) as f64 / 9.0);
/// // Two packed sequences per batch row: positions 0..4 and 4..6.
/// let seg = HostTensor::from_vec(vec![0i32, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1], [2, 6])?;
/// let inputs = AttentionInputs::new().segment_ids(&seg, &seg).dropout_seed(7);
/// let options = FlashOptions::new().causal(true).dropout(0.1).block_sizes(8, 8);
/// let flash = Attention::Flash.run(&dev, &x, &x, &x, &inputs, options)?;
/// let reference = Attention::Reference.run(&dev, &x, &x, &x, &inputs, options)?;
/// assert_eq!(flash.lse.shape(), &[2, 2, 6]);
/// for (a, b) in flash.out.to_vec::<f32>()?.iter().zip(reference.out.to_vec::<f32>()?) {
///     assert!((a - b).abs() < 1e-5);
/// }
/// # Ok::<(), tessel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionInputs<'a> {
    /// Additive logit bias, float `[B or 1, Hq or 1, Sq, Skv]`.
    pub bias: Option<&'a HostTensor>,
    /// Boolean mask, `pred[B or 1, Hq or 1, Sq, Skv]` (`true`: visible).
    pub mask: Option<&'a HostTensor>,
    /// Query `[B, Sq]` and key `[B, Skv]` segment ids (integers).
    pub segment_ids: Option<(&'a HostTensor, &'a HostTensor)>,
    /// The dropout seed (passed as an input: a new seed does not recompile).
    pub dropout_seed: Option<u32>,
    /// A traced offset of the queries' positions: an integer scalar or
    /// `[B]` (see [`AttentionExtras`]).
    pub q_offset: Option<&'a HostTensor>,
}

impl<'a> AttentionInputs<'a> {
    /// No optional input.
    pub fn new() -> Self {
        Self::default()
    }

    /// With an additive logit bias.
    pub fn bias(mut self, bias: &'a HostTensor) -> Self {
        self.bias = Some(bias);
        self
    }

    /// With a boolean mask.
    pub fn mask(mut self, mask: &'a HostTensor) -> Self {
        self.mask = Some(mask);
        self
    }

    /// With query and key segment ids.
    pub fn segment_ids(mut self, q: &'a HostTensor, kv: &'a HostTensor) -> Self {
        self.segment_ids = Some((q, kv));
        self
    }

    /// With a dropout seed.
    pub fn dropout_seed(mut self, seed: u32) -> Self {
        self.dropout_seed = Some(seed);
        self
    }

    /// The queries' position offset as an input (one program for every
    /// offset; see [`AttentionExtras`]).
    pub fn q_offset(mut self, offset: &'a HostTensor) -> Self {
        self.q_offset = Some(offset);
        self
    }

    /// The inputs given, in the order of the kernel's parameters (see
    /// `Present::names`), with `seed` the dropout seed as a tensor.
    fn given<'s>(
        &'s self,
        seed: Option<&'s HostTensor>,
    ) -> impl Iterator<Item = &'s HostTensor> + 's {
        let segments = self.segment_ids.map(|(q, kv)| [q, kv]);
        self.bias
            .into_iter()
            .chain(self.mask)
            .chain(segments.into_iter().flatten())
            .chain(seed)
            .chain(self.q_offset)
    }
}

/// Which attention computation to run from the host with
/// [`AttentionInputs`] ([`Attention::run`]).
#[derive(Clone, Debug)]
pub enum Attention {
    /// [`attention_reference_with`].
    Reference,
    /// [`flash_attention_with`].
    Flash,
    /// [`block_sparse_attention_with`] with this mask.
    BlockSparse(AttentionMask),
}

impl StaticArg for Attention {
    fn write_key(&self, key: &mut StaticKey) {
        match self {
            Attention::Reference => key.push(&0u8),
            Attention::Flash => key.push(&1u8),
            Attention::BlockSparse(m) => key.push(&2u8).push(m),
        };
    }
}

/// The results of [`Attention::run`].
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    /// `[B, Hq, Sq, Dv]` in the inputs' dtype.
    pub out: HostTensor,
    /// `[B, Hq, Sq]` f32: the logsumexp of each query's visible logits.
    pub lse: HostTensor,
}

impl Attention {
    fn name(&self) -> &'static str {
        match self {
            Attention::Reference => "attention_reference",
            Attention::Flash => "flash_attention",
            Attention::BlockSparse(_) => "block_sparse_attention",
        }
    }

    /// The kernel [`Attention::run`] and [`Attention::lower`] trace: `q`,
    /// `k`, `v`, then the inputs `present` says are given, in the order of
    /// [`Present::names`].
    fn kernel<'o>(
        &'o self,
        present: Present,
        options: &'o FlashOptions,
    ) -> Kernel<impl Fn(&[Tensor]) -> (Tensor, Tensor) + 'o> {
        let body = move |a: &[Tensor]| {
            let mut rest = a.iter().skip(3).copied();
            let mut next = |given: bool| if given { rest.next() } else { None };
            let bias = next(present.bias);
            let mask = next(present.mask);
            let segment_ids = next(present.segment_ids).zip(next(present.segment_ids));
            let dropout_seed = next(present.dropout_seed);
            let q_offset = next(present.q_offset);
            let extras = AttentionExtras {
                bias,
                mask,
                segment_ids,
                dropout_seed,
                q_offset,
            };
            let (q, k, v) = (a[0], a[1], a[2]);
            match self {
                Attention::Reference => attention_reference_with(q, k, v, &extras, *options),
                Attention::Flash => flash_attention_with(q, k, v, &extras, *options),
                Attention::BlockSparse(m) => {
                    block_sparse_attention_with(q, k, v, m, &extras, *options)
                }
            }
        };
        Kernel::new(self.name(), body)
            .params(present.names())
            .config(super::flash_attention::CONFIG)
            .statics(self.clone())
            .statics(*options)
            .statics(present.flags())
            .cache_key(format!("{}::Attention::{}", module_path!(), self.name()))
    }

    /// Runs on host tensors (traced and compiled once per argument specs,
    /// options and present inputs, then cached on `device`), under the
    /// config of the kernels' attribute ([`flash_attention::CONFIG`](struct@super::flash_attention)).
    #[track_caller]
    pub fn run(
        &self,
        device: &Device,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        inputs: &AttentionInputs<'_>,
        options: FlashOptions,
    ) -> Result<AttentionOutput> {
        let options = &options;
        let seed = inputs.dropout_seed.map(HostTensor::scalar);
        let mut args: Vec<&HostTensor> = vec![q, k, v];
        args.extend(inputs.given(seed.as_ref()));
        let outs = self
            .kernel(Present::of(inputs), options)
            .run(device, &args)?;
        let got = outs.len();
        let mut it = outs.into_iter();
        match (it.next(), it.next()) {
            (Some(out), Some(lse)) => Ok(AttentionOutput { out, lse }),
            _ => Err(tessel::DeviceError::OutputCount { expected: 2, got }.into()),
        }
    }

    /// The StableHLO text of the program [`Attention::run`] compiles for
    /// `q`, `k` and `v` of these specs and the inputs given in `inputs`:
    /// only their specs are read (the seed's value is an input of the
    /// program, not part of it).
    ///
    /// ```
    /// # mod tessel { pub use tessel_dsl::*; pub mod kernels { pub use tessel_kernels::*; } }
    /// use tessel::kernels::attention::{Attention, AttentionInputs, FlashOptions};
    /// use tessel::prelude::*;
    /// let x = TensorSpec::new([1, 2, 16, 8], F32);
    /// let options = FlashOptions::new().causal(true).dropout(0.1).block_sizes(8, 8);
    /// let text = Attention::Flash.lower(&x, &x, &x, &AttentionInputs::new().dropout_seed(0), options)?;
    /// assert!(text.contains("stablehlo"));
    /// # Ok::<(), tessel::Error>(())
    /// ```
    #[track_caller]
    pub fn lower(
        &self,
        q: &TensorSpec,
        k: &TensorSpec,
        v: &TensorSpec,
        inputs: &AttentionInputs<'_>,
        options: FlashOptions,
    ) -> Result<String> {
        let options = &options;
        let seed = inputs.dropout_seed.map(HostTensor::scalar);
        let mut specs = vec![q.clone(), k.clone(), v.clone()];
        specs.extend(inputs.given(seed.as_ref()).map(|t| t.spec().clone()));
        self.kernel(Present::of(inputs), options).lower(&specs)
    }
}

/// Which optional inputs a call has.
#[derive(Clone, Copy)]
struct Present {
    bias: bool,
    mask: bool,
    segment_ids: bool,
    dropout_seed: bool,
    q_offset: bool,
}

impl Present {
    fn of(inputs: &AttentionInputs<'_>) -> Self {
        Present {
            bias: inputs.bias.is_some(),
            mask: inputs.mask.is_some(),
            segment_ids: inputs.segment_ids.is_some(),
            dropout_seed: inputs.dropout_seed.is_some(),
            q_offset: inputs.q_offset.is_some(),
        }
    }

    fn flags(self) -> [bool; 5] {
        [
            self.bias,
            self.mask,
            self.segment_ids,
            self.dropout_seed,
            self.q_offset,
        ]
    }

    /// The kernel's parameter names: `q`, `k`, `v`, then the inputs given.
    fn names(self) -> Vec<&'static str> {
        let mut names = vec!["q", "k", "v"];
        let optional: [(bool, &[&'static str]); 5] = [
            (self.bias, &["bias"]),
            (self.mask, &["mask"]),
            (self.segment_ids, &["q_segment_ids", "kv_segment_ids"]),
            (self.dropout_seed, &["dropout_seed"]),
            (self.q_offset, &["q_offset"]),
        ];
        for (given, these) in optional {
            if given {
                names.extend(these);
            }
        }
        names
    }
}
