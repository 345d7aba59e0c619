//! Compile-fail cases: each declaration in `ui-tests/compile-fail/` must fail
//! with exactly the message and span in its `.stderr`. Regenerate with
//! `TRYBUILD=overwrite` and read every changed file before committing.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ui-tests/compile-fail/*.rs"
    ));
}
