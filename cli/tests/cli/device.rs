//! `--device`, `--plugin`, `TESSEL_OFFLINE` and `tessel plugin`.

use tessel::prelude::*;

use super::tessel_env;

#[test]
fn device_and_plugin_flags_choose_the_device() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let x = HostTensor::from_vec(vec![3.0f32, 4.0], [1, 2]).unwrap();
    let px = dir.join("x.npy");
    x.write_npy(&px).unwrap();
    let arg = format!("x={}", px.display());
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "rms_norm_plain", "--arg", arg.as_str()];
        args.extend_from_slice(extra);
        tessel_env::<&str>(&args, &[])
    };
    let (code, on_cpu, err) = run(&["--device", "cpu"]);
    assert_eq!(code, 0, "{err}");
    let (code, interpreted, err) = run(&["--device", "interpreter"]);
    assert_eq!(code, 0, "{err}");
    let first = |s: &str| s.lines().next().unwrap_or_default().to_string();
    assert_eq!(first(&on_cpu), first(&interpreted));
    let (code, out, err) = tessel_env::<&str>(&["info", "--device", "cpu:3"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("devices:     3"), "{out}");
    // The environment decides when no option does.
    let (code, out, err) = tessel_env(&["info"], &[("TESSEL_DEVICE", "cpu:4")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("devices:     4"), "{out}");
    let (code, out, _) = tessel_env::<&str>(&["info", "--device", "interpreter"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("none (interpreter)"), "{out}");

    // Bad choices: one line, exit code 2.
    let (code, _, err) = run(&["--device", "quantum"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown device `quantum`"), "{err}");
    let (code, _, err) = run(&["--device", "cpu", "--plugin", "x.so"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("'--device <NAME>' cannot be used with '--plugin <PATH>'"),
        "{err}"
    );
    let missing = dir.join("missing.so");
    let (code, _, err) = tessel_env::<&str>(&["info", "--plugin", missing.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.so"), "{err}");
    for help in [
        &["info", "--help"][..],
        &["run", "--help"],
        &["bench", "--help"],
    ] {
        let (code, out, _) = tessel_env::<&str>(help, &[]);
        assert_eq!(code, 0);
        assert!(
            out.contains("--device <NAME>") && out.contains("--plugin <PATH>"),
            "{out}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn offline_mode_names_plugin_install() {
    let dir = std::env::temp_dir().join(format!("tessel-cli-offline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An empty cache, no Python package to find, and no download allowed.
    let env = [
        ("TESSEL_CACHE_DIR", dir.join("cache")),
        ("TESSEL_PYTHON", dir.join("no-python")),
        ("TESSEL_OFFLINE", "1".into()),
    ];
    let (code, _, err) = tessel_env(&["info"], &env);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("TESSEL_OFFLINE is set") && err.contains("tessel plugin install WHEEL"),
        "{err}"
    );
    let (code, out, _) = tessel_env(&["plugin", "info"], &env);
    assert_eq!(code, 0);
    assert!(
        out.contains("(not installed)") && out.contains("offline:            yes"),
        "{out}"
    );
    // A wheel that is not the pinned one is refused before anything is written.
    let fake = dir.join("xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl");
    std::fs::write(&fake, b"not a wheel").unwrap();
    let (code, _, err) = tessel_env(&["plugin", "install", fake.to_str().unwrap()], &env);
    assert_eq!(code, 2);
    assert!(
        err.contains("has SHA-256") && err.contains("expected"),
        "{err}"
    );
    assert!(!dir
        .join("cache")
        .join("xla-cpu-pjrt-0.0.1")
        .join("xla_cpu_pjrt.so")
        .exists());
    // Pinned builds by name: an unknown name lists the known ones; a known
    // one is not downloaded while offline; a wheel of another build is
    // checked against that build's hash.
    let (code, _, err) = tessel_env(&["plugin", "install", "nope"], &env);
    assert_eq!(code, 2);
    assert!(
        err.contains("no pinned plugin build is named `nope`")
            && err.contains("lammps-jax-pjrt-cpu")
            && err.contains("fastatomstruct-xla-cpu"),
        "{err}"
    );
    let (code, _, err) = tessel_env(&["plugin", "install", "lammps-jax-pjrt-cpu"], &env);
    assert_eq!(code, 2);
    assert!(
        err.contains("lammps-jax-pjrt-cpu 0.11.2 is not installed and TESSEL_OFFLINE is set"),
        "{err}"
    );
    let fake = dir.join("lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl");
    std::fs::write(&fake, b"not a wheel").unwrap();
    let (code, _, err) = tessel_env(&["plugin", "install", fake.to_str().unwrap()], &env);
    assert_eq!(code, 2);
    assert!(err.contains("for lammps-jax-pjrt-cpu 0.11.2"), "{err}");
    let (code, out, _) = tessel_env(&["plugin", "info"], &env);
    assert_eq!(code, 0);
    assert!(
        out.contains("CPU plugin identity: not installed")
            && out.contains("lammps-jax-pjrt-cpu 0.11.2: not installed"),
        "{out}"
    );
    let (code, _, err) = tessel_env(&["plugin", "remove"], &env);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand 'remove'"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn version_prints_the_crate_version() {
    for flag in ["--version", "-V", "version"] {
        let (code, out, _) = tessel_env::<&str>(&[flag], &[]);
        assert_eq!(code, 0);
        assert_eq!(out.trim(), format!("tessel {}", env!("CARGO_PKG_VERSION")));
    }
    let (code, _, err) = tessel_env::<&str>(&["--version", "extra"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the subcommand 'extra' cannot be used with '--version'"),
        "{err}"
    );
}
