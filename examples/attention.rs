//! Causal flash attention from the kernel library, checked against the
//! whole-tensor reference, with GQA (8 query heads sharing 2 key/value heads).
use tessel::kernels::attention::{attention_reference, flash_attention, FlashOptions};
use tessel::prelude::*;

fn main() -> tessel::Result<()> {
    let dev = Device::from_env()?;
    let (b, hq, hkv, s, d) = (1, 8, 2, 1000, 64); // 1000 is not a multiple of the block sizes
    let gen = |h: usize, salt: usize| {
        HostTensor::from_fn(TensorSpec::new([b, h, s, d], F32), move |i| {
            ((i * (2 * salt + 7)) % 101) as f64 / 101.0 - 0.5
        })
    };
    let (q, k, v) = (gen(hq, 1), gen(hkv, 2), gen(hkv, 3));
    let opts = FlashOptions::new().causal(true);
    let flash = flash_attention::run(&dev, &q, &k, &v, opts)?;
    let reference = attention_reference::run(&dev, &q, &k, &v, opts)?;
    let max_diff =
        flash.to_f64_vec().iter().zip(reference.to_f64_vec()).map(|(a, r)| (a - r).abs()).fold(0.0, f64::max);
    println!("flash attention {:?}: max |flash - reference| = {max_diff:.2e}", flash.shape());
    // Timing the interpreter says little: one run is enough there.
    let runs = if dev.is_interpreter() {
        tessel::profile::ProfileOptions { warmup: 0, runs: 1 }
    } else {
        tessel::profile::ProfileOptions::default()
    };
    let p = flash_attention::profile(&dev, runs, &q, &k, &v, opts)?;
    print!("{}", p.summary());
    Ok(())
}
