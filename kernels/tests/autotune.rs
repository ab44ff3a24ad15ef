//! Autotuning (`KernelConfig::autotune`): flash attention's, gemm's and
//! paged attention's block sizes chosen by measurement, results within the tolerance of the
//! untuned kernel, the choice shown by `profile`, remembered in memory
//! and in the persistent cache (a second process measures nothing), and
//! re-measured when the stored choice is no longer a candidate.
//!
//! One test function (and the child process it starts): the cache
//! directory is process-wide.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use common::{close, dev, uniform};
use tessel_dsl::prelude::*;
use tessel_dsl::profile::ProfileOptions;
use tessel_dsl::runtime::executable_cache_usage;
use tessel_kernels::attention::{attention_reference, flash_attention, FlashOptions};
use tessel_kernels::gemm::{gemm, GemmOptions};
use tessel_kernels::serving::{paged_attention, PagePool, ServeOptions};

const CHILD: &str = "TESSEL_AUTOTUNE_CHILD";

fn qkv() -> (HostTensor, HostTensor, HostTensor) {
    (
        uniform(&[1, 2, 300, 16], F32, 1, 1.0),
        uniform(&[1, 1, 300, 16], F32, 2, 1.0),
        uniform(&[1, 1, 300, 16], F32, 3, 1.0),
    )
}

fn tuned_files(dir: &PathBuf) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "tuned"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn block_sizes_are_chosen_by_measurement_and_remembered() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessel-autotune-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    std::env::set_var("TESSEL_EXECUTABLE_CACHE_DIR", &dir);
    let d = dev();
    let (q, k, v) = qkv();
    let opts = FlashOptions::new().causal(true);
    let tuned_cfg = flash_attention::CONFIG.autotune(true);

    // Tuned and untuned agree within f32 tolerance, and with the reference.
    let want = attention_reference::run(&d, &q, &k, &v, opts).unwrap();
    let plain = flash_attention::run(&d, &q, &k, &v, opts).unwrap();
    let before = d.cache().stats().compiles;
    let tuned = flash_attention::run_with(&tuned_cfg, &d, &q, &k, &v, opts).unwrap();
    let measured = d.cache().stats().compiles - before;
    assert!(measured >= 2, "{measured} candidates compiled");
    close(&tuned, &want.to_f64_vec(), 1e-5);
    close(&tuned, &plain.to_f64_vec(), 1e-5);
    let files = tuned_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let stored = fs::read_to_string(&files[0]).unwrap();
    let choice = stored.lines().next().unwrap().to_string();
    assert!(choice.starts_with("block_q = "), "{stored}");
    assert!(
        stored.contains("ms  block_q = 128, block_kv = 128"),
        "{stored}"
    );

    // Remembered: the next call compiles and measures nothing.
    let before = d.cache().stats().compiles;
    flash_attention::run_with(&tuned_cfg, &d, &q, &k, &v, opts).unwrap();
    assert_eq!(d.cache().stats().compiles, before);
    // profile shows the choice.
    let p = flash_attention::profile_with(
        &tuned_cfg,
        &d,
        ProfileOptions { warmup: 0, runs: 1 },
        &q,
        &k,
        &v,
        opts,
    )
    .unwrap();
    assert_eq!(p.tuned, vec![format!("opts: {choice}")]);
    assert!(p
        .summary()
        .contains(&format!("tuned                  opts: {choice}")));
    assert!(p.to_json().contains("\"tuned\": [\"opts: block_q = "));
    // call (device buffers) tunes too, and finds the same choice.
    let bufs: Vec<_> = [&q, &k, &v]
        .iter()
        .map(|t| d.to_device(t).unwrap())
        .collect();
    let before = d.cache().stats().compiles;
    let out = flash_attention::call_with(&tuned_cfg, &d, &bufs[0], &bufs[1], &bufs[2], opts);
    close(&out.unwrap().to_host().unwrap(), &want.to_f64_vec(), 1e-5);
    assert_eq!(d.cache().stats().compiles, before);

    // A second process reads the choice and compiles only that program;
    // with a stored choice that is no longer a candidate it measures again.
    let child = || {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_reads_the_stored_choice", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n = text.split("child compiles ").nth(1).unwrap_or_default();
        n.split_whitespace()
            .next()
            .unwrap_or_default()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(child(), 1);
    fs::write(&files[0], "block_q = 7, block_kv = 7\n").unwrap();
    assert!(child() >= 2);
    let rewritten = fs::read_to_string(&files[0]).unwrap();
    assert!(
        rewritten.starts_with("block_q = ") && !rewritten.starts_with("block_q = 7,"),
        "{rewritten}"
    );

    // gemm: K = 700 times one dot against K blocks of 256 and 512.
    let a = uniform(&[64, 700], F32, 4, 1.0);
    let b = uniform(&[700, 48], F32, 5, 1.0);
    let g = GemmOptions::default();
    let want = gemm::run(&d, &a, &b, g).unwrap();
    let cfg = gemm::CONFIG.autotune(true).with_block_size(None);
    let p = gemm::profile_with(&cfg, &d, ProfileOptions { warmup: 0, runs: 1 }, &a, &b, g).unwrap();
    assert!(p.tuned[0].starts_with("opts: block_k = "), "{:?}", p.tuned);
    close(
        &gemm::run_with(&cfg, &d, &a, &b, g).unwrap(),
        &want.to_f64_vec(),
        1e-5 * 700.0,
    );

    // paged attention: pages per step, over three sequences (one empty)
    // whose pages are interleaved in a shared pool.
    let (page, hq, hkv, dh) = (16, 4, 2, 16);
    let lens = [300usize, 0, 37];
    let mut pool = PagePool::new(40, page);
    for step in (page..=300).step_by(page) {
        for (s, &len) in lens.iter().enumerate() {
            pool.reserve(s as u64, step.min(len)).unwrap();
        }
    }
    // The last 12 tokens of the first sequence (the steps stop at 288).
    // Without them its table listed 18 pages for 300 tokens, and the
    // paged kernel's metadata check caught the padding entry read as page 0.
    for (s, &len) in lens.iter().enumerate() {
        pool.reserve(s as u64, len).unwrap();
    }
    let tables = pool.block_tables(&[0, 1, 2], 20).unwrap();
    let kp = uniform(&[40, page, hkv, dh], F32, 7, 1.0);
    let vp = uniform(&[40, page, hkv, dh], F32, 8, 1.0);
    let qp = uniform(&[3, hq, dh], F32, 9, 1.0);
    let lengths = HostTensor::from_vec(lens.iter().map(|&l| l as i32).collect(), [3]).unwrap();
    let so = ServeOptions::new();
    let want = paged_attention::run(&d, &qp, &kp, &vp, &tables, &lengths, so).unwrap();
    let cfg = paged_attention::CONFIG.autotune(true);
    let p = paged_attention::profile_with(
        &cfg,
        &d,
        ProfileOptions { warmup: 0, runs: 1 },
        &qp,
        &kp,
        &vp,
        &tables,
        &lengths,
        so,
    )
    .unwrap();
    assert!(
        p.tuned[0].starts_with("opts: pages_per_block = "),
        "{:?}",
        p.tuned
    );
    let tuned = paged_attention::run_with(&cfg, &d, &qp, &kp, &vp, &tables, &lengths, so).unwrap();
    close(&tuned, &want.to_f64_vec(), 1e-5);
    assert_eq!(executable_cache_usage().tunings, 3);

    // The interpreter tunes nothing.
    let small = uniform(&[4, 700], F32, 6, 1.0);
    let p = gemm::profile_with(
        &cfg,
        &Device::interpreter(),
        ProfileOptions { warmup: 0, runs: 1 },
        &small,
        &b,
        g,
    )
    .unwrap();
    assert!(p.tuned.is_empty(), "{:?}", p.tuned);
    let _ = fs::remove_dir_all(&dir);
}

