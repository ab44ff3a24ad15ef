//! Hostile inputs to `tessel run`: each is a one-line error with exit
//! code 2 before anything reaches the plugin.

use super::tessel;
use tessel::prelude::*;

/// A scratch directory for one test's files.
fn scratch(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `.npy` file of no data whose header says `descr` and `shape`.
fn header_only_npy(path: &std::path::Path, descr: &str, shape: &str) {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn an_empty_npy_with_a_huge_extent_is_refused() {
    let dir = scratch("empty-npy");
    let path = dir.join("empty.npy");
    // 128 bytes; the plugin aborted the process compiling f32[2^61, 0].
    header_only_npy(&path, "<f4", "(2305843009213693952, 0)");
    let (code, _, err) = tessel(&["run", "gelu", "--arg", &format!("x={}", path.display())]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("f32[2305843009213693952,0] is too large"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_sparse_coordinates_and_block_sizes_are_checked() {
    let dir = scratch("block-sparse");
    // `name=file` for `t` written to `file`.
    let write = |name: &str, file: &str, t: &HostTensor| {
        let p = dir.join(file);
        t.write_npy(&p).unwrap();
        format!("{name}={}", p.display())
    };
    let dense = write(
        "dense",
        "dense.npy",
        &HostTensor::from_vec(vec![1.0f32; 16 * 4], [16, 4]).unwrap(),
    );
    let values = write(
        "sparse_values",
        "values.npy",
        &HostTensor::from_vec(vec![1.0f32; 2 * 8 * 8], [2, 8, 8]).unwrap(),
    );
    let indices =
        |file: &str, v: Vec<i32>| write("indices", file, &HostTensor::from_vec(v, [2, 2]).unwrap());
    let run = |idx: &str, block_size: &str| {
        tessel(&[
            "run",
            "block_sparse",
            "--arg",
            &dense,
            "--arg",
            &values,
            "--arg",
            idx,
            "--opt",
            &format!("block_size={block_size}"),
        ])
    };
    let ok = indices("indices.npy", vec![0, 1, 1, 0]);
    let (code, out, err) = run(&ok, "8");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("output 0: HostTensor(f32[16,4]: [8, 8"),
        "{out}"
    );
    let bad = indices("bad.npy", vec![0, 1, 100, -5]);
    let cases = [
        (&bad, "8", "stored block 1 has coordinate (100, -5)"),
        (&ok, "0", "block_size must be at least 1"),
        (&ok, "7", "block_size 7 is not a multiple of 8"),
        (&ok, "18446744073709551615", "above the limit"),
        (
            &ok,
            "16",
            "block_size 16 disagrees with the values' blocks of 8 x 8",
        ),
    ];
    for (idx, block_size, needle) in cases {
        let (code, _, err) = run(idx, block_size);
        assert_eq!(code, 2, "block_size={block_size}: {err}");
        // One line of tessel's (the plugin may log its own while starting).
        let ours = err.lines().filter(|l| l.starts_with("tessel:")).count();
        assert_eq!(ours, 1, "{err}");
        assert!(err.contains(needle), "block_size={block_size}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A static block-sparse layout within the unrolling bounds (4096 query
/// blocks) but with more (query block, key block) pairs than its tables
/// may embed in a program is refused at once, naming the bound; a smaller
/// one lowers.
#[test]
fn block_sparse_layouts_past_the_table_bound_are_refused_before_lowering() {
    let lower = |s: usize| {
        let qkv = format!("1x1x{s}x8");
        let (q, k, v) = (format!("q={qkv}"), format!("k={qkv}"), format!("v={qkv}"));
        let t = std::time::Instant::now();
        let out = tessel(&[
            "lower",
            "block_sparse_attention",
            "--shape",
            &q,
            "--shape",
            &k,
            "--shape",
            &v,
            "--opt",
            "mask=causal",
            "--opt",
            "block_q=8",
            "--opt",
            "block_kv=8",
        ]);
        (out, t.elapsed())
    };
    // 4096 x 4096 blocks of 8: 2^24 pairs.
    let ((code, _, err), took) = lower(32768);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("at most 8388608 pairs (16777216 here)"),
        "{err}"
    );
    assert!(err.contains("block_sparse_attention_dynamic"), "{err}");
    assert!(took.as_secs() < 10, "refused after {took:?}");
    // 256 x 256 blocks: lowered.
    let ((code, out, err), _) = lower(2048);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stablehlo"), "{}", &out[..out.len().min(200)]);
}

#[test]
fn lowering_at_2_pow_40_is_refused_before_unrolling() {
    let s = 1usize << 40;
    let qkv = format!("1x1x{s}x8");
    let (q, k, v) = (format!("q={qkv}"), format!("k={qkv}"), format!("v={qkv}"));
    let (a, b) = (format!("a=8x{s}"), format!("b={s}x8"));
    let cases: [&[&str]; 3] = [
        &[
            "lower",
            "flash_attention",
            "--shape",
            &q,
            "--shape",
            &k,
            "--shape",
            &v,
        ],
        &[
            "lower",
            "block_sparse_attention",
            "--shape",
            &q,
            "--shape",
            &k,
            "--shape",
            &v,
            "--opt",
            "mask=causal",
        ],
        &[
            "lower",
            "gemm",
            "--shape",
            &a,
            "--shape",
            &b,
            "--opt",
            "block_k=8",
        ],
    ];
    for args in cases {
        let t = std::time::Instant::now();
        let (code, _, err) = tessel(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // Unrolled blocks are capped at 4096; flash's looped plan by its pairs.
        assert!(
            err.contains("at most 4096") || err.contains("at most 268435456 pairs"),
            "{args:?}: {err}"
        );
        assert!(t.elapsed().as_secs() < 30, "{args:?}: {:?}", t.elapsed());
    }
}
