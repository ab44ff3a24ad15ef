//! Compiled programs against the process's limit of memory mappings: the
//! compile caches evict (across every client) when half of it is in use, and `Device::compile`
//! refuses with an error near it, instead of XLA failing to map code or a
//! thread failing to start (a panic). One test in a binary of its own: the
//! limit it lowers is process-wide.

use tessel::kernel::Kernel;
use tessel::prelude::*;
use tessel::runtime::{mapping_usage, set_mapping_limit};
use tessel::DeviceError;

fn x() -> HostTensor {
    HostTensor::from_vec(vec![1f32, 2.0, 3.0], [3]).unwrap()
}

fn kernel(i: usize) -> Kernel<impl Fn(&[Tensor]) -> Tensor> {
    Kernel::new(format!("m{i}"), move |a: &[Tensor]| {
        (a[0] * 2.0).exp() + i as f64
    })
    .cache_key(format!("mappings{i}"))
}

fn expected(i: usize) -> Vec<f32> {
    [1f32, 2.0, 3.0]
        .iter()
        .map(|v| (2.0 * v).exp() + i as f32)
        .collect()
}

fn close(got: &[f32], want: &[f32]) -> bool {
    got.iter()
        .zip(want)
        .all(|(g, w)| (g - w).abs() <= 1e-5 * w.abs())
}

#[cfg(target_os = "linux")]
#[test]
fn compiles_stay_within_the_mapping_limit() {
    let dev = Device::cpu_with_devices(1).unwrap();
    let cache = dev.cache();
    let out = kernel(0).run(&dev, &[&x()]).unwrap();
    assert!(close(&out[0].to_vec::<f32>().unwrap(), &expected(0)));
    let start = mapping_usage().expect("Linux reports the process's mappings");
    assert!(start.in_use > 0 && start.limit >= 1000, "{start:?}");

    // Room for about 40 more mappings before the cache must evict (a small
    // program holds a few), far below the point of refusal.
    let limit = 2 * (start.in_use + 40);
    set_mapping_limit(Some(limit));
    let mut peak = 0;
    for i in 1..=60 {
        let out = kernel(i).run(&dev, &[&x()]).unwrap();
        assert!(
            close(&out[0].to_vec::<f32>().unwrap(), &expected(i)),
            "kernel {i}"
        );
        peak = peak.max(mapping_usage().unwrap().in_use);
    }
    let stats = cache.stats();
    assert!(stats.evictions > 0, "no eviction under pressure: {stats:?}");
    assert!(stats.entries < 60, "{stats:?}");
    // Evictions happen before a compile, so the peak exceeds half the limit
    // by at most one program's mappings (and the noise of the allocator).
    assert!(peak <= limit / 2 + 40, "peak {peak} of limit {limit}");

    // The mappings are the process's, whichever client compiled the
    // program: a compile on another client under pressure evicts this
    // client's executables too, the least recently used first.
    set_mapping_limit(None);
    let other = Device::cpu_with_devices(1).unwrap();
    let before = cache.stats();
    assert!(before.entries > 0, "{before:?}");
    let in_use = mapping_usage().unwrap().in_use;
    set_mapping_limit(Some(2 * in_use - 2));
    let out = kernel(100).run(&other, &[&x()]).unwrap();
    assert!(close(&out[0].to_vec::<f32>().unwrap(), &expected(100)));
    let after = cache.stats();
    assert!(
        after.evictions > before.evictions && after.entries < before.entries,
        "the other client's compile evicted nothing here: {before:?} then {after:?}"
    );

    // Near the limit nothing more is compiled, even once the cache has let
    // go of everything, but a cached kernel still runs.
    set_mapping_limit(None);
    cache.clear();
    kernel(60).run(&dev, &[&x()]).unwrap();
    let in_use = mapping_usage().unwrap().in_use;
    set_mapping_limit(Some(in_use));
    let cached = kernel(60).run(&dev, &[&x()]).unwrap();
    assert!(close(&cached[0].to_vec::<f32>().unwrap(), &expected(60)));
    let err = kernel(61).run(&dev, &[&x()]).unwrap_err();
    match &err {
        tessel::Error::Device(DeviceError::TooManyMappings { kernel, limit, .. }) => {
            assert_eq!((kernel.as_str(), limit), ("m61", &in_use));
        }
        other => panic!("expected TooManyMappings, got {other:?}"),
    }
    assert!(err.to_string().contains("vm.max_map_count"), "{err}");

    set_mapping_limit(None);
    let out = kernel(61).run(&dev, &[&x()]).unwrap();
    assert!(close(&out[0].to_vec::<f32>().unwrap(), &expected(61)));
}
