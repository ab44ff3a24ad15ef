//! Values with a head dimension of 0: every attention kernel gives an empty
//! output `[B, Hq, Sq, 0]` and the logsumexp of the same call with values
//! (which does not read the values), with static and traced query blocks.

use tessel_dsl::tile::Mask;
use tessel_dsl::F32;
use tessel_kernels::attention::*;

use super::{close, data, dev, naive, Extra, TOL_F32};

#[test]
fn values_with_no_features_give_empty_outputs() {
    let dev = dev();
    let (b, hq, hkv, s, d) = (1, 2, 1, 40, 8);
    let q = data(&[b, hq, s, d], F32, 1);
    let k = data(&[b, hkv, s, d], F32, 2);
    let v = data(&[b, hkv, s, 0], F32, 3);
    let plain = FlashOptions::new().block_sizes(16, 16);
    let causal = plain.causal(true);
    let (_, want_lse) = naive(&q, &k, &v, &causal, &Extra::default());
    let runs: Vec<(&str, Attention, &FlashOptions)> = vec![
        ("reference", Attention::Reference, &causal),
        ("flash", Attention::Flash, &causal),
        (
            "block-sparse",
            Attention::BlockSparse(Mask::causal(s, s).into()),
            &plain,
        ),
    ];
    for (name, method, opts) in runs {
        let r = method
            .run(&dev, &q, &k, &v, &AttentionInputs::new(), *opts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.out.shape(), &[b, hq, s, 0], "{name}");
        close(&r.lse, &want_lse, TOL_F32, &format!("{name}: lse"));
    }
}
