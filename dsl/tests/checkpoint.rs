//! Checkpoints (safetensors): every dtype round-trips bit for bit (NaN
//! payloads and fp8 codes included), metadata survives, loading checks
//! names, shapes and dtypes and lists every problem at once, prefixes
//! rename, damaged files are errors, and Python's `safetensors.numpy`
//! reads tessel's files and tessel reads its (where Python has it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use tessel_dsl::host::checkpoint::{self, Checkpoint};
use tessel_dsl::{DType, Error, HostError, HostTensor, TensorSpec, F32, S32};
use tessel_testing::Rng;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-ckpt-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Random bytes of `spec` (any bit pattern: NaNs with payloads, fp8
/// codes, negative zeros), valid `pred` bytes for `pred`.
fn random_bytes(rng: &mut Rng, spec: TensorSpec) -> HostTensor {
    let n = spec.checked_size_in_bytes().unwrap();
    let bytes: Vec<u8> = (0..n)
        .map(|_| {
            let b = rng.next_u64() as u8;
            if spec.dtype == DType::Pred {
                b & 1
            } else {
                b
            }
        })
        .collect();
    HostTensor::from_bytes(spec, bytes).unwrap()
}

fn invalid_message(e: Error) -> String {
    match e {
        Error::Host(HostError::InvalidInput {
            what: "checkpoint",
            message,
        }) => message,
        other => panic!("expected an invalid checkpoint, got {other:?}"),
    }
}

#[test]
fn every_dtype_round_trips_bit_for_bit() {
    let dir = scratch("dtypes");
    let path = dir.join("all.safetensors");
    let mut rng = Rng::new(7);
    let tensors: Vec<(String, HostTensor)> = DType::ALL
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let shape = [[3, 5], [1, 7], [0, 4], [2, 2]][i % 4].to_vec();
            (
                format!("t.{i}.{d}"),
                random_bytes(&mut rng, TensorSpec::new(shape, d)),
            )
        })
        .chain([("scalar".to_string(), HostTensor::scalar(2.5f32))])
        .collect();
    let meta = BTreeMap::from([("step".to_string(), "120".to_string())]);
    checkpoint::save_with_metadata(&path, tensors.iter().map(|(n, t)| (n.as_str(), t)), &meta)
        .unwrap();
    let mut ckpt = Checkpoint::load(&path).unwrap();
    assert_eq!(ckpt.metadata, meta);
    let want: Vec<(String, TensorSpec)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.spec().clone()))
        .collect();
    let got = ckpt.take_all(&want).unwrap();
    for ((name, t), g) in tensors.iter().zip(&got) {
        assert_eq!(g.as_bytes(), t.as_bytes(), "{name}");
        assert_eq!(g.spec(), t.spec(), "{name}");
    }
    assert!(ckpt.tensors.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn loading_lists_missing_unexpected_and_mismatched_keys() {
    let dir = scratch("keys");
    let path = dir.join("model.safetensors");
    let wq = HostTensor::zeros(TensorSpec::new([256, 128], F32));
    let bias = HostTensor::zeros(TensorSpec::new([4], F32));
    let extra = HostTensor::zeros(TensorSpec::new([2], S32));
    checkpoint::save(
        &path,
        [
            ("layers.3.attn.wq", &wq),
            ("layers.3.bias", &bias),
            ("opt.step", &extra),
        ],
    )
    .unwrap();
    let want = vec![
        (
            "layers.3.attn.wq".to_string(),
            TensorSpec::new([256, 256], F32),
        ),
        ("layers.3.bias".to_string(), TensorSpec::new([4], F32)),
        ("layers.3.norm".to_string(), TensorSpec::new([4], F32)),
    ];
    let mut ckpt = Checkpoint::load(&path).unwrap();
    let m = invalid_message(ckpt.take_all(&want).unwrap_err());
    assert!(
        m.contains("layers.3.attn.wq: expected f32[256,256], got f32[256,128]"),
        "{m}"
    );
    assert!(m.contains("missing keys: layers.3.norm"), "{m}");
    assert!(m.contains("unexpected keys: opt.step"), "{m}");
    // Nothing was taken; `take` leaves the keys it was not asked for.
    assert_eq!(ckpt.tensors.len(), 3);
    let got = ckpt
        .take(&[("layers.3.bias".to_string(), TensorSpec::new([4], F32))])
        .unwrap();
    assert_eq!(got, vec![bias]);
    assert_eq!(
        ckpt.tensors.keys().collect::<Vec<_>>(),
        ["layers.3.attn.wq", "opt.step"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prefixes_rename_parameters_saved_under_other_names() {
    let dir = scratch("prefix");
    let path = dir.join("hf.safetensors");
    let w = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let e = HostTensor::from_vec(vec![3.0f32], [1]).unwrap();
    checkpoint::save(
        &path,
        [("model.layers.0.w", &w), ("model.embed_tokens", &e)],
    )
    .unwrap();
    let mut ckpt = Checkpoint::load(&path).unwrap();
    ckpt.rename_prefixes(&[
        ("model.layers.", "layers."),
        ("model.embed_tokens", "embed"),
    ]);
    let got = ckpt
        .take_all(&[
            ("embed".to_string(), TensorSpec::new([1], F32)),
            ("layers.0.w".to_string(), TensorSpec::new([2], F32)),
        ])
        .unwrap();
    assert_eq!(got, vec![e, w]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_files_and_names_are_errors() {
    let dir = scratch("bad");
    let path = dir.join("x.safetensors");
    let t = HostTensor::from_vec(vec![1.0f32; 64], [8, 8]).unwrap();
    // Two tensors of one name; an empty name.
    let m = invalid_message(checkpoint::save(&path, [("a", &t), ("a", &t)]).unwrap_err());
    assert!(m.contains("`a` is given twice"), "{m}");
    let m = invalid_message(checkpoint::save(&path, [("", &t)]).unwrap_err());
    assert!(m.contains("empty name"), "{m}");
    checkpoint::save(&path, [("a", &t)]).unwrap();
    let good = std::fs::read(&path).unwrap();
    // Cut short, a header length past the end, garbage.
    for (what, bytes) in [
        ("truncated", good[..good.len() - 10].to_vec()),
        ("header past the end", {
            let mut b = good.clone();
            b[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
            b
        }),
        ("garbage", vec![7u8; 100]),
        ("empty", Vec::new()),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let m = invalid_message(Checkpoint::load(&path).unwrap_err());
        assert!(m.contains("not a safetensors file"), "{what}: {m}");
    }
    // Not a regular file.
    let m = invalid_message(Checkpoint::load(&dir).unwrap_err());
    assert!(m.contains("not a regular file"), "{m}");
    assert!(matches!(
        Checkpoint::load(dir.join("missing")).unwrap_err(),
        Error::Io { .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether this Python has `safetensors` and `numpy`.
fn python_has_safetensors() -> bool {
    Command::new("python3")
        .args(["-c", "import safetensors.numpy, numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn python_reads_tessel_files_and_tessel_reads_pythons() {
    if !python_has_safetensors() {
        eprintln!("skipped: python3 has no safetensors and numpy (pip install safetensors numpy)");
        return;
    }
    let dir = scratch("python");
    let ours = dir.join("ours.safetensors");
    let theirs = dir.join("theirs.safetensors");
    let w = HostTensor::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, -0.5], [2, 3]).unwrap();
    let ids = HostTensor::from_vec(vec![3i64, -9, 1 << 40], [3]).unwrap();
    let h = HostTensor::from_vec(
        vec![half::f16::from_f32(0.25), half::f16::from_f32(-8.0)],
        [2],
    )
    .unwrap();
    checkpoint::save(&ours, [("w", &w), ("ids", &ids), ("h", &h)]).unwrap();
    let script = r#"
import sys, numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
assert t["w"].dtype == np.float32 and t["w"].shape == (2, 3), t["w"]
assert t["w"].tolist() == [[1.5, -2.0, 3.25], [0.0, 7.0, -0.5]], t["w"]
assert t["ids"].dtype == np.int64 and t["ids"].tolist() == [3, -9, 1 << 40]
assert t["h"].dtype == np.float16 and t["h"].tolist() == [0.25, -8.0]
save_file({"x": np.arange(6, dtype=np.int32).reshape(3, 2), "y": np.array([0.5, 2.0])}, sys.argv[2])
print("ok")
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&ours)
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ckpt = Checkpoint::load(&theirs).unwrap();
    let got = ckpt
        .take_all(&[
            ("x".to_string(), TensorSpec::new([3, 2], S32)),
            ("y".to_string(), TensorSpec::new([2], DType::F64)),
        ])
        .unwrap();
    assert_eq!(got[0].to_vec::<i32>().unwrap(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(got[1].to_vec::<f64>().unwrap(), [0.5, 2.0]);
    std::fs::remove_dir_all(&dir).unwrap();
}
