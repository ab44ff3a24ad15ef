//! The persistent compilation cache: a compile writes the executable to
//! disk, the next compile of the same program (in this process or another)
//! loads it, and a damaged or foreign entry is removed and compiled again.
//!
//! One test function: the cache's directory and its counters are
//! process-wide.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::{
    clear_executable_cache, executable_cache_dir, executable_cache_stats, executable_cache_usage,
    DiskCacheStats, Executable, Program,
};
use tessel_dsl::{HostTensor, Tensor, TensorSpec, F32};

/// A program no other run has compiled (`nonce` is in its text).
fn program(nonce: &str) -> Program {
    let mlir = format!(
        "// {nonce}\nfunc.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {{\n  \
         %0 = stablehlo.multiply %a, %a : tensor<3xf32>\n  return %0 : tensor<3xf32>\n}}\n"
    );
    let spec = TensorSpec::new([3], F32);
    Program::new("square", mlir, vec![spec.clone()], vec![spec])
}

fn squares(exe: &Executable) -> Vec<f32> {
    let x = HostTensor::from_vec(vec![1.0f32, -2.0, 3.0], [3]).unwrap();
    exe.run(&[&x]).unwrap()[0].to_vec::<f32>().unwrap()
}

fn delta(before: DiskCacheStats) -> DiskCacheStats {
    let now = executable_cache_stats();
    DiskCacheStats {
        hits: now.hits - before.hits,
        misses: now.misses - before.misses,
        writes: now.writes - before.writes,
        rejected: now.rejected - before.rejected,
    }
}

