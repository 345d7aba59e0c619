//! Lock files: each query's state fingerprint kept in the user's repository,
//! so that a change that would break a running query's checkpoint is a
//! compile error (as sqlx keeps its queries' schemas in `.sqlx/`).
//!
//! The lock file of query `name` is `weir.lock/<name>.json` next to the
//! crate's `Cargo.toml` (`$CARGO_MANIFEST_DIR`), or in `$WEIR_LOCK_DIR`
//! (absolute, or relative to the manifest directory) when set. What the build
//! does with it depends on `$WEIR_LOCK`:
//!
//! - unset: when the query has a lock file, its fingerprint is compared with
//!   the declaration's by `weir_plan::state_schema::classify` (the rules
//!   `start()` applies to a checkpoint); refused changes are compile errors
//!   at the changed tokens, allowed changes compile.
//! - `update`: the lock file is (re)written with the declaration's
//!   fingerprint: the change is accepted.
//! - `require` (for CI): as unset, and also a query without a lock file, or
//!   whose lock file differs from the declaration even by an allowed change,
//!   is an error, so the committed lock files are always current.
//!
//! The expansion reads `WEIR_LOCK` and `WEIR_LOCK_DIR` with `option_env!`
//! and includes the lock file with `include_bytes!`, so cargo rebuilds the
//! crate when either changes.

use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;
use quote::quote;
use weir_plan::state_schema::{classify, Change, StateFingerprint, REFUSED_HELP};
use weir_plan::{Location, Rule, Violation};

use crate::ast::QueryDecl;
use crate::check::locate;
use crate::errors::{with_help, Errors};
use crate::lower::{Lowered, OpSpans};

/// What the build does with lock files (`$WEIR_LOCK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compare with the lock file when there is one.
    Check,
    /// Write the lock file.
    Update,
    /// Compare, and require a current lock file.
    Require,
}

impl Mode {
    /// The mode `$WEIR_LOCK` asks for, or an error for an unknown value.
    fn from_env(value: Option<&str>) -> Result<Mode, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Mode::Check),
            Some("update") => Ok(Mode::Update),
            Some("require") => Ok(Mode::Require),
            Some(other) => Err(format!(
                "WEIR_LOCK=\"{other}\" is not a lock mode: use `update` (write the lock files) or `require` (fail without a current lock file), or unset it"
            )),
        }
    }
}

/// Where lock files are: `$WEIR_LOCK_DIR`, or `weir.lock` in the manifest
/// directory (`None` outside cargo).
fn lock_dir() -> Option<PathBuf> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    match std::env::var_os("WEIR_LOCK_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                Some(d)
            } else {
                Some(manifest?.join(d))
            }
        }
        _ => Some(manifest?.join("weir.lock")),
    }
}

/// The declaration's fingerprint: the plan's, with what only the
/// declaration knows (the sources' kinds, the late-rows side output).
pub fn fingerprint(q: &QueryDecl, l: &Lowered) -> StateFingerprint {
    let mut f = StateFingerprint::of(&l.plan);
    let mut kinds = vec![];
    if let (Some(node), Some(s)) = (l.plan.nodes.last(), &q.source) {
        kinds.push((node.input.clone(), s.ident.to_string()));
    }
    if let Some(j) = q.join.as_deref().filter(|j| !j.table) {
        if let (Some(node), Some(s)) = (l.plan.nodes.first(), &j.side.source) {
            kinds.push((node.input.clone(), s.ident.to_string()));
        }
    }
    for s in &mut f.sources {
        s.kind = kinds
            .iter()
            .find(|(n, _)| *n == s.name)
            .map(|(_, k)| k.clone());
    }
    f.late_rows = Some(q.late_rows.is_some());
    f
}

/// The lock file's text for `fingerprint` of query `name`.
fn lock_text(name: &str, fingerprint: &StateFingerprint) -> String {
    let v = serde_json::json!({
        "query": name,
        "written_by": "stream_query! with WEIR_LOCK=update; a change that would break this query's checkpoints fails to compile (README: Changing a running query)",
        "state": fingerprint,
    });
    let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
    text.push('\n');
    text
}

