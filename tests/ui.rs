//! Compile-time behaviour of the kernel attributes: `ui/pass` must build,
//! `ui/fail` must fail with the messages in the `.stderr` files beside them.
//!
//! The expected messages are those of the pinned toolchain, Rust 1.95
//! (`rust-toolchain.toml`; the compiler's own wording changes between
//! releases). On another compiler the suite fails, naming both versions;
//! set `TESSEL_SKIP_UI=1` to skip it deliberately there (for example when
//! trying a newer compiler), or regenerate the files with
//! `TRYBUILD=overwrite cargo test --test ui` and review them.

const PINNED: &str = "rustc 1.95.";

fn compiler_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn ui() {
    let version = compiler_version();
    if !version.starts_with(PINNED) {
        if std::env::var_os("TESSEL_SKIP_UI").is_some() {
            eprintln!("skipping the ui suite (TESSEL_SKIP_UI): its expectations are for {PINNED}x, this is {version}");
            return;
        }
        panic!(
            "the ui suite's expectations are for {PINNED}x (rust-toolchain.toml), this is {version}; \
             use the pinned toolchain, or set TESSEL_SKIP_UI=1 to skip this suite"
        );
    }
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
