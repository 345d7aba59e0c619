//! Changing a running query: which changes keep a checkpoint usable (#17).
//!
//! Every allowed change of the matrix is a declaration in
//! `ui-tests/lock-pass/`, compiled here against the committed lock files in
//! `weir.lock/` (this crate's manifest directory: the lock file convention).
//! For each, the old query (the family's `*_base.rs`) runs on a checkpoint,
//! stops, and the changed query runs on the same checkpoint: its output is
//! what Spark's recovery rule says, the old state carried on. The refused
//! changes are the `ui-tests/compile-fail/lock_*.rs` cases; here `start()`
//! refuses them too, with the same messages.

use std::path::Path;

use weir::arrow::record_batch::RecordBatch;
use weir::functions::{col, count_star, sum, window};
use weir::plan::OutputMode;
use weir::source::MemoryStream;
use weir::{Session, StreamWriter, Timestamp};

#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/events_base.rs"]
mod events_base;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/events_source_column_added.rs"]
mod events_source_column_added;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/events_update_mode.rs"]
mod events_update_mode;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/join_base.rs"]
mod join_base;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/sessions_base.rs"]
mod sessions_base;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_aggregate_renamed.rs"]
mod views_aggregate_renamed;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_base.rs"]
mod views_base;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_column_added.rs"]
mod views_column_added;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_filter_added.rs"]
mod views_filter_added;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_late_rows_added.rs"]
mod views_late_rows_added;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_sink_renamed.rs"]
mod views_sink_renamed;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_trigger_changed.rs"]
mod views_trigger_changed;
#[allow(dead_code)]
#[path = "../../ui-tests/lock-pass/views_watermark_delay.rs"]
mod views_watermark_delay;

/// Starts `writer` on the checkpoint `chk`, processes everything its source
/// has, stops, and returns memory table `table`'s rows.
fn run(
    session: &Session,
    writer: weir::Result<StreamWriter>,
    chk: &Path,
    table: &str,
) -> Vec<RecordBatch> {
    let q = writer
        .unwrap()
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    session
        .memory_table(table)
        .expect("the memory table")
        .rows()
}

fn ts(second: i64) -> Timestamp {
    Timestamp::from_millis(second * 1000)
}

fn view(page: &str, n: i64) -> views_base::View {
    views_base::View {
        page: page.into(),
        user: "u".into(),
        ts: ts(n.abs()),
        n,
        score: 0.5,
    }
}

