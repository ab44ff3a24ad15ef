//! The `serde` feature: specs, dtypes and profiles serialize with serde
//! (here to JSON) and read back equal.
#![cfg(feature = "serde")]

mod common;

use common::dev;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::profile::{Profile, ProfileOptions};
use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec, BF16, F32};

#[test]
fn specs_dtypes_and_profiles_round_trip_through_json() {
    let spec = TensorSpec::new([2, 3], BF16);
    let text = serde_json::to_string(&spec).unwrap();
    assert_eq!(text, r#"{"shape":[2,3],"dtype":"bf16"}"#);
    assert_eq!(serde_json::from_str::<TensorSpec>(&text).unwrap(), spec);
    for d in DType::ALL {
        let t = serde_json::to_string(&d).unwrap();
        assert_eq!(t, format!("\"{}\"", d.name()));
        assert_eq!(serde_json::from_str::<DType>(&t).unwrap(), d);
    }
    assert!(serde_json::from_str::<DType>("\"f128\"").is_err());

    let k = Kernel::new("serde_profile", |a: &[Tensor]| (a[0] * 2.0).exp());
    let x = HostTensor::from_fn(TensorSpec::new([16], F32), |i| i as f64 * 0.1);
    let p = k
        .profile(&dev(), &[&x], ProfileOptions { warmup: 0, runs: 2 })
        .unwrap();
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["kernel"], "serde_profile");
    assert_eq!(json["inputs"][0]["dtype"], "f32");
    assert_eq!(json["runs"], 2);
    let back: Profile = serde_json::from_value(json).unwrap();
    assert_eq!(back.inputs, p.inputs);
    assert_eq!(back.run, p.run);
    assert_eq!(back.memory, p.memory);
    assert_eq!(back.cost_source, p.cost_source);
}
