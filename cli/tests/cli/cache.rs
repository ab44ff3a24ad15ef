//! `tessel cache`: a run writes its executable to the persistent cache, a
//! second process loads it, `cache` shows it and `cache clear` removes it.

use std::ffi::OsStr;
use std::path::Path;

use super::tessel_env;

fn tessel_in(dir: &Path, args: &[&str], extra: &[(&str, &str)]) -> (i32, String, String) {
    let mut env: Vec<(&str, &OsStr)> = vec![("TESSEL_EXECUTABLE_CACHE_DIR", dir.as_os_str())];
    env.extend(extra.iter().map(|(k, v)| (*k, OsStr::new(v))));
    tessel_env(args, &env)
}

#[test]
fn runs_fill_the_cache_and_clear_empties_it() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let x = tessel::HostTensor::from_vec(vec![1.0f32, -2.0, 0.5, 4.0, 3.0, -1.0], [2, 3]).unwrap();
    let input = dir.join("x.npy");
    x.write_npy(&input).unwrap();
    let arg = format!("x={}", input.display());
    let lower_run = ["run", "rms_norm_plain", "--arg", arg.as_str()];
    let (code, out, _) = tessel_in(&dir, &["cache"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("holds:      0 executables, 0 B"), "{out}");

    let (code, first, err) = tessel_in(&dir, &lower_run, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(first.contains("(trace + compile + run)"), "{first}");
    let (_, out, _) = tessel_in(&dir, &["cache"], &[]);
    assert!(out.contains("holds:      1 executable, "), "{out}");
    // The second process loads it and prints the same result.
    let (code, second, err) = tessel_in(&dir, &lower_run, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        second.contains("(trace + load from the executable cache + run)"),
        "{second}"
    );
    let outputs = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("output"))
            .map(String::from)
            .collect()
    };
    assert!(
        !outputs(&first).is_empty() && outputs(&first) == outputs(&second),
        "{first}\n{second}"
    );

    let (code, out, _) = tessel_in(&dir, &["cache", "clear"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("removed:    1 executable, "), "{out}");
    let (_, out, _) = tessel_in(&dir, &["cache"], &[]);
    assert!(out.contains("0 executables"), "{out}");

    let (code, out, _) = tessel_in(&dir, &["cache"], &[("TESSEL_EXECUTABLE_CACHE", "0")]);
    assert_eq!(code, 0);
    assert!(out.contains("is off"), "{out}");
    let (code, _, err) = tessel_in(&dir, &["cache", "purge"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand 'purge'"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
