//! The `tessel` command: each command on small inputs (a `.npy` round trip
//! equals the library call), `--help` everywhere, and errors as one line
//! with exit code 2.

mod bad_input;
mod cache;
mod device;
mod inputs;
mod kernels;
mod peer;
mod plugin;
mod serving;

use std::process::Command;

use tessel::kernels::gemm::{gemm, Activation, GemmOptions};
use tessel::prelude::*;

fn tessel(args: &[&str]) -> (i32, String, String) {
    tessel_env::<&str>(args, &[])
}

/// `tessel args` with `env` added to the environment: exit code, stdout
/// and stderr.
fn tessel_env<V: AsRef<std::ffi::OsStr>>(
    args: &[&str],
    env: &[(&str, V)],
) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessel"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn last_line(s: &str) -> &str {
    s.lines().rfind(|l| l.starts_with("tessel:")).unwrap_or("")
}

#[test]
fn list_info_and_help() {
    let (code, out, _) = tessel(&["list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("gemm(a, b)") && out.contains("block_sparse(dense, sparse_values, indices)"),
        "{out}"
    );
    let (code, out, _) = tessel(&["info"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("platform:    cpu") && out.contains("StableHLO:"),
        "{out}"
    );
    for cmd in ["info", "list", "lower", "run"] {
        let (code, out, _) = tessel(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}");
        assert!(
            out.starts_with(&format!("usage: tessel {cmd}")),
            "{cmd}: {out}"
        );
    }
    let (code, out, _) = tessel(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("commands:"));
}

#[test]
fn lower_prints_stablehlo() {
    let (code, out, err) = tessel(&[
        "lower",
        "gemm",
        "--shape",
        "a=2x3:f32",
        "--shape",
        "b=3x4",
        "--opt",
        "activation=relu",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("func.func public @main(%v0: tensor<2x3xf32>")
            && out.contains("stablehlo.maximum"),
        "{out}"
    );
}

#[test]
fn run_round_trips_through_npy() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = HostTensor::from_fn(TensorSpec::new([3, 5], F32), |i| i as f64 * 0.25 - 1.0);
    let b = HostTensor::from_fn(TensorSpec::new([5, 2], F32), |i| 1.0 - i as f64 * 0.5);
    let (pa, pb, po) = (dir.join("a.npy"), dir.join("b.npy"), dir.join("out.npy"));
    a.write_npy(&pa).unwrap();
    b.write_npy(&pb).unwrap();
    let (code, out, err) = tessel(&[
        "run",
        "gemm",
        "--arg",
        &format!("a={}", pa.display()),
        "--arg",
        &format!("b={}", pb.display()),
        "--opt",
        "activation=silu",
        "--out",
        po.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("output 0: f32[3,2]") && out.contains("ms cached"),
        "{out}"
    );
    let got = HostTensor::read_npy(&po).unwrap();
    let want = gemm::run(
        &Device::cpu().unwrap(),
        &a,
        &b,
        GemmOptions {
            activation: Activation::Silu,
            ..GemmOptions::default()
        },
    )
    .unwrap();
    assert_eq!(got, want);

    // The short forms give the same file.
    let short = dir.join("short.npy");
    let (code, _, err) = tessel(&[
        "run",
        "gemm",
        "-a",
        &format!("a={}", pa.display()),
        "-a",
        &format!("b={}", pb.display()),
        "--opt",
        "activation=silu",
        "-o",
        short.to_str().unwrap(),
        "-d",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(HostTensor::read_npy(&short).unwrap(), want);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn argument_errors_are_one_line_with_exit_code_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["list", "gemm"], "unexpected argument 'gemm' found"),
        (
            &["run", "gemm", "-x", "1"],
            "unexpected argument '-x' found",
        ),
        (&["-z"], "unexpected argument '-z' found"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (
            &["lower", "gem"],
            "unknown kernel 'gem'; did you mean 'gemm'?",
        ),
        (
            &["run", "gemm", "--ar", "a=x"],
            "a similar argument exists: '--arg'",
        ),
        (
            &["run", "gemm", "-o"],
            "a value is required for '--out <FILE>'",
        ),
        (&["bench", "[gemm", "sparse]"], "unknown workload `[gemm`"),
        (&["completions", "tcsh"], "invalid value 'tcsh'"),
    ];
    for (args, needle) in cases {
        let (code, out, err) = tessel(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("tessel: ") && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn completions_cover_commands_options_and_kernel_names() {
    for (shell, marker) in [
        ("bash", "_tessel()"),
        ("zsh", "#compdef tessel"),
        ("fish", "complete -c tessel"),
    ] {
        let (code, out, err) = tessel(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: {out}");
        for word in ["bench", "device", "plugin", "json"] {
            assert!(out.contains(word), "{shell} completions lack {word}");
        }
        // fish's generator completes no positional values.
        if shell != "fish" {
            for kernel in ["flash_attention", "paged_attention"] {
                assert!(out.contains(kernel), "{shell} completions lack {kernel}");
            }
        }
    }
}

#[test]
fn the_interpreter_runs_without_any_plugin() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-interp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = HostTensor::from_fn(TensorSpec::new([3, 5], F32), |i| i as f64 * 0.25 - 1.0);
    let b = HostTensor::from_fn(TensorSpec::new([5, 2], F32), |i| 1.0 - i as f64 * 0.5);
    let (pa, pb, po) = (dir.join("a.npy"), dir.join("b.npy"), dir.join("out.npy"));
    a.write_npy(&pa).unwrap();
    b.write_npy(&pb).unwrap();
    // No plugin anywhere: a missing plugin file, an empty cache and no
    // Python to fetch one with.
    let run = |device: &str| {
        Command::new(env!("CARGO_BIN_EXE_tessel"))
            .args(["run", "gemm", "--arg"])
            .arg(format!("a={}", pa.display()))
            .arg("--arg")
            .arg(format!("b={}", pb.display()))
            .args(["--out", po.to_str().unwrap()])
            .env("TESSEL_DEVICE", device)
            .env("TESSEL_PJRT_PLUGIN", dir.join("missing.so"))
            .env("TESSEL_CACHE_DIR", dir.join("cache"))
            .env("TESSEL_PYTHON", dir.join("no-python"))
            .output()
            .expect("the binary runs")
    };
    let out = run("interpreter");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = HostTensor::read_npy(&po).unwrap();
    let want = gemm::run(&Device::cpu().unwrap(), &a, &b, GemmOptions::default()).unwrap();
    for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
    }
    // The same command on the CPU device needs the plugin.
    let out = run("cpu");
    assert_eq!(out.status.code(), Some(2));
    let out = run("quantum");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown device `quantum`"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_vjp_entry_writes_one_cotangent_per_input() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-vjp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = TensorSpec::new([2, 4], F32);
    let gate = HostTensor::from_fn(spec.clone(), |i| i as f64 * 0.3 - 1.0);
    let up = HostTensor::from_fn(spec.clone(), |i| 0.5 - i as f64 * 0.1);
    let dout = HostTensor::from_fn(spec, |i| (i % 3) as f64 - 1.0);
    let paths: Vec<_> = ["gate", "up", "dout", "dgate", "dup"]
        .iter()
        .map(|n| dir.join(format!("{n}.npy")))
        .collect();
    for (t, p) in [&gate, &up, &dout].iter().zip(&paths) {
        t.write_npy(p).unwrap();
    }
    let arg = |n: &str, p: &std::path::Path| format!("{n}={}", p.display());
    let (code, _, err) = tessel(&[
        "run",
        "swiglu_vjp",
        "--arg",
        &arg("gate", &paths[0]),
        "--arg",
        &arg("up", &paths[1]),
        "--arg",
        &arg("dout", &paths[2]),
        "--out",
        paths[3].to_str().unwrap(),
        "--out",
        paths[4].to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let want = tessel::kernels::grads::swiglu_vjp::run(&Device::cpu().unwrap(), &gate, &up, &dout)
        .unwrap();
    assert_eq!(HostTensor::read_npy(&paths[3]).unwrap(), want.0);
    assert_eq!(HostTensor::read_npy(&paths[4]).unwrap(), want.1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn errors_are_one_line_with_exit_code_2() {
    let mask = |opt: &'static str| {
        [
            "lower",
            "block_sparse_attention",
            "--shape",
            "q=1x1x8x4",
            "--shape",
            "k=1x1x8x4",
            "--shape",
            "v=1x1x8x4",
            "--opt",
            opt,
        ]
    };
    let (bad_term, bad_chunk, empty) = (
        mask("mask=causal&loca:4:0"),
        mask("mask=chunked:0"),
        mask("mask="),
    );
    let cases: [(&[&str], &str); 16] = [
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        // Extra positional words are refused, not ignored.
        (
            &[
                "lower", "gemm", "extra", "--shape", "a=2x3", "--shape", "b=3x4",
            ],
            "unexpected argument 'extra' found",
        ),
        (
            &["list", "gemm"],
            "unexpected argument 'gemm' found (usage: tessel list)",
        ),
        (
            &["run", "gemm", "a.npy"],
            "unexpected argument 'a.npy' found",
        ),
        (
            &["lower", "nope", "--shape", "a=1"],
            "unknown kernel 'nope'",
        ),
        (&["lower", "gemm", "--shape", "a=2x3"], "missing --shape b="),
        (
            &["lower", "gemm", "--shape", "a=2y3", "--shape", "b=3x4"],
            "bad shape `2y3`",
        ),
        (
            &[
                "lower",
                "gemm",
                "--shape",
                "a=2x3",
                "--shape",
                "b=3x4",
                "--opt",
                "fast=true",
            ],
            "no option `fast`",
        ),
        (
            &[
                "run",
                "gemm",
                "--arg",
                "a=/nonexistent/a.npy",
                "--arg",
                "b=/nonexistent/b.npy",
            ],
            "No such file",
        ),
        (
            &["lower", "gemm", "--shape", "a=2x3", "--shape", "b=4x5"],
            "contracting",
        ),
        (
            &["run", "gemm", "--bogus", "1"],
            "unexpected argument '--bogus' found",
        ),
        (
            &[
                "lower",
                "gemm",
                "--shape",
                "a=2x3",
                "--shape",
                "b=3x4",
                "--opt",
                "transpose_a=maybe",
            ],
            "option transpose_a: takes true or false, got `maybe`",
        ),
        (&bad_term, "option mask: bad term `loca:4:0`"),
        (
            &bad_chunk,
            "accepted: full, causal, causal:OFFSET, local:LEFT:RIGHT",
        ),
        (&empty, "option mask: bad term ``"),
        (
            &[
                "lower",
                "dequantize",
                "--shape",
                "q=4x2",
                "--shape",
                "scales=2",
                "--opt",
                "q_dtype=fp8",
            ],
            "option q_dtype: fp8 needs 1-byte quantized arguments",
        ),
    ];
    for (args, needle) in cases {
        let (code, out, err) = tessel(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let line = last_line(&err);
        assert!(line.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("tessel:")).count(), 1);
    }
}

/// Tags balance and every element is closed: enough to call the SVG well-formed.
fn well_formed(svg: &str) -> bool {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let Some(end) = rest[start..].find('>') else {
            return false;
        };
        let tag = &rest[start + 1..start + end];
        rest = &rest[start + end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop().as_deref() != Some(name.trim()) {
                return false;
            }
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    stack.is_empty()
}

#[test]
fn bench_writes_a_table_json_and_a_well_formed_svg() {
    let dir = std::env::temp_dir().join(format!("tessel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("b.json"), dir.join("b.svg"));
    let (code, out, err) = tessel(&[
        "bench",
        "sparse",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("dense matmul (reference)") && out.contains("block-sparse 10%"),
        "{out}"
    );
    assert!(err.contains("[1/1] done"), "progress on stderr: {err}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = j.as_array().expect("an array of rows");
    assert_eq!(rows.len(), 3, "{j}");
    for r in rows {
        assert_eq!(r["workload"], "sparse", "{r}");
        assert!(r["speedup"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r["kernel"].is_string() && r["median_ms"].is_f64(), "{r}");
    }
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && well_formed(&s), "{s}");
    assert!(s.contains("polyline"));
    // Round ticks on both axes of both panels, axis titles and a legend.
    for label in ["0", "20", "40", "60", "80", "100"] {
        assert!(
            s.contains(&format!("text-anchor=\"middle\">{label}</text></g>")),
            "x tick {label}: {s}"
        );
    }
    assert_eq!(s.matches("<g class=\"xtick\">").count(), 12, "{s}");
    assert!(s.matches("<g class=\"ytick\">").count() >= 6, "{s}");
    for title in ["density (%)", "time (ms)", "memory (MiB)"] {
        assert!(s.contains(&format!(">{title}</text>")), "{title}: {s}");
    }
    let legend = &s[s.find("<g class=\"legend\">").expect("a legend")..];
    for v in [
        "dense matmul (reference)",
        "block-sparse 10%",
        "block-sparse 50%",
    ] {
        assert!(legend.contains(&format!(">{v}</text>")), "{v}: {legend}");
    }
    let (code, _, err) = tessel(&["bench", "warp"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown workload `warp`"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_non_utf8_argument_is_a_clean_error() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"x=\xff\xfe");
    let out = Command::new(env!("CARGO_BIN_EXE_tessel"))
        .args([
            std::ffi::OsStr::new("lower"),
            std::ffi::OsStr::new("gemm"),
            bad,
        ])
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("argument 3 is not valid UTF-8"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn inputs_that_are_not_files_and_unwritable_outputs_fail_at_once() {
    let (code, _, err) = tessel(&[
        "run",
        "gemm",
        "--arg",
        "a=/dev/zero",
        "--arg",
        "b=/dev/zero",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
    let t = std::time::Instant::now();
    let (code, _, err) = tessel(&["bench", "gemm", "--json", "/proc/no/such/file.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/proc/no/such/file.json"), "{err}");
    assert!(!err.contains("done"), "the suite must not run first: {err}");
    assert!(t.elapsed().as_secs() < 30);
}
