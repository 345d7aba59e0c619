//! Compile-fail cases: each declaration in `ui-tests/compile-fail/` must fail
//! with exactly the message and span in its `.stderr`. Regenerate with
//! `TRYBUILD=overwrite` and read every changed file before committing.
//!
//! The `lock_*.rs` cases change a query whose state is locked in the
//! repository's `weir.lock/` (the base declarations are
//! `ui-tests/lock-pass/*_base.rs`). trybuild builds every case in a project
//! of its own under the target directory, so the lock directory is given by
//! `WEIR_LOCK_DIR` (the convention for lock files that do not sit next to
//! the crate's `Cargo.toml`); cargo passes it on to the macro.

#[test]
fn compile_fail() {
    // Set before trybuild starts cargo, which inherits the environment; no
    // other test of this binary reads it.
    std::env::set_var(
        "WEIR_LOCK_DIR",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../weir.lock"),
    );
    // The cases check the locks; they never write them.
    std::env::remove_var("WEIR_LOCK");
    let t = trybuild::TestCases::new();
    t.compile_fail(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ui-tests/compile-fail/*.rs"
    ));
}