/// The fingerprint in a lock file's text.
fn read_lock(text: &str) -> Result<StateFingerprint, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let state = v
        .get("state")
        .cloned()
        .ok_or_else(|| "it has no \"state\"".to_string())?;
    serde_json::from_value(state).map_err(|e| e.to_string())
}

/// Applies the query's lock file (see the module docs): reports refused
/// changes at their tokens, writes the lock in update mode, and returns the
/// tokens that make cargo rebuild when the lock or its settings change.
pub fn check_lock(q: &QueryDecl, l: &Lowered, errs: &mut Errors) -> TokenStream {
    let tracking = quote! {
        const _: ::core::option::Option<&str> = ::core::option_env!("WEIR_LOCK");
        const _: ::core::option::Option<&str> = ::core::option_env!("WEIR_LOCK_DIR");
    };
    let mode = match Mode::from_env(std::env::var("WEIR_LOCK").ok().as_deref()) {
        Ok(m) => m,
        Err(e) => {
            errs.spanned(&l.spans.query, e);
            return tracking;
        }
    };
    let Some(dir) = lock_dir() else {
        return tracking;
    };
    let path = dir.join(format!("{}.json", l.query_name));
    let new = fingerprint(q, l);
    if mode == Mode::Update {
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, lock_text(&l.query_name, &new)));
        if let Err(e) = written {
            errs.spanned(
                &l.spans.query,
                format!("cannot write the lock file {}: {e}", path.display()),
            );
        }
        return with_file(tracking, &path);
    }
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            errs.spanned(
                &l.spans.query,
                format!("cannot read the lock file {}: {e}", path.display()),
            );
            return tracking;
        }
    };
    let shown = shown_path(&dir, &l.query_name);
    apply(old.as_deref(), &new, mode, &shown, l, errs);
    if old.is_some() {
        with_file(tracking, &path)
    } else {
        tracking
    }
}

/// The lock file as messages name it: `<dir name>/<query>.json` (stable
/// across machines, unlike the absolute path).
fn shown_path(dir: &Path, query: &str) -> String {
    let d = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "weir.lock".into());
    format!("{d}/{query}.json")
}

