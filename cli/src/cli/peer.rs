//! `tessel bench --peer PYTHON`: tessel's kernels side by side with the JAX a
//! skilled user would write for the same workloads (`cli/jax_peer.py`,
//! run by `PYTHON`, which must have `jax` installed), both timed the same
//! way on this machine in one run: the minimum of N runs on
//! device-resident arguments (the dispatch row: the median of 20,000
//! calls).
//!
//! Each workload runs twice on each side in the order tessel, JAX, JAX,
//! tessel, and each side keeps its best figure, so load that drifts during
//! the run weighs on both alike.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

use tessel::kernels::attention::{flash_attention, FlashOptions};
use tessel::kernels::gemm::{gemm, GemmOptions};
use tessel::kernels::moe::moe;
use tessel::kernels::norm::{layer_norm, rms_norm};
use tessel::kernels::softmax::{log_softmax, softmax};
use tessel::prelude::*;

use super::bench::{data, temp_mib};
use tessel::profile::{Profile, ProfileOptions};

/// The JAX side, run by the user's Python.
const SCRIPT: &str = include_str!("../../jax_peer.py");

/// The workloads and what each compares.
pub const WORKLOADS: &[(&str, &str)] = &[
    (
        "attention",
        "causal flash attention B=1 H=8 D=64 f32, S = 2048 and 8192, and its trace + compile time",
    ),
    (
        "norm",
        "the row-wise kernels over 4096x1024 f32: layer_norm, rms_norm, softmax and log_softmax",
    ),
    (
        "moe",
        "routed MoE T=4096 d=1024 ff=4096 E=8 top-2, capacity factor 1.25",
    ),
    (
        "gemm",
        "gemm 2048^3 f32, bf16 operands with an f32 result, and s8 operands with an s32 result",
    ),
    (
        "dispatch",
        "a cached trivial kernel (f32[16] + 1) on device buffers",
    ),
    (
        "scan",
        "a recurrent cell tanh(h W + x) over T=512 steps, B=8 D=256 f32 with scan, and its gradient",
    ),
];

/// The rows: (workload, key shared with the script, label).
const ROWS: &[(&str, &str, &str)] = &[
    ("attention", "attention_2048", "attention causal S=2048"),
    ("attention", "attention_8192", "attention causal S=8192"),
    (
        "attention",
        "attention_compile_2048",
        "attention trace+compile S=2048",
    ),
    (
        "attention",
        "attention_compile_8192",
        "attention trace+compile S=8192",
    ),
    ("norm", "layer_norm", "layer_norm 4096x1024"),
    ("norm", "rms_norm", "rms_norm 4096x1024"),
    ("norm", "softmax", "softmax 4096x1024"),
    ("norm", "log_softmax", "log_softmax 4096x1024"),
    ("moe", "moe", "moe T=4096 E=8 top-2"),
    ("gemm", "gemm_f32", "gemm 2048^3 f32"),
    ("gemm", "gemm_bf16", "gemm 2048^3 bf16 -> f32"),
    ("gemm", "gemm_s8", "gemm 2048^3 s8 -> s32"),
    ("dispatch", "dispatch", "dispatch, median"),
    ("scan", "scan_rnn", "scan rnn T=512 B=8 D=256"),
    ("scan", "scan_rnn_grad", "scan rnn value_and_grad"),
];

/// One side's figure for a row: milliseconds and, where known, the
/// compiled program's temporaries in MiB.
#[derive(Clone, Copy, Debug)]
struct Figure {
    ms: f64,
    temp_mib: Option<f64>,
}

type Figures = BTreeMap<String, Figure>;

/// Keeps the lower time of `a` and `b` for every key.
fn merge_best(into: &mut Figures, from: Figures) {
    for (k, f) in from {
        into.entry(k)
            .and_modify(|old| {
                if f.ms < old.ms {
                    *old = f;
                }
            })
            .or_insert(f);
    }
}

fn figure(p: &Profile) -> Figure {
    Figure {
        ms: p.run.min * 1e3,
        temp_mib: temp_mib(p),
    }
}

#[cpu_kernel]
fn add_one(x: Tensor) -> Tensor {
    x + 1.0
}

/// A recurrent cell `h = tanh(h W + x)` over the rows of `xs`: the last
/// state and the stacked states.
fn rnn(h0: Tensor, w: Tensor, xs: Tensor) -> (Tensor, Tensor) {
    scan(h0, xs, |h: Tensor, x: Tensor| {
        let h = (h.matmul(w) + x).tanh();
        (h, h)
    })
}

/// [`rnn`] as a kernel.
#[cpu_kernel]
fn rnn_scan(h0: Tensor, w: Tensor, xs: Tensor) -> (Tensor, Tensor) {
    rnn(h0, w, xs)
}

/// The mean square of [`rnn`]'s states and its gradient with respect to
/// `w` and `xs`.
#[cpu_kernel]
fn rnn_scan_grad(w: Tensor, xs: Tensor, h0: Tensor) -> (Tensor, Tensor, Tensor) {
    let loss = |(w, xs): (Tensor, Tensor)| {
        let (_, hs) = rnn(h0, w, xs);
        (hs * hs).mean(&[0, 1, 2])
    };
    let (l, (dw, dxs)) = tessel::autodiff::value_and_grad(loss, (w, xs));
    (l, dw, dxs)
}

