//! The testing kit (`weir::testing`, feature `testing`) used as a user
//! would: Spark's testStream actions over a declared query and over the
//! builder, readable failures, an insta snapshot of every micro-batch, and
//! two conformance scenarios rewritten with it.

use serde_json::json;
use weir::functions::{col, count_star, sum};
use weir::plan::{DataType, Field, OutputMode};
use weir::source::MemoryStream;
use weir::testing::*;
use weir::{Session, StreamWriter, Timestamp, Window};

weir::stream_query! {
    /// Views per page and 10-minute window, each window emitted once when
    /// the watermark (10 minutes behind the newest view) passes its end.
    query PageViewCounts {
        source: memory,
        schema: View { page: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "10 minutes"), page],
        aggregate: { views: count() },
        sink: memory,
    }
}

fn at(hms: &str) -> Timestamp {
    Timestamp::parse(&format!("2024-01-01T{hms}Z")).unwrap()
}

fn view(page: &str, hms: &str) -> View {
    View {
        page: page.into(),
        ts: at(hms),
    }
}

fn views(start: &str, page: &str, n: i64) -> PageViewCountsRow {
    let start = at(start);
    PageViewCountsRow {
        window: Window {
            start,
            end: Timestamp(start.0 + 600_000_000),
        },
        page: page.into(),
        views: n,
    }
}

/// The conformance scenarios' input: `ts TIMESTAMP, key STRING, value BIGINT`.
fn events() -> MemoryStream {
    MemoryStream::new(&[
        Field::new("ts", DataType::Timestamp),
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ])
}

fn ev(hms: &str, key: &str, value: i64) -> serde_json::Value {
    json!({"ts": format!("2024-01-01T{hms}Z"), "key": key, "value": value})
}

fn last_batch_is(id: i64) -> Action {
    assert_on_query(&format!("the last batch is {id}"), move |q| {
        q.last_progress().map(|p| p.batch_id) == Some(id)
    })
}

#[test]
fn declared_windowed_count_emits_each_window_once_the_watermark_passes() {
    let input = MemoryStream::of::<View>();
    StreamTest::with_source(&input, PageViewCounts::writer_from).run(vec![
        add_data(
            &input,
            &[
                view("/a", "12:01:00"),
                view("/a", "12:04:00"),
                view("/b", "12:09:00"),
            ],
        ),
        // Batch 0 and its no-data batch 1 (watermark 11:59): windows open.
        check_new_answer(Rows::none()),
        last_batch_is(1),
        add_data(&input, &[view("/a", "12:12:00")]),
        // Watermark 12:02: [12:00, 12:10) is still open.
        check_new_answer(Rows::none()),
        add_data(&input, &[view("/b", "12:21:00")]),
        // Batch 4 moves the watermark to 12:11; its no-data batch 5 emits.
        check_new_answer(&[views("12:00:00", "/a", 2), views("12:00:00", "/b", 1)]),
        check_last_batch(&[views("12:00:00", "/a", 2), views("12:00:00", "/b", 1)]),
        last_batch_is(5),
        // A view for the closed window is late: dropped, nothing emitted.
        add_data(&input, &[view("/a", "12:05:00")]),
        check_new_answer(Rows::none()),
        check_answer(&[views("12:00:00", "/a", 2), views("12:00:00", "/b", 1)]),
    ]);
}