/// Runs the base aggregation over a, a, b (counts a: 2, total 3; b: 1,
/// total 5), stops, then `changed` on the same checkpoint over a(4), b(-1);
/// returns the changed run's (page, views, total) rows, sorted.
fn views_then(
    changed: impl FnOnce(&Session, weir::source::BoxSource) -> weir::Result<StreamWriter>,
    table: &str,
) -> Vec<(String, i64, Option<i64>)> {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let stream = MemoryStream::of::<views_base::View>();
    stream
        .add_rows(&[view("a", 1), view("a", 2), view("b", 5)])
        .unwrap();
    let s1 = Session::new();
    let first = run(
        &s1,
        views_base::LockedViews::writer_from(&s1, Box::new(stream.clone())),
        &chk,
        "locked_views",
    );
    let mut first = views_base::LockedViews::rows(&first)
        .unwrap()
        .into_iter()
        .map(|r| (r.page, r.views, r.total))
        .collect::<Vec<_>>();
    first.sort();
    assert_eq!(
        first,
        [("a".into(), 2, Some(3)), ("b".into(), 1, Some(5))],
        "the old query's output"
    );
    stream.add_rows(&[view("a", 4), view("b", -1)]).unwrap();
    let s2 = Session::new();
    let batches = run(&s2, changed(&s2, Box::new(stream.clone())), &chk, table);
    let mut rows: Vec<(String, i64, Option<i64>)> = batches
        .iter()
        .flat_map(|b| {
            let page = b.column_by_name("page").unwrap();
            let views = b
                .columns()
                .iter()
                .zip(b.schema().fields())
                .find(|(_, f)| f.name() == "views" || f.name() == "hits")
                .map(|(c, _)| c.clone())
                .unwrap();
            let total = b.column_by_name("total").unwrap();
            (0..b.num_rows())
                .map(|i| {
                    (
                        crate::common::cell_json(page.as_ref(), i)
                            .as_str()
                            .unwrap()
                            .to_string(),
                        crate::common::cell_json(views.as_ref(), i)
                            .as_i64()
                            .unwrap(),
                        crate::common::cell_json(total.as_ref(), i).as_i64(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort();
    rows
}

/// What the changed aggregation emits in update mode: the groups the new
/// rows changed, counted on top of the old state (a: 2 + 1 views, 3 + 4;
/// b: 1 + 1 views, 5 - 1).
fn carried_on() -> Vec<(String, i64, Option<i64>)> {
    vec![("a".into(), 3, Some(7)), ("b".into(), 2, Some(4))]
}

#[test]
fn a_filter_added_before_the_aggregation_keeps_its_state() {
    // b(-1) is filtered out: only a changed, on top of its old state.
    assert_eq!(
        views_then(views_filter_added::LockedViews::writer_from, "locked_views"),
        [("a".to_string(), 3, Some(7))]
    );
}

#[test]
fn a_column_the_aggregation_does_not_read_keeps_its_state() {
    assert_eq!(
        views_then(views_column_added::LockedViews::writer_from, "locked_views"),
        carried_on()
    );
}

#[test]
fn a_renamed_aggregate_keeps_its_state() {
    assert_eq!(
        views_then(
            views_aggregate_renamed::LockedViews::writer_from,
            "locked_views"
        ),
        carried_on()
    );
}

#[test]
fn a_changed_watermark_delay_keeps_the_state() {
    assert_eq!(
        views_then(
            views_watermark_delay::LockedViews::writer_from,
            "locked_views"
        ),
        carried_on()
    );
}

#[test]
fn a_changed_trigger_keeps_the_state() {
    assert_eq!(
        views_then(
            views_trigger_changed::LockedViews::writer_from,
            "locked_views"
        ),
        carried_on()
    );
}

#[test]
fn a_late_rows_side_output_added_keeps_the_state() {
    assert_eq!(
        views_then(
            views_late_rows_added::LockedViews::writer_from,
            "locked_views"
        ),
        carried_on()
    );
}

#[test]
fn a_changed_sink_receives_the_new_batches_on_the_old_state() {
    assert_eq!(
        views_then(views_sink_renamed::LockedViews::writer_from, "views_v2"),
        carried_on()
    );
}

fn event(id: &str, second: i64) -> events_base::Event {
    events_base::Event {
        id: id.into(),
        user: "u".into(),
        ts: ts(second),
    }
}

/// The ids a deduplication run emitted, sorted.
fn ids(batches: &[RecordBatch]) -> Vec<String> {
    let mut ids: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("id").unwrap().clone();
            (0..b.num_rows())
                .map(move |i| {
                    crate::common::cell_json(c.as_ref(), i)
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort();
    ids
}

/// Runs the base deduplication over e1, e2, e1 (emits e1, e2), stops, and
/// returns the checkpoint and the stream for the changed run.
fn events_first(chk: &Path) -> MemoryStream {
    let stream = MemoryStream::of::<events_base::Event>();
    stream
        .add_rows(&[event("e1", 1), event("e2", 2), event("e1", 1)])
        .unwrap();
    let s = Session::new();
    let first = run(
        &s,
        events_base::LockedEvents::writer_from(&s, Box::new(stream.clone())),
        chk,
        "locked_events",
    );
    assert_eq!(ids(&first), ["e1", "e2"], "the old query's output");
    stream
}

#[test]
fn the_output_mode_of_a_deduplication_may_change() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let stream = events_first(&chk);
    // e1 was seen before the restart: the carried state drops it.
    stream.add_rows(&[event("e1", 1), event("e3", 3)]).unwrap();
    let s = Session::new();
    let out = run(
        &s,
        events_update_mode::LockedEvents::writer_from(&s, Box::new(stream)),
        &chk,
        "locked_events",
    );
    assert_eq!(ids(&out), ["e3"]);
}

#[test]
fn a_source_column_no_state_stores_may_be_added() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    events_first(&chk);
    // The same rows with the new column (the checkpoint's offsets say the
    // first batch is done), then new ones.
    let wider = MemoryStream::of::<events_source_column_added::Event>();
    let e = |id: &str, second| events_source_column_added::Event {
        id: id.into(),
        user: "u".into(),
        ts: ts(second),
        country: "nl".into(),
    };
    wider
        .add_rows(&[e("e1", 1), e("e2", 2), e("e1", 1)])
        .unwrap();
    wider.add_rows(&[e("e2", 2), e("e4", 4)]).unwrap();
    let s = Session::new();
    let out = run(
        &s,
        events_source_column_added::LockedEvents::writer_from(&s, Box::new(wider)),
        &chk,
        "locked_events",
    );
    assert_eq!(ids(&out), ["e4"]);
}

/// Runs the base aggregation on a checkpoint, then starts `changed` (built
/// with the builder API: the compiler refuses it as a declaration) on it.
fn refused_at_start(
    changed: impl FnOnce(weir::DataStream) -> weir::DataStream,
    mode: OutputMode,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let stream = MemoryStream::of::<views_base::View>();
    stream.add_rows(&[view("a", 1)]).unwrap();
    let s = Session::new();
    run(
        &s,
        views_base::LockedViews::writer_from(&s, Box::new(stream.clone())),
        &chk,
        "locked_views",
    );
    let s = Session::new();
    let err = changed(s.read_stream(stream))
        .write_stream()
        .output_mode(mode)
        .checkpoint_location(chk.to_str().unwrap())
        .sink(weir::sink::MemorySink::new("locked_views"))
        .start()
        .unwrap_err();
    assert!(matches!(err, weir::WeirError::Checkpoint { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn start_refuses_a_changed_aggregate_with_the_compilers_message() {
    let err = refused_at_start(
        |s| {
            s.with_watermark("ts", "10 minutes")
                .group_by(vec![window("ts", "1 minute"), col("page")])
                .agg(vec![sum("n", "views"), sum("n", "total")])
        },
        OutputMode::Update,
    );
    // The message of ui-tests/compile-fail/lock_changed_aggregate_function.stderr.
    assert!(
        err.contains("this checkpoint was written by a different query: aggregate `views` changed from count() to sum(n): the state of existing checkpoints stores a count of rows. Use a new checkpoint location"),
        "{err}"
    );
}

#[test]
fn start_refuses_a_changed_grouping_key_and_output_mode() {
    let err = refused_at_start(
        |s| {
            s.with_watermark("ts", "10 minutes")
                .group_by(vec![window("ts", "1 minute"), col("user")])
                .agg(vec![count_star("views"), sum("n", "total")])
        },
        OutputMode::Complete,
    );
    assert!(
        err.contains("the grouping keys of stateful operator 0 (aggregation) changed from [window(ts, \"1 minute\"), page] to [window(ts, \"1 minute\"), user]: its state is keyed by [window(ts, \"1 minute\"), page]"),
        "{err}"
    );
    assert!(
        err.contains("; the output mode changed from Update to Complete"),
        "every refused change is named: {err}"
    );
}

#[test]
fn start_refuses_an_added_stateful_operator() {
    let err = refused_at_start(
        |s| {
            s.with_watermark("ts", "10 minutes")
                .drop_duplicates(&["user", "ts"])
                .group_by(vec![window("ts", "1 minute"), col("page")])
                .agg(vec![count_star("views"), sum("n", "total")])
        },
        OutputMode::Update,
    );
    assert!(
        err.contains("the stateful operators changed from [aggregation] to [deduplication, aggregation]: a stateful operator was added"),
        "{err}"
    );
}

/// A checkpoint written before state fingerprints existed (its metadata
/// holds the plan as JSON) still opens, and is checked by the same rules.
#[test]
fn a_checkpoint_from_before_fingerprints_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let stream = MemoryStream::of::<views_base::View>();
    stream.add_rows(&[view("a", 1)]).unwrap();
    let s = Session::new();
    run(
        &s,
        views_base::LockedViews::writer_from(&s, Box::new(stream.clone())),
        &chk,
        "locked_views",
    );
    // Rewrite the metadata as an older weir wrote it: no field this change
    // added, keys in its order.
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chk.join("metadata")).unwrap()).unwrap();
    let old = serde_json::json!({
        "id": meta["id"],
        "fingerprint": meta["fingerprint"],
        "plan": meta["plan"],
        "state_partitions": meta["state_partitions"],
    });
    std::fs::write(
        chk.join("metadata"),
        serde_json::to_string_pretty(&old).unwrap(),
    )
    .unwrap();
    stream.add_rows(&[view("a", 2)]).unwrap();
    let s = Session::new();
    let out = run(
        &s,
        views_filter_added::LockedViews::writer_from(&s, Box::new(stream)),
        &chk,
        "locked_views",
    );
    let rows = views_filter_added::LockedViews::rows(&out).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].views, rows[0].total), (2, Some(3)));
}