/// tessel's side of `workload`.
fn tessel_side(dev: &Device, workload: &str) -> Result<Figures> {
    let mut out = Figures::new();
    let runs = |runs| ProfileOptions { warmup: 1, runs };
    match workload {
        "attention" => {
            for (s, n) in [(2048, 5), (8192, 3)] {
                let (q, k, v) = (
                    data(vec![1, 8, s, 64], 0.5),
                    data(vec![1, 8, s, 64], 0.4),
                    data(vec![1, 8, s, 64], 0.3),
                );
                let opts = FlashOptions::new().causal(true);
                let p = flash_attention::profile(dev, runs(n), &q, &k, &v, opts)?;
                out.insert(format!("attention_{s}"), figure(&p));
                out.insert(
                    format!("attention_compile_{s}"),
                    Figure {
                        ms: (p.trace_seconds + p.compile_seconds) * 1e3,
                        temp_mib: None,
                    },
                );
            }
        }
        "norm" => {
            let (t, d) = (4096, 1024);
            let (x, scale, bias) = (
                data(vec![t, d], 1.0),
                data(vec![d], 1.0),
                data(vec![d], 0.5),
            );
            let p = layer_norm::profile(dev, runs(41), &x, &scale, &bias, 1e-5)?;
            out.insert("layer_norm".into(), figure(&p));
            let p = rms_norm::profile(dev, runs(41), &x, &scale, 1e-6)?;
            out.insert("rms_norm".into(), figure(&p));
            let p = softmax::profile(dev, runs(41), &x, -1)?;
            out.insert("softmax".into(), figure(&p));
            let p = log_softmax::profile(dev, runs(41), &x, -1)?;
            out.insert("log_softmax".into(), figure(&p));
        }
        "moe" => {
            let (t, d, ff, e) = (4096, 1024, 4096, 8);
            let p = moe::profile(
                dev,
                runs(3),
                &data(vec![t, d], 1.0),
                &data(vec![d, e], 0.05),
                &data(vec![e, d, ff], 0.03),
                &data(vec![e, ff, d], 0.03),
            )?;
            out.insert("moe".into(), figure(&p));
        }
        "gemm" => {
            let n = 2048;
            let (a, b) = (data(vec![n, n], 1.0), data(vec![n, n], 1.0));
            let p = gemm::profile(dev, runs(5), &a, &b, GemmOptions::default())?;
            out.insert("gemm_f32".into(), figure(&p));
            let bf16 = GemmOptions {
                out_dtype: Some(F32),
                ..GemmOptions::default()
            };
            let p = gemm::profile(dev, runs(5), &a.cast(BF16), &b.cast(BF16), bf16)?;
            out.insert("gemm_bf16".into(), figure(&p));
            // Integers in -128..=127 from the same pattern (scaled by 127).
            let int8 = |x: &HostTensor| {
                let v = x.to_f64_vec();
                HostTensor::from_fn(TensorSpec::new([n, n], S8), |i| (v[i] * 127.0).round())
            };
            let s8 = GemmOptions {
                out_dtype: Some(S32),
                ..GemmOptions::default()
            };
            let p = gemm::profile(dev, runs(5), &int8(&a), &int8(&b), s8)?;
            out.insert("gemm_s8".into(), figure(&p));
        }
        "dispatch" => {
            let x = dev.to_device(&data(vec![16], 1.0))?;
            add_one::call(dev, &x)?;
            let mut times = Vec::with_capacity(20_000);
            for _ in 0..20_000 {
                let t = Instant::now();
                let y = add_one::call(dev, &x)?;
                y.block_until_ready()?;
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            out.insert(
                "dispatch".into(),
                Figure {
                    ms: times[times.len() / 2] * 1e3,
                    temp_mib: None,
                },
            );
        }
        "scan" => {
            let (t, b, d) = (512, 8, 256);
            let (h0, w, xs) = (
                data(vec![b, d], 0.5),
                data(vec![d, d], 0.05),
                data(vec![t, b, d], 1.0),
            );
            let p = rnn_scan::profile(dev, runs(21), &h0, &w, &xs)?;
            out.insert("scan_rnn".into(), figure(&p));
            let p = rnn_scan_grad::profile(dev, runs(11), &w, &xs, &h0)?;
            out.insert("scan_rnn_grad".into(), figure(&p));
        }
        // `compare`'s caller checks the names against `WORKLOADS`.
        _ => {}
    }
    Ok(out)
}

/// JAX's side of `workload`: the script's lines `<key> <ms> <temp MiB|->`,
/// and its first line, the JAX version and platform.
fn jax_side(python: &str, workload: &str) -> Result<(String, Figures), String> {
    let mut child = Command::new(python)
        .args(["-", workload])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("--peer {python}: cannot start it: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(SCRIPT.as_bytes())
            .map_err(|e| format!("--peer {python}: {e}"))?;
    }
    let done = child
        .wait_with_output()
        .map_err(|e| format!("--peer {python}: {e}"))?;
    let stdout = String::from_utf8_lossy(&done.stdout);
    if !done.status.success() {
        let stderr = String::from_utf8_lossy(&done.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        let hint = if stderr.contains("No module named 'jax'") {
            " (install it: pip install jax)"
        } else {
            ""
        };
        return Err(format!(
            "--peer {python}: the JAX side of `{workload}` failed: {}{hint}",
            last.unwrap_or("no message")
        ));
    }
    let mut lines = stdout.lines();
    let version = lines.next().unwrap_or("jax").to_string();
    let mut out = Figures::new();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [key, ms, temp] = parts[..] {
            let ms = ms
                .parse::<f64>()
                .map_err(|_| format!("--peer {python}: unreadable line `{line}`"))?;
            out.insert(
                key.to_string(),
                Figure {
                    ms,
                    temp_mib: temp.parse().ok(),
                },
            );
        }
    }
    Ok((version, out))
}

/// A finished row of the comparison.
pub struct PeerRow {
    /// What is measured.
    pub label: &'static str,
    /// tessel's time, milliseconds.
    pub tessel_ms: f64,
    /// JAX's time, milliseconds.
    pub jax_ms: f64,
    /// tessel's temporaries, MiB.
    pub tessel_temp: Option<f64>,
    /// JAX's temporaries, MiB.
    pub jax_temp: Option<f64>,
}

/// Runs the comparison for `workloads` (all when empty); returns the JAX
/// version line and the rows.
pub fn compare(
    dev: &Device,
    python: &str,
    workloads: &[String],
) -> Result<(String, Vec<PeerRow>), String> {
    let chosen: Vec<&str> = if workloads.is_empty() {
        WORKLOADS.iter().map(|w| w.0).collect()
    } else {
        workloads.iter().map(String::as_str).collect()
    };
    let mut version = String::new();
    let mut rows = Vec::new();
    let progress = super::progress::Progress::new(chosen.len());
    for w in &chosen {
        progress.start(w, "tessel, JAX, JAX, tessel");
        let tessel = |ours: &mut Figures| -> Result<(), String> {
            merge_best(ours, tessel_side(dev, w).map_err(|e| format!("{w}: {e}"))?);
            Ok(())
        };
        let (mut ours, mut theirs) = (Figures::new(), Figures::new());
        tessel(&mut ours)?;
        for _ in 0..2 {
            let (v, f) = jax_side(python, w)?;
            version = v;
            merge_best(&mut theirs, f);
        }
        tessel(&mut ours)?;
        for &(_, key, label) in ROWS.iter().filter(|r| r.0 == *w) {
            if let (Some(t), Some(j)) = (ours.get(key), theirs.get(key)) {
                rows.push(PeerRow {
                    label,
                    tessel_ms: t.ms,
                    jax_ms: j.ms,
                    tessel_temp: t.temp_mib,
                    jax_temp: j.temp_mib,
                });
            }
        }
        progress.done();
    }
    progress.finish();
    Ok((version, rows))
}

/// The rows as a table; `tessel / JAX` below 1 means tessel is faster.
pub fn table(version: &str, rows: &[PeerRow]) -> String {
    let mut s = format!(
        "tessel {} vs {version}, same machine, same run (min of N runs on device buffers)\n",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        s,
        "{:<32} {:>12} {:>12} {:>11} {:>12} {:>12}",
        "workload", "tessel ms", "JAX ms", "tessel/JAX", "tessel MiB", "JAX MiB"
    );
    let mib = |m: Option<f64>| m.map_or_else(|| "-".to_string(), |m| format!("{m:.1}"));
    for r in rows {
        let _ = writeln!(
            s,
            "{:<32} {:>12.4} {:>12.4} {:>10.2}x {:>12} {:>12}",
            r.label,
            r.tessel_ms,
            r.jax_ms,
            r.tessel_ms / r.jax_ms.max(1e-12),
            mib(r.tessel_temp),
            mib(r.jax_temp)
        );
    }
    s
}

/// One row as JSON: the workload, the peer's version line, both times, their
/// ratio and both temporaries (`null` where unknown).
#[derive(serde::Serialize)]
struct PeerJson<'a> {
    workload: &'a str,
    peer: &'a str,
    tessel_ms: f64,
    peer_ms: f64,
    ratio: f64,
    tessel_temp_mib: Option<f64>,
    peer_temp_mib: Option<f64>,
}

/// The rows as a JSON array.
pub fn json(version: &str, rows: &[PeerRow]) -> Result<String, String> {
    let items: Vec<PeerJson> = rows
        .iter()
        .map(|r| PeerJson {
            workload: r.label,
            peer: version,
            tessel_ms: r.tessel_ms,
            peer_ms: r.jax_ms,
            ratio: r.tessel_ms / r.jax_ms.max(1e-12),
            tessel_temp_mib: r.tessel_temp,
            peer_temp_mib: r.jax_temp,
        })
        .collect();
    serde_json::to_string_pretty(&items).map_err(|e| format!("JSON: {e}"))
}