/// `tracking` and an `include_bytes!` of the lock file at `path`.
fn with_file(mut tracking: TokenStream, path: &Path) -> TokenStream {
    if let Some(p) = path.to_str() {
        tracking.extend(quote! { const _: &[u8] = ::core::include_bytes!(#p); });
    }
    tracking
}

/// Compares the lock's text `old` (absent: no lock file) with `new` in
/// `mode`, reporting every refused change (and in require mode every
/// difference) at its tokens.
fn apply(
    old: Option<&str>,
    new: &StateFingerprint,
    mode: Mode,
    shown: &str,
    l: &Lowered,
    errs: &mut Errors,
) {
    let relock = "accept the change and re-lock with `WEIR_LOCK=update cargo build`";
    let Some(text) = old else {
        if mode == Mode::Require {
            errs.spanned(
                &l.spans.query,
                with_help(
                    &format!(
                        "query `{}` has no lock file ({shown}), and WEIR_LOCK=require asks for one",
                        l.query_name
                    ),
                    Some("write it with `WEIR_LOCK=update cargo build` and commit it"),
                ),
            );
        }
        return;
    };
    let old = match read_lock(text) {
        Ok(f) => f,
        Err(e) => {
            errs.spanned(
                &l.spans.query,
                with_help(
                    &format!("the lock file {shown} is damaged: {e}"),
                    Some("restore it from version control, or re-lock with `WEIR_LOCK=update cargo build`"),
                ),
            );
            return;
        }
    };
    for c in classify(&old, new) {
        if c.allowed && mode != Mode::Require {
            continue;
        }
        let (message, help) = if c.allowed {
            (
                format!("the lock file {shown} is out of date: {}", c.message),
                "this change keeps the checkpoint usable; re-lock with `WEIR_LOCK=update cargo build` to record it".to_string(),
            )
        } else {
            let own = c
                .help
                .as_deref()
                .map(|h| format!("{h}; or "))
                .unwrap_or_default();
            (
                c.message.clone(),
                format!("{own}{REFUSED_HELP}, or {relock}"),
            )
        };
        let text = format!(
            "{}\nnote: the query's state is locked in {shown}",
            with_help(&message, Some(&help))
        );
        errs.spanned(tokens_of(l, &c), text);
    }
}

/// The tokens a change points at.
fn tokens_of(l: &Lowered, c: &Change) -> TokenStream {
    use weir_plan::state_schema::ChangeKind;
    // A join's type and condition: the `how:` and `on:` tokens.
    if let (Some(Location::Op { node, op, .. }), ChangeKind::JoinType | ChangeKind::JoinCondition) =
        (&c.at, c.kind)
    {
        if *node == l.result_node() {
            if let Some(OpSpans::Join { how, on, .. }) = l.spans.ops.get(*op) {
                match (c.kind, on) {
                    (ChangeKind::JoinCondition, Some(on)) => return on.clone(),
                    (ChangeKind::JoinType, _) => return how.clone(),
                    _ => {}
                }
            }
        }
    }
    match &c.at {
        Some(at) => locate(
            l,
            &Violation::new(Rule::UnknownInput, at.clone(), String::new(), None),
        ),
        None => match c.kind {
            weir_plan::state_schema::ChangeKind::OutputMode => locate(
                l,
                &Violation::new(
                    Rule::UnknownInput,
                    Location::OutputMode,
                    String::new(),
                    None,
                ),
            ),
            weir_plan::state_schema::ChangeKind::Sink => locate(
                l,
                &Violation::new(Rule::UnknownInput, Location::Sink, String::new(), None),
            ),
            _ => l.spans.query.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{errors, lower, parse};
    use quote::quote;

    fn lowered(decl: TokenStream) -> (QueryDecl, Lowered) {
        let mut errs = errors::Errors::new();
        let q = parse::parse_query(decl, &mut errs).unwrap();
        let l = lower::lower(&q, &mut errs).unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        (q, l)
    }

    fn views(aggregate: TokenStream) -> (QueryDecl, Lowered) {
        lowered(quote! {
            query Views {
                source: memory,
                schema: Click { page: String, ts: Timestamp, n: i64 },
                watermark: ts delay "10 minutes",
                group_by: [window(ts, "1 minute"), page],
                aggregate: #aggregate,
                output_mode: update,
                sink: memory,
            }
        })
    }

    fn diagnose(old: &(QueryDecl, Lowered), new: &(QueryDecl, Lowered), mode: Mode) -> Vec<String> {
        let text = lock_text("views", &fingerprint(&old.0, &old.1));
        let mut errs = Errors::new();
        apply(
            Some(&text),
            &fingerprint(&new.0, &new.1),
            mode,
            "weir.lock/views.json",
            &new.1,
            &mut errs,
        );
        errs.diagnostics()
            .iter()
            .map(|d| format!("at `{}`: {}", d.at, d.message))
            .collect()
    }

    #[test]
    fn a_changed_aggregate_is_an_error_at_the_aggregate() {
        let old = views(quote!({ views: count(), total: sum(n) }));
        let new = views(quote!({ views: sum(n), total: sum(n) }));
        assert_eq!(
            diagnose(&old, &new, Mode::Check),
            ["at `sum (n)`: aggregate `views` changed from count() to sum(n): the state of existing checkpoints stores a count of rows\nhelp: keep the old definition, or run the changed query on a new checkpoint location (its state starts empty), or accept the change and re-lock with `WEIR_LOCK=update cargo build`\nnote: the query's state is locked in weir.lock/views.json"]
        );
        assert_eq!(diagnose(&old, &old, Mode::Check), Vec::<String>::new());
    }

    #[test]
    fn allowed_changes_compile_unless_the_lock_is_required_current() {
        let old = views(quote!({ views: count(), total: sum(n) }));
        let new = views(quote!({ hits: count(), total: sum(n) }));
        assert!(diagnose(&old, &new, Mode::Check).is_empty());
        let d = diagnose(&old, &new, Mode::Require);
        assert_eq!(d.len(), 1);
        assert!(d[0].starts_with("at `count ()`: the lock file weir.lock/views.json is out of date: aggregate count() was renamed from `views` to `hits`"), "{d:?}");
    }

    #[test]
    fn a_lock_file_round_trips_and_damage_is_reported() {
        let q = views(quote!({ views: count() }));
        let f = fingerprint(&q.0, &q.1);
        assert_eq!(f.sources[0].kind.as_deref(), Some("memory"));
        assert_eq!(f.late_rows, Some(false));
        assert_eq!(read_lock(&lock_text("views", &f)).unwrap(), f);
        let mut errs = Errors::new();
        apply(
            Some("{"),
            &f,
            Mode::Check,
            "weir.lock/views.json",
            &q.1,
            &mut errs,
        );
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("the lock file weir.lock/views.json is damaged"));
        let mut errs = Errors::new();
        apply(
            None,
            &f,
            Mode::Require,
            "weir.lock/views.json",
            &q.1,
            &mut errs,
        );
        assert!(errs.diagnostics()[0].message.contains("has no lock file"));
        let mut errs = Errors::new();
        apply(
            None,
            &f,
            Mode::Check,
            "weir.lock/views.json",
            &q.1,
            &mut errs,
        );
        assert!(errs.is_empty());
    }

    #[test]
    fn the_mode_comes_from_weir_lock() {
        assert_eq!(Mode::from_env(None), Ok(Mode::Check));
        assert_eq!(Mode::from_env(Some("update")), Ok(Mode::Update));
        assert_eq!(Mode::from_env(Some("require")), Ok(Mode::Require));
        assert!(Mode::from_env(Some("yes"))
            .unwrap_err()
            .contains("not a lock mode"));
        assert_eq!(
            shown_path(Path::new("/x/weir.lock"), "q"),
            "weir.lock/q.json"
        );
    }

    /// The fingerprints of the matrix's base declarations
    /// (`ui-tests/lock-pass/*_base.rs`), by query name.
    fn bases() -> Vec<(String, StateFingerprint)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ui-tests/lock-pass");
        let mut out = vec![];
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with("_base.rs") {
                continue;
            }
            let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
            for item in file.items {
                let syn::Item::Macro(m) = item else { continue };
                let (q, l) = lowered(m.mac.tokens.clone());
                out.push((l.query_name.clone(), fingerprint(&q, &l)));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn committed(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../weir.lock")
            .join(format!("{name}.json"))
    }

    /// The committed lock files the ui tests and `tests/it/query_changes.rs`
    /// compile against are the base declarations'. Under `WEIR_LOCK=update`
    /// (as the macro writes a query's lock file) it writes them first:
    ///
    /// ```text
    /// WEIR_LOCK=update cargo test -p weir-macros --lib lock::tests::the_committed_locks_are_the_base_declarations
    /// ```
    #[test]
    fn the_committed_locks_are_the_base_declarations() {
        let bases = bases();
        if std::env::var("WEIR_LOCK").as_deref() == Ok("update") {
            for (name, f) in &bases {
                let path = committed(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, lock_text(name, f)).unwrap();
            }
        }
        assert_eq!(
            bases.iter().map(|b| b.0.as_str()).collect::<Vec<_>>(),
            [
                "locked_events",
                "locked_join",
                "locked_sessions",
                "locked_views"
            ]
        );
        for (name, f) in bases {
            let text = std::fs::read_to_string(committed(&name)).unwrap();
            assert_eq!(read_lock(&text).unwrap(), f, "{name}");
            assert_eq!(
                text,
                lock_text(&name, &f),
                "{name}: as WEIR_LOCK=update writes it"
            );
        }
    }
}