fn only_entry() -> PathBuf {
    let dir = executable_cache_dir().unwrap();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xlaexe"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

fn stats(hits: u64, misses: u64, writes: u64, rejected: u64) -> DiskCacheStats {
    DiskCacheStats {
        hits,
        misses,
        writes,
        rejected,
    }
}

fn affine(a: &[Tensor]) -> Tensor {
    (a[0] * 2.0 + 1.0).tanh()
}

#[test]
fn executables_persist_and_bad_entries_are_recompiled() {
    if std::env::var_os("TESSEL_DISK_CACHE_CHILD").is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessel-disk-cache-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    std::env::set_var("TESSEL_EXECUTABLE_CACHE_DIR", &dir);
    std::env::remove_var("TESSEL_EXECUTABLE_CACHE");
    let d = dev();
    let p = program(&format!("{:?}", std::time::SystemTime::now()));

    // A miss compiles and writes; the next compile loads it.
    let s = executable_cache_stats();
    let first = d.compile(&p).unwrap();
    assert_eq!(delta(s), stats(0, 1, 1, 0));
    assert_eq!(executable_cache_usage().entries, 1);
    let s = executable_cache_stats();
    let loaded = d.compile(&p).unwrap();
    assert_eq!(delta(s), stats(1, 0, 0, 0));
    assert_eq!(squares(&first), vec![1.0, 4.0, 9.0]);
    assert_eq!(squares(&loaded), squares(&first));
    assert_eq!(loaded.outputs(), first.outputs());
    assert_eq!(
        loaded.cost_analysis().unwrap().flops,
        first.cost_analysis().unwrap().flops
    );
    assert_eq!(loaded.memory_stats().ok(), first.memory_stats().ok());

    // Damaged entries: one byte flipped, cut short, or another program's.
    let entry = only_entry();
    let good = fs::read(&entry).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x40;
    let other = program("another program");
    d.compile(&other).unwrap();
    let other_entry = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|q| *q != entry && q.extension().is_some_and(|x| x == "xlaexe"))
        .unwrap();
    let foreign = fs::read(&other_entry).unwrap();
    fs::remove_file(&other_entry).unwrap();
    for bad in [
        flipped,
        good[..good.len() / 2].to_vec(),
        foreign,
        Vec::new(),
    ] {
        fs::write(&entry, &bad).unwrap();
        let s = executable_cache_stats();
        let exe = d.compile(&p).unwrap();
        assert_eq!(delta(s), stats(0, 0, 1, 1));
        assert_eq!(squares(&exe), vec![1.0, 4.0, 9.0]);
        // Written again, whole: the next compile loads it.
        assert_eq!(only_entry(), entry);
        let s = executable_cache_stats();
        assert_eq!(squares(&d.compile(&p).unwrap()), vec![1.0, 4.0, 9.0]);
        assert_eq!(delta(s), stats(1, 0, 0, 0));
    }

    // Not a file: a FIFO (reading it blocked the compile forever) or a
    // link to /dev/zero (read without end). A miss, then replaced.
    #[cfg(unix)]
    for kind in ["fifo", "zero"] {
        fs::remove_file(&entry).unwrap();
        match kind {
            "fifo" => assert!(Command::new("mkfifo")
                .arg(&entry)
                .status()
                .unwrap()
                .success()),
            _ => std::os::unix::fs::symlink("/dev/zero", &entry).unwrap(),
        }
        let s = executable_cache_stats();
        let exe = d.compile(&p).unwrap();
        assert_eq!(delta(s), stats(0, 1, 1, 0), "{kind}");
        assert_eq!(squares(&exe), vec![1.0, 4.0, 9.0]);
        assert!(fs::symlink_metadata(&entry).unwrap().is_file(), "{kind}");
    }

    // Kernels go through the same path; a second process compiles nothing.
    let x = HostTensor::from_vec(vec![0.25f32, -1.0], [2]).unwrap();
    let k = Kernel::new("disk_cache_affine", affine);
    let want = k.run(&d, &[&x]).unwrap().remove(0);
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_runs_from_the_cache",
            "--nocapture",
        ])
        .env("TESSEL_DISK_CACHE_CHILD", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(
        out.contains(&format!(
            "child: {:?} hits 1 misses 0 writes 0",
            want.to_vec::<f32>().unwrap()
        )),
        "{out}"
    );

    // The size bound evicts the least recently used entries.
    std::env::set_var("TESSEL_EXECUTABLE_CACHE_BYTES", "1");
    d.compile(&program("evicted")).unwrap();
    assert_eq!(executable_cache_usage().entries, 0);
    std::env::remove_var("TESSEL_EXECUTABLE_CACHE_BYTES");

    // Clearing, and turning it off.
    d.compile(&program("cleared")).unwrap();
    let usage = executable_cache_usage();
    assert!(usage.entries == 1 && usage.bytes > 0, "{usage:?}");
    assert_eq!(clear_executable_cache().unwrap().entries, 1);
    assert_eq!(executable_cache_usage().entries, 0);
    std::env::set_var("TESSEL_EXECUTABLE_CACHE", "0");
    assert_eq!(executable_cache_dir(), None);
    let s = executable_cache_stats();
    assert_eq!(squares(&d.compile(&p).unwrap()), vec![1.0, 4.0, 9.0]);
    assert_eq!(delta(s), stats(0, 0, 0, 0));
    std::env::remove_var("TESSEL_EXECUTABLE_CACHE");
    fs::remove_dir_all(&dir).unwrap();
}

/// Run by the test above in a second process, with its cache directory.
#[test]
fn child_process_runs_from_the_cache() {
    if std::env::var_os("TESSEL_DISK_CACHE_CHILD").is_none() {
        return;
    }
    let d = dev();
    let x = HostTensor::from_vec(vec![0.25f32, -1.0], [2]).unwrap();
    let got = Kernel::new("disk_cache_affine", affine)
        .run(&d, &[&x])
        .unwrap()
        .remove(0);
    let s = executable_cache_stats();
    println!(
        "child: {:?} hits {} misses {} writes {}",
        got.to_vec::<f32>().unwrap(),
        s.hits,
        s.misses,
        s.writes
    );
}