fn keyed_count(session: &Session, input: &MemoryStream) -> weir::Result<StreamWriter> {
    Ok(session
        .read_stream(input.clone())
        .group_by(vec![col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update))
}

#[test]
fn a_restart_on_the_same_checkpoint_keeps_the_counts() {
    let input = events();
    let i = input.clone();
    let outcome = StreamTest::new(move |s| keyed_count(s, &i)).run(vec![
        add_data(
            &input,
            json!([ev("12:00:00", "a", 1), ev("12:01:00", "a", 2)]),
        ),
        check_new_answer(json!([{"key": "a", "n": 2}])),
        stop_stream(),
        // Rows added while the query is down are read at the restart.
        add_data(
            &input,
            json!([ev("12:02:00", "a", 3), ev("12:03:00", "b", 4)]),
        ),
        start_stream(),
        check_new_answer(json!([{"key": "a", "n": 3}, {"key": "b", "n": 1}])),
        assert_on_query("the restart went on from batch 1", |q| {
            q.recent_progress()
                .iter()
                .map(|p| p.batch_id)
                .collect::<Vec<_>>()
                == [1]
        }),
        stop_stream(),
        start_stream(),
        add_data(&input, json!([ev("12:04:00", "b", 5)])),
        check_new_answer(json!([{"key": "b", "n": 2}])),
        check_answer(json!([
            {"key": "a", "n": 2},
            {"key": "a", "n": 3},
            {"key": "b", "n": 1},
            {"key": "b", "n": 2},
        ])),
    ]);
    assert_eq!(
        outcome
            .batches
            .iter()
            .map(|b| b.batch_id)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn complete_mode_checks_the_latest_result_table() {
    let input = events();
    let i = input.clone();
    StreamTest::new(move |s| Ok(keyed_count(s, &i)?.output_mode(OutputMode::Complete))).run(vec![
        add_data(&input, json!([ev("12:00:00", "a", 1)])),
        check_answer(json!([{"key": "a", "n": 1}])),
        add_data(&input, json!([ev("12:00:00", "b", 1)])),
        check_answer(json!([{"key": "a", "n": 1}, {"key": "b", "n": 1}])),
        check_new_answer(Rows::none()),
        add_data(&input, json!([])),
        check_new_answer(json!([{"key": "a", "n": 1}, {"key": "b", "n": 1}])),
    ]);
}

fn ratio(session: &Session, input: &MemoryStream) -> weir::Result<StreamWriter> {
    Ok(session
        .read_stream(input.clone())
        .select(vec![("key", "key"), ("1000 / value", "per_mille")])
        .write_stream())
}

#[test]
fn expect_failure_sees_the_error_and_the_batch_fails_again_after_a_restart() {
    let input = events();
    let i = input.clone();
    StreamTest::new(move |s| ratio(s, &i)).run(vec![
        add_data(&input, json!([ev("12:00:00", "a", 4)])),
        check_new_answer(json!([{"key": "a", "per_mille": 250}])),
        add_data(&input, json!([ev("12:00:00", "b", 0)])),
        expect_failure("Divide by zero"),
        // The failed batch was logged: it runs again, with the same rows.
        start_stream(),
        expect_failure("Divide by zero"),
    ]);
}

#[test]
fn a_query_that_cannot_start_is_an_expected_failure() {
    let input = events();
    let i = input.clone();
    StreamTest::new(move |s| {
        // Append mode on an aggregation without a watermark.
        Ok(keyed_count(s, &i)?.output_mode(OutputMode::Append))
    })
    .run(vec![expect_failure(
        "Append output mode not supported when there are streaming aggregations",
    )]);
}

fn panic_text(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("the test should fail");
    e.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn a_failed_check_shows_expected_and_actual_rows_the_batch_and_the_action() {
    let text = panic_text(|| {
        let input = events();
        let i = input.clone();
        StreamTest::new(move |s| keyed_count(s, &i)).run(vec![
            add_data(
                &input,
                json!([ev("12:00:00", "a", 1), ev("12:00:00", "b", 1)]),
            ),
            check_new_answer(json!([{"key": "a", "n": 2}, {"key": "b", "n": 1}])),
            stop_stream(),
        ]);
    });
    for part in [
        "stream test failed at action #1 CheckNewAnswer(2 rows) (latest batch 0)",
        "expected 2 rows, got 2",
        "expected, not emitted:\n    {key: a, n: 2}",
        "emitted, not expected:\n    {key: a, n: 1}",
        "=> #1 CheckNewAnswer(2 rows)",
        "   #2 StopStream",
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }
    let text = panic_text(|| {
        let input = events();
        let i = input.clone();
        StreamTest::new(move |s| ratio(s, &i)).run(vec![
            add_data(&input, json!([ev("12:00:00", "a", 4)])),
            expect_failure("Divide by zero"),
        ]);
    });
    assert!(
        text.contains(
            "expected a failure containing \"Divide by zero\", but the query processed everything"
        ),
        "{text}"
    );
    let text = panic_text(|| {
        let input = events();
        let i = input.clone();
        StreamTest::new(move |s| keyed_count(s, &i)).run(vec![
            add_data(&input, json!([ev("12:00:00", "a", 1)])),
            check_answer(json!([{"key": "a", "count": 1}])),
        ]);
    });
    assert!(
        text.contains("the expected JSON rows do not fit the result's columns"),
        "{text}"
    );
}

#[test]
fn every_micro_batch_as_a_snapshot() {
    let input = MemoryStream::of::<View>();
    let test = StreamTest::with_source(&input, PageViewCounts::writer_from)
        .show_watermark()
        .show_state();
    insta::assert_snapshot!(run(
        test,
        vec![
            add_data(&input, &[view("/a", "12:01:00"), view("/b", "12:09:00")]),
            add_data(&input, &[view("/a", "12:04:00")]),
            stop_stream(),
            start_stream(),
            add_data(&input, &[view("/a", "12:25:00")]),
            add_data(&input, &[view("/b", "12:02:00")]),
        ]
    ));
}

/// `key_sum_update.json`: groupBy(key) sum + count, no watermark, update
/// mode, with an empty batch.
#[test]
fn conformance_key_sum_update() {
    let input = events();
    let i = input.clone();
    StreamTest::new(move |s| {
        Ok(s.read_stream(i.clone())
            .group_by(vec![col("key")])
            .agg(vec![sum("value", "sum"), count_star("n")])
            .write_stream()
            .output_mode(OutputMode::Update))
    })
    .run(vec![
        add_data(
            &input,
            json!([
                ev("12:00:00", "a", 1),
                ev("12:01:00", "b", 2),
                ev("12:02:00", "a", 3)
            ]),
        ),
        check_new_answer(json!([{"key": "a", "sum": 4, "n": 2}, {"key": "b", "sum": 2, "n": 1}])),
        add_data(&input, json!([])),
        check_new_answer(Rows::none()),
        add_data(
            &input,
            json!([ev("12:03:00", "c", 4), ev("12:04:00", "a", 5)]),
        ),
        check_new_answer(json!([{"key": "a", "sum": 9, "n": 3}, {"key": "c", "sum": 4, "n": 1}])),
        add_data(&input, json!([ev("09:00:00", "b", 6)])),
        check_new_answer(json!([{"key": "b", "sum": 8, "n": 2}])),
        last_batch_is(3),
    ]);
}

/// `restart_tumbling_append_wm.json`: a 10-minute tumbling count per key,
/// watermark 10 minutes, append mode, stopped and restarted on the same
/// checkpoint after input batches 1 and 3.
#[test]
fn conformance_restart_tumbling_append_wm() {
    let input = events();
    let i = input.clone();
    let win = |start: &str, end: &str, key: &str, count: i64| {
        json!({"window": {"start": format!("2024-01-01T{start}Z"), "end": format!("2024-01-01T{end}Z")},
               "key": key, "count": count})
    };
    StreamTest::new(move |s| {
        Ok(s.read_stream(i.clone())
            .with_watermark("ts", "10 minutes")
            .group_by(vec![
                weir::functions::window("ts", "10 minutes"),
                col("key"),
            ])
            .agg(vec![count_star("count")])
            .write_stream())
    })
    .run(vec![
        add_data(
            &input,
            json!([
                ev("12:02:00", "a", 1),
                ev("12:07:00", "b", 2),
                ev("12:03:00", "a", 3)
            ]),
        ),
        check_new_answer(Rows::none()),
        add_data(
            &input,
            json!([
                ev("12:12:00", "a", 4),
                ev("12:01:00", "b", 5),
                ev("12:14:00", "b", 6)
            ]),
        ),
        check_new_answer(Rows::none()),
        last_batch_is(3),
        stop_stream(),
        start_stream(),
        add_data(&input, json!([ev("12:26:00", "a", 7)])),
        check_new_answer(json!([
            win("12:00:00", "12:10:00", "a", 2),
            win("12:00:00", "12:10:00", "b", 2)
        ])),
        last_batch_is(5),
        add_data(
            &input,
            json!([
                ev("12:05:00", "a", 8),
                ev("12:13:00", "b", 9),
                ev("12:08:00", "a", 10),
                ev("12:09:00", "a", 11)
            ]),
        ),
        check_new_answer(Rows::none()),
        stop_stream(),
        start_stream(),
        add_data(&input, json!([])),
        check_new_answer(Rows::none()),
        add_data(&input, json!([ev("12:45:00", "c", 12)])),
        check_new_answer(json!([
            win("12:10:00", "12:20:00", "a", 1),
            win("12:10:00", "12:20:00", "b", 2),
            win("12:20:00", "12:30:00", "a", 1)
        ])),
        last_batch_is(9),
    ]);
}

#[test]
fn a_sorted_query_is_checked_in_its_order() {
    let input = events();
    let top = |input: &MemoryStream| {
        let i = input.clone();
        StreamTest::new(move |s| {
            Ok(s.read_stream(i.clone())
                .group_by(vec![col("key")])
                .agg(vec![count_star("n")])
                .order_by(vec![("n", true)])
                .write_stream()
                .output_mode(OutputMode::Complete))
        })
    };
    let rows = json!([
        ev("12:00:00", "a", 1),
        ev("12:00:00", "b", 1),
        ev("12:00:00", "b", 1)
    ]);
    top(&input).run(vec![
        add_data(&input, rows.clone()),
        check_answer(json!([{"key": "b", "n": 2}, {"key": "a", "n": 1}])),
    ]);
    let input = events();
    let text = panic_text(move || {
        top(&input).run(vec![
            add_data(&input, rows),
            check_answer(json!([{"key": "a", "n": 1}, {"key": "b", "n": 2}])),
        ]);
    });
    assert!(
        text.contains("rows differ (compared in order: the query sorts)")
            && text.contains("same rows, different order"),
        "{text}"
    );
}

#[test]
fn a_kept_checkpoint_can_be_read_after_the_test() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let input = events();
    let i = input.clone();
    StreamTest::new(move |s| keyed_count(s, &i))
        .checkpoint_location(&chk)
        .run(vec![
            add_data(
                &input,
                json!([ev("12:00:00", "a", 1), ev("12:00:00", "b", 1)]),
            ),
            check_new_answer(json!([{"key": "a", "n": 1}, {"key": "b", "n": 1}])),
        ]);
    let state = weir::state::read::read(chk.to_str().unwrap(), 0, None).unwrap();
    assert_eq!(state.num_rows(), 2, "one state row per key");
}

fn keyed_count_every_10s(session: &Session, input: &MemoryStream) -> weir::Result<StreamWriter> {
    Ok(
        keyed_count(session, input)?.trigger(weir::Trigger::ProcessingTime(
            std::time::Duration::from_secs(10),
        )),
    )
}

fn batches_so_far(n: usize) -> Action {
    assert_on_query(&format!("{n} batches ran"), move |q| {
        q.recent_progress().len() == n
    })
}

#[test]
fn a_processing_time_trigger_runs_only_when_the_manual_clock_reaches_its_tick() {
    use std::time::Duration;
    let input = events();
    let i = input.clone();
    let out = StreamTest::new(move |s| keyed_count_every_10s(s, &i)).run(vec![
        add_data(&input, json!([{"key": "a"}])),
        // 9 s of the 10 s interval: the clock has not reached the tick.
        advance_manual_clock(Duration::from_secs(9)),
        check_answer(Rows::none()),
        batches_so_far(0),
        advance_manual_clock(Duration::from_secs(1)),
        check_new_answer(json!([{"key": "a", "n": 1}])),
        batches_so_far(1),
        assert_on_query("the batch is timed by the manual clock", |q| {
            q.last_progress().map(|p| p.timestamp) == Some("1970-01-01T00:00:10.000Z".into())
        }),
        // Real time does not trigger anything either.
        add_data(&input, json!([{"key": "a"}, {"key": "b"}])),
        assert_on_query("no batch in real time", |_| {
            std::thread::sleep(Duration::from_millis(100));
            true
        }),
        check_new_answer(Rows::none()),
        batches_so_far(1),
        // Past the next tick (20 s, now 25 s): one batch; the schedule
        // stays on multiples of 10 s, so the next tick is 30 s.
        advance_manual_clock(Duration::from_secs(15)),
        check_new_answer(json!([{"key": "a", "n": 2}, {"key": "b", "n": 1}])),
        batches_so_far(2),
        add_data(&input, json!([{"key": "b"}])),
        advance_manual_clock(Duration::from_secs(4)),
        check_new_answer(Rows::none()),
        advance_manual_clock(Duration::from_secs(1)),
        check_new_answer(json!([{"key": "b", "n": 2}])),
    ]);
    let ids: Vec<i64> = out.batches.iter().map(|b| b.batch_id).collect();
    assert_eq!(ids, vec![0, 1, 2]);
}

#[test]
fn the_rate_source_follows_the_manual_clock() {
    use std::time::Duration;
    let out = StreamTest::new(|s| {
        Ok(
            s.read_stream(weir::source::RateSource::new().rows_per_second(5))
                .write_stream()
                .trigger(weir::Trigger::ProcessingTime(Duration::from_secs(1))),
        )
    })
    .run(vec![
        // Created at 0 on the manual clock: one second gives 5 rows, timed
        // 200 ms apart by that clock.
        advance_manual_clock(Duration::from_secs(1)),
        check_new_answer(json!([
            {"timestamp": "1970-01-01T00:00:00.000Z", "value": 0},
            {"timestamp": "1970-01-01T00:00:00.200Z", "value": 1},
            {"timestamp": "1970-01-01T00:00:00.400Z", "value": 2},
            {"timestamp": "1970-01-01T00:00:00.600Z", "value": 3},
            {"timestamp": "1970-01-01T00:00:00.800Z", "value": 4},
        ])),
        advance_manual_clock(Duration::from_secs(2)),
        advance_manual_clock(Duration::from_millis(500)),
    ]);
    // Batch 0 at start reads the empty first second; then rowsPerSecond ×
    // the seconds advanced (a half second is not a row yet).
    let rows: Vec<i64> = out.batches.iter().map(|b| b.num_input_rows).collect();
    assert_eq!(rows, vec![0, 5, 10]);
    let values: usize = out.batches.iter().map(|b| b.lines().len()).sum();
    assert_eq!(values, 15);
}

#[test]
fn the_rate_source_follows_the_manual_clock_with_the_default_trigger() {
    use std::time::Duration;
    let out = StreamTest::new(|s| {
        Ok(
            s.read_stream(weir::source::RateSource::new().rows_per_second(3))
                .write_stream(),
        )
    })
    .run(vec![
        advance_manual_clock(Duration::from_secs(4)),
        advance_manual_clock(Duration::from_secs(1)),
    ]);
    let rows: i64 = out.batches.iter().map(|b| b.num_input_rows).sum();
    assert_eq!(rows, 3 * 5);
    assert_eq!(out.batches.last().map(|b| b.num_input_rows), Some(3));
}

#[test]
fn advancing_the_clock_of_a_stopped_query_says_so() {
    let input = events();
    let i = input.clone();
    let text = panic_text(move || {
        StreamTest::new(move |s| keyed_count_every_10s(s, &i)).run(vec![
            stop_stream(),
            advance_manual_clock(std::time::Duration::from_secs(10)),
        ]);
    });
    assert!(text.contains("AdvanceManualClock"), "{text}");
    assert!(text.contains("the query is not running"), "{text}");
}
