//! Compile-time behaviour of the kernel attributes: `ui/pass` must build,
//! `ui/fail` must fail with the messages in the `.stderr` files beside them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
