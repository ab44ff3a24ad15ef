//! What the compile cache keys on: a closure kernel's identity (name and
//! place of `Kernel::new`), static arguments by value (never their `Debug`
//! text), and one compile per key under concurrent first calls.

use std::sync::{Arc, Barrier};
use std::thread;

use tessel::kernel::{Kernel, StaticKey};
use tessel::prelude::*;

fn x() -> HostTensor {
    HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap()
}

#[test]
fn closures_with_one_name_do_not_share_a_program() {
    let d = Device::cpu_with_devices(1).unwrap();
    let plus = Kernel::new("same", |a: &[Tensor]| a[0] + 1.0);
    let times = Kernel::new("same", |a: &[Tensor]| a[0] * 100.0);
    let p = plus.run(&d, &[&x()]).unwrap();
    let t = times.run(&d, &[&x()]).unwrap();
    assert_eq!(p[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
    assert_eq!(t[0].to_vec::<f32>().unwrap(), vec![100.0, 200.0, 300.0]);
    // Each is still cached under its own identity.
    let before = d.cache().stats();
    plus.run(&d, &[&x()]).unwrap();
    times.run(&d, &[&x()]).unwrap();
    assert_eq!(d.cache().stats().hits, before.hits + 2);
    assert_eq!(d.cache().stats().compiles, before.compiles);
}

/// One place that builds kernels capturing a value: the captured value must
/// be declared with `.statics(..)`.
fn scaled(k: f32) -> Kernel<impl Fn(&[Tensor]) -> Tensor> {
    Kernel::new("scaled", move |a: &[Tensor]| a[0] * k).statics(k)
}

#[test]
fn declared_captures_are_part_of_the_key() {
    let d = Device::cpu_with_devices(1).unwrap();
    let two = scaled(2.0).run(&d, &[&x()]).unwrap();
    let ten = scaled(10.0).run(&d, &[&x()]).unwrap();
    assert_eq!(two[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
    assert_eq!(ten[0].to_vec::<f32>().unwrap(), vec![10.0, 20.0, 30.0]);
}

/// A static type whose `Debug` hides the field that changes the program.
#[derive(Clone, Hash)]
struct Offset {
    label: &'static str,
    value: i32,
}

impl std::fmt::Debug for Offset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label)
    }
}

tessel::static_arg!(Offset);

#[cpu_kernel]
fn shift(x: Tensor, by: Offset) -> Tensor {
    x + by.value as f64
}

#[test]
fn statics_are_keyed_by_value_not_debug_text() {
    let d = Device::cpu_with_devices(1).unwrap();
    let a = Offset {
        label: "offset",
        value: 1,
    };
    let b = Offset {
        label: "offset",
        value: 5,
    };
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let ya = shift::run(&d, &x(), a).unwrap();
    let yb = shift::run(&d, &x(), b).unwrap();
    assert_eq!(ya.to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
    assert_eq!(yb.to_vec::<f32>().unwrap(), vec![6.0, 7.0, 8.0]);
}

#[cpu_kernel]
fn scale_by(x: Tensor, s: f32) -> Tensor {
    x * s
}

#[test]
fn float_statics_are_keyed_by_bits() {
    let d = Device::cpu_with_devices(1).unwrap();
    let pos = scale_by::run(&d, &x(), 0.0).unwrap();
    let neg = scale_by::run(&d, &x(), -0.0).unwrap();
    let sign = |t: &HostTensor| -> Vec<bool> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.is_sign_negative())
            .collect()
    };
    assert_eq!(sign(&pos), vec![false; 3]);
    assert_eq!(sign(&neg), vec![true; 3], "-0.0 is its own program");
    let mut k1 = StaticKey::default();
    k1.push(&f32::NAN);
    let mut k2 = StaticKey::default();
    k2.push(&f32::NAN);
    assert_eq!(k1, k2, "the same NaN bits are the same key");
}

#[test]
fn racing_first_calls_compile_once() {
    let d = Device::cpu_with_devices(1).unwrap();
    let k = Arc::new(Kernel::new("race", |a: &[Tensor]| a[0].exp().sum(&[0])));
    let barrier = Arc::new(Barrier::new(8));
    let before = d.cache().stats();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (d, k, barrier) = (d.clone(), k.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                k.run(&d, &[&x()]).unwrap()[0].to_vec::<f32>().unwrap()
            })
        })
        .collect();
    let want = (1f32.exp() + 2f32.exp() + 3f32.exp()) as f64;
    for h in handles {
        let got = h.join().unwrap()[0] as f64;
        assert!((got - want).abs() < 1e-4 * want, "{got} vs {want}");
    }
    let after = d.cache().stats();
    assert_eq!(
        after.compiles,
        before.compiles + 1,
        "one compile for 8 racing threads"
    );
    assert_eq!(after.misses, before.misses + 1);
    assert_eq!(after.hits, before.hits + 7);
}

#[test]
fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
    // A client of its own, so no other test's kernels share the cache.
    let d = Device::cpu_with_devices(3).unwrap();
    let cache = d.cache();
    cache.set_capacity(2);
    let k = |i: usize| {
        Kernel::new(format!("k{i}"), move |a: &[Tensor]| a[0] + i as f64)
            .cache_key(format!("bounded{i}"))
    };
    for i in 0..2 {
        k(i).run(&d, &[&x()]).unwrap();
    }
    k(0).run(&d, &[&x()]).unwrap(); // 0 is now more recent than 1
    let before = cache.stats();
    assert_eq!(
        (before.entries, before.evictions, before.capacity),
        (2, 0, 2)
    );
    let out = k(2).run(&d, &[&x()]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, 4.0, 5.0]);
    let after = cache.stats();
    assert_eq!((after.entries, after.evictions), (2, 1));
    // 0 survived (a hit), 1 was evicted (compiled again, and right).
    k(0).run(&d, &[&x()]).unwrap();
    assert_eq!(cache.stats().hits, after.hits + 1);
    let again = k(1).run(&d, &[&x()]).unwrap();
    assert_eq!(again[0].to_vec::<f32>().unwrap(), vec![2.0, 3.0, 4.0]);
    assert_eq!(cache.stats().compiles, after.compiles + 1);
    cache.set_capacity(tessel::kernel::DEFAULT_CAPACITY);
}