/// Run by the test above in a second process with the same cache directory.
#[test]
fn child_reads_the_stored_choice() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let d = dev();
    let (q, k, v) = qkv();
    let cfg = flash_attention::CONFIG.autotune(true);
    flash_attention::run_with(&cfg, &d, &q, &k, &v, FlashOptions::new().causal(true)).unwrap();
    println!("child compiles {}", d.cache().stats().compiles);
}

/// The candidates of `ServeOptions`: pages per step for the paged kernels
/// (the default's page count first, none wider than the block tables, no
/// duplicates), `block_kv` for decode over a contiguous cache.
#[test]
fn serve_options_candidates_fit_the_inputs() {
    let spec = |shape: &[usize], dtype: DType| TensorSpec::new(shape.to_vec(), dtype);
    let pages = |c: Vec<ServeOptions>| c.iter().map(|o| o.pages_per_block).collect::<Vec<_>>();
    let paged = |page: usize, width: usize| {
        let kv = spec(&[64, page, 2, 16], F32);
        let inputs = [
            spec(&[3, 4, 16], F32),
            kv.clone(),
            kv,
            spec(&[3, width], S32),
            spec(&[3], S32),
        ];
        ServeOptions::new().tuning_candidates(&inputs)
    };
    // 512 keys by default (32 pages of 16), then 256, 1024, 2048, 4096.
    assert_eq!(pages(paged(16, 1000)), [32, 16, 64, 128, 256]);
    // Cut to the table's width, and the duplicates dropped.
    assert_eq!(pages(paged(16, 20)), [20, 16]);
    assert_eq!(pages(paged(1024, 20)), [1, 2, 4]);
    // A value given is measured first.
    let given = ServeOptions::new().pages_per_block(3);
    let kv = spec(&[64, 16, 2, 16], F32);
    let inputs = [spec(&[3, 4, 16], F32), kv.clone(), kv, spec(&[3, 50], S32)];
    assert_eq!(pages(given.tuning_candidates(&inputs))[..2], [3, 16]);
    assert_eq!(given.tuning_label(), "pages_per_block = 3, block_kv = 128");

    // decode_attention: block_kv up to the cache's length, default first.
    let cache = spec(&[2, 2, 300, 16], F32);
    let inputs = [
        spec(&[2, 4, 1, 16], F32),
        cache.clone(),
        cache,
        spec(&[2], S32),
    ];
    let blocks: Vec<usize> = ServeOptions::new()
        .tuning_candidates(&inputs)
        .iter()
        .map(|o| o.block_kv)
        .collect();
    assert_eq!(blocks, [128, 64, 256, 300]);
    // Nothing to tune without the expected inputs.
    assert!(ServeOptions::new()
        .tuning_candidates(&inputs[..1])
        .is_empty());
}
