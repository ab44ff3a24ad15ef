//! `tessel bench --peer PYTHON`: the comparison's plumbing, with a stand-in
//! for the Python side (CI has no JAX): it reads the script on stdin and
//! answers in the script's line format; errors are one line.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::{last_line, tessel, tessel_env};

/// A stand-in `python` that swallows the script and prints `body`.
fn stand_in(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessel-peer-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("python");
    std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn peer_rows_pair_tessel_with_the_peer_side() {
    let python = stand_in("ok", "echo 'jax 9.9 cpu'\necho 'dispatch 0.0040 -'");
    let dir = python.parent().unwrap().to_path_buf();
    let json = dir.join("peer.json");
    let (code, out, err) = tessel_env(
        &[
            "bench",
            "dispatch",
            "--peer",
            python.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
        &[("TESSEL_DEVICE", "cpu")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("vs jax 9.9 cpu"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("dispatch, median"))
        .unwrap_or_else(|| panic!("no dispatch row in {out}"));
    // tessel's median, the stand-in's 0.0040 ms, and their ratio.
    let cols: Vec<&str> = row.split_whitespace().collect();
    let (ours, theirs): (f64, f64) = (cols[2].parse().unwrap(), cols[3].parse().unwrap());
    assert!(ours > 0.0 && ours < 5.0, "{row}");
    assert_eq!(theirs, 0.004, "{row}");
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &rows[0];
    assert_eq!(row["workload"], "dispatch, median", "{rows}");
    assert_eq!(row["peer_ms"], 0.004, "{rows}");
    assert!(row["tessel_temp_mib"].is_null(), "{rows}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn peer_errors_are_one_line() {
    let (code, _, err) = tessel(&["bench", "--peer", "/no/such/python", "dispatch"]);
    assert_eq!(code, 2);
    assert!(last_line(&err).contains("cannot start it"), "{err}");

    let (code, _, err) = tessel(&["bench", "--peer", "python3", "warp"]);
    assert_eq!(code, 2);
    assert!(
        last_line(&err).contains("unknown peer workload `warp`; workloads: attention, norm"),
        "{err}"
    );

    let python = stand_in(
        "nojax",
        "echo \"ModuleNotFoundError: No module named 'jax'\" >&2\nexit 1",
    );
    let (code, _, err) = tessel(&["bench", "dispatch", "--peer", python.to_str().unwrap()]);
    assert_eq!(code, 2);
    let line = last_line(&err);
    assert!(
        line.contains("the JAX side of `dispatch` failed")
            && line.contains("(install it: pip install jax)"),
        "{err}"
    );
    std::fs::remove_dir_all(python.parent().unwrap()).ok();
}
