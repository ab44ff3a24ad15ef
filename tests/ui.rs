//! Compile-time behaviour of the kernel attributes: `ui/pass` must build,
//! `ui/fail` must fail with the messages in the `.stderr` files beside them.
//!
//! The expected messages are those of the pinned toolchain, Rust 1.95 (the
//! compiler's own wording changes between releases). On another compiler
//! the suite is skipped with a note; regenerate the files there with
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
        eprintln!("skipping the ui suite: its expectations are for {PINNED}x, this is {version}");
        return;
    }
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
